//! A damaged index never crashes or lies: every file kind of a small index
//! truncated, extended, flipped and deleted, each searched and verified; a
//! read-only copy searched; a full disk during `--append`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{ok, run, s, snapshot};

/// Every file of an index folder (CURRENT and the live generation), relative.
fn files(index: &Path) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = snapshot(index)
        .into_iter()
        .map(|(p, _)| p.strip_prefix(index).unwrap().to_path_buf())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            // tantivy's lock files are never read.
            !(name.starts_with(".tantivy-") && name.ends_with(".lock"))
        })
        .collect();
    out.sort();
    out
}

fn copy_dir(from: &Path, to: &Path) {
    let status = Command::new("cp")
        .args(["-a", s(from), s(to)])
        .status()
        .unwrap();
    assert!(status.success());
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Truncate,
    Extend,
    Flip,
    Delete,
}

impl Damage {
    fn apply(self, path: &Path) {
        let bytes = std::fs::read(path).unwrap();
        match self {
            Damage::Truncate => std::fs::write(path, &bytes[..bytes.len() / 2]).unwrap(),
            Damage::Extend => {
                let mut longer = bytes.clone();
                longer.extend_from_slice(&[0x5a; 16]);
                std::fs::write(path, longer).unwrap();
            }
            Damage::Flip => {
                let mut flipped = bytes.clone();
                // A few bytes in the middle: where a disk error or a bad
                // sync lands, and past any header a loader checks first.
                let mid = flipped.len() / 2;
                for b in flipped.iter_mut().skip(mid).take(3) {
                    *b ^= 0x41;
                }
                std::fs::write(path, flipped).unwrap();
            }
            Damage::Delete => std::fs::remove_file(path).unwrap(),
        }
    }
}

const QUERY: &str = "Where was the glassblower born?";

fn search(index: &Path) -> std::process::Output {
    run(&[
        "search",
        s(index),
        QUERY,
        "--mode",
        "hybrid",
        "-k",
        "5",
        "--json",
    ])
}

#[test]
fn every_damaged_file_is_an_error_naming_it_never_a_panic_or_other_hits() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = common::generated_index(tmp.path(), 40, 5, 3);
    let out = search(&index);
    assert!(out.status.success());
    let baseline = String::from_utf8(out.stdout).unwrap();
    let all = files(&index);
    let kinds: Vec<String> = all.iter().map(|p| p.to_string_lossy().into()).collect();
    for needed in [
        "CURRENT",
        "manifest.json",
        "vectors.f32",
        "sentences.f32",
        "store.frozen",
        "graph.frozen",
    ] {
        assert!(
            kinds.iter().any(|k| k.ends_with(needed)),
            "{needed} in {kinds:?}"
        );
    }
    for needed in ["/bm25/", "/store/", "/hnsw/"] {
        assert!(
            kinds.iter().any(|k| k.contains(needed)),
            "{needed} in {kinds:?}"
        );
    }
    let mut cases = 0;
    for file in &all {
        let size = std::fs::metadata(index.join(file)).unwrap().len();
        for damage in [
            Damage::Truncate,
            Damage::Extend,
            Damage::Flip,
            Damage::Delete,
        ] {
            if size == 0 && matches!(damage, Damage::Truncate | Damage::Flip) {
                continue;
            }
            cases += 1;
            let case = tempfile::tempdir().unwrap();
            let copy = case.path().join("index");
            copy_dir(&index, &copy);
            damage.apply(&copy.join(file));
            let what = format!("{damage:?} {}", file.display());
            let out = search(&copy);
            let stderr = String::from_utf8_lossy(&out.stderr);
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(!stderr.contains("panicked"), "{what}: {stderr}");
            // The sled store and hnsw_rs's files are read only by changes
            // (searches read store.frozen and graph.frozen, and check the
            // others' sizes only), the sentence vectors only by the extractive
            // reader: a flipped byte there leaves a search's answer as it was,
            // and `index verify` names the file.
            let unread = ["store/", "hnsw/", "sentences.f32"]
                .iter()
                .any(|dir| file.to_string_lossy().contains(dir));
            if unread && out.status.success() {
                assert_eq!(
                    stdout, baseline,
                    "{what}: a file searches do not read changed the hits"
                );
            } else {
                assert!(
                    !out.status.success(),
                    "{what}: search succeeded{}",
                    if stdout == baseline {
                        " (same hits)"
                    } else {
                        " with other hits"
                    }
                );
            }
            let name = file.file_name().unwrap().to_string_lossy();
            let parent = file
                .parent()
                .and_then(|p| p.file_name())
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            if !out.status.success() {
                assert!(
                    stderr.contains(&*name) || (!parent.is_empty() && stderr.contains(&parent)),
                    "{what}: the error does not name the file: {stderr}"
                );
            }
            if file.ends_with("sentences.f32") && out.status.success() {
                // The reader that reads them names them.
                let out = run(&["ask", s(&copy), QUERY, "--reader", "extractive"]);
                let stderr = String::from_utf8_lossy(&out.stderr);
                assert!(
                    !out.status.success()
                        && stderr.contains("sentences.f32")
                        && !stderr.contains("panicked"),
                    "{what}: ask: {stderr}"
                );
            }
            if file.to_string_lossy() != "CURRENT" {
                let out = run(&["index", "verify", s(&copy)]);
                let report = String::from_utf8_lossy(&out.stdout).into_owned()
                    + &String::from_utf8_lossy(&out.stderr);
                assert!(!out.status.success(), "{what}: verify passed: {report}");
                assert!(report.contains(&*name), "{what}: verify: {report}");
            }
        }
    }
    assert!(cases >= 40, "only {cases} cases");

    // The whole store folder gone: an error, and nothing recreated.
    let case = tempfile::tempdir().unwrap();
    let copy = case.path().join("index");
    copy_dir(&index, &copy);
    let store = std::fs::read_dir(&copy)
        .unwrap()
        .flatten()
        .find(|e| e.file_name().to_string_lossy().starts_with("gen-"))
        .unwrap()
        .path()
        .join("store");
    std::fs::remove_dir_all(&store).unwrap();
    let out = search(&copy);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("store"));
    assert!(!store.exists(), "a reader recreated the store");

    // `serve` on a damaged index: an error naming the file, not a crash.
    let case = tempfile::tempdir().unwrap();
    let copy = case.path().join("index");
    copy_dir(&index, &copy);
    let vectors = all.iter().find(|p| p.ends_with("vectors.f32")).unwrap();
    Damage::Flip.apply(&copy.join(vectors));
    let out = run(&[
        "serve",
        "--index",
        s(&copy),
        "--addr",
        "127.0.0.1:0",
        "--no-default-model",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        stderr.contains("vectors.f32") && !stderr.contains("panicked"),
        "{stderr}"
    );

    // The intact index verifies.
    let report = ok(&["index", "verify", s(&index)]);
    assert!(report.contains("intact"), "{report}");
}

/// Runs `script` as root of a private mount namespace (`unshare -rm`), where
/// tmpfs and read-only bind mounts need no privilege on the host.
fn in_mount_namespace(script: &str) -> std::process::Output {
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-ec", script])
        .output()
        .expect("unshare (util-linux) runs");
    assert!(
        out.status.success() || !String::from_utf8_lossy(&out.stderr).contains("unshare:"),
        "this test needs user and mount namespaces (unshare -rm): {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

#[test]
fn a_read_only_index_is_searched_and_never_written() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, index) = common::generated_index(tmp.path(), 30, 5, 4);
    let before = snapshot(&index);
    let bin = env!("CARGO_BIN_EXE_capstan");
    let encoder = common::encoder_dir();
    let out = in_mount_namespace(&format!(
        "mount --bind {dir} {dir}; mount -o remount,ro,bind {dir}; \
         if touch {dir}/probe 2>/dev/null; then echo writable; exit 3; fi; \
         CAPSTAN_ENCODER={enc} {bin} search {dir} '{QUERY}' --mode hybrid -k 5 --json",
        dir = s(&index),
        enc = s(&encoder),
    ));
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let ro: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let out = search(&index);
    assert!(out.status.success());
    let rw: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(ro, rw);
    assert_eq!(snapshot(&index), before, "searching wrote to the index");
}

#[test]
fn a_full_disk_during_append_names_the_new_generation_and_leaves_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let (data, index) = common::generated_index(tmp.path(), 30, 5, 5);
    let size: u64 = snapshot(&index).iter().map(|(_, b)| b.len() as u64).sum();
    let more = tmp.path().join("more");
    ok(&[
        "corpus",
        "generate",
        "--out",
        s(&more),
        "--documents",
        "200",
        "--seed",
        "9",
    ]);
    let disk = tmp.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let bin = env!("CARGO_BIN_EXE_capstan");
    let encoder = common::encoder_dir();
    // Room for the index and a little more: the append's copy of it fills the disk.
    let kib = size * 3 / 2 / 1024 + 64;
    let out = in_mount_namespace(&format!(
        "mount -t tmpfs -o size={kib}k tmpfs {disk}; cp -a {index} {disk}/index; \
         export CAPSTAN_ENCODER={enc}; \
         if {bin} index {more}/corpus.jsonl --out {disk}/index --append -q 2>{disk}/../err; then exit 4; fi; \
         ls {disk}/index; \
         {bin} search {disk}/index '{QUERY}' -k 3 --json > {disk}/../hits",
        disk = s(&disk),
        index = s(&index),
        more = s(&more),
        enc = s(&encoder),
    ));
    let listing = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{listing}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = std::fs::read_to_string(tmp.path().join("err")).unwrap();
    assert!(err.contains("No space left on device"), "{err}");
    assert!(
        err.contains("gen-00000002"),
        "names the new generation: {err}"
    );
    assert!(!err.contains("panicked"), "{err}");
    let entries: Vec<&str> = listing.split_whitespace().collect();
    assert_eq!(
        entries,
        ["CURRENT", "gen-00000001"],
        "the failed generation is gone"
    );
    let hits: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(tmp.path().join("hits")).unwrap()).unwrap();
    assert_eq!(hits.as_array().unwrap().len(), 3);
    let _ = data;
}
