//! Resumable, concurrent evaluation runs: each finished item is appended to
//! `items.jsonl` as `{"key", "result"}`; a re-run with the same `config.json`
//! skips the items already there, a different configuration is refused unless
//! the user asks to restart.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;

use anyhow::{bail, Context};
use capstan_indexer::Progress;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How to run the items of one evaluation.
pub struct RunSpec<'a> {
    /// Output folder (created when missing).
    pub out: &'a Path,
    /// Everything the results depend on; stored as `config.json`.
    pub config: Value,
    /// Discard earlier items instead of resuming.
    pub restart: bool,
    /// Worker threads.
    pub concurrency: usize,
    /// Progress bar name.
    pub stage: &'a str,
    /// Progress reporting.
    pub progress: &'a dyn Progress,
}

#[derive(Serialize, Deserialize)]
struct Line<T> {
    key: String,
    result: T,
}

/// Runs `work` on every item not finished earlier, `concurrency` at a time, and
/// returns all results in the order of `items` (keys must be unique).
pub fn run<I: Sync, T: Serialize + DeserializeOwned + Send>(
    spec: &RunSpec,
    items: &[(String, I)],
    work: impl Fn(&I) -> anyhow::Result<T> + Sync,
) -> anyhow::Result<Vec<T>> {
    std::fs::create_dir_all(spec.out)
        .with_context(|| format!("creating {}", spec.out.display()))?;
    let items_path = spec.out.join("items.jsonl");
    check_config(spec, &items_path)?;
    let done: Mutex<HashMap<String, T>> = Mutex::new(load_items(&items_path)?);
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&items_path)
        .with_context(|| format!("opening {}", items_path.display()))?;
    let file = Mutex::new(file);
    let pending: Vec<&(String, I)> = {
        let done = done.lock().expect("results lock");
        items
            .iter()
            .filter(|(k, _)| !done.contains_key(k))
            .collect()
    };
    spec.progress.stage(spec.stage, items.len() as u64);
    spec.progress.advance((items.len() - pending.len()) as u64);
    let next = AtomicUsize::new(0);
    let failed = AtomicBool::new(false);
    let first_error: Mutex<Option<anyhow::Error>> = Mutex::new(None);
    let worker = || {
        while !failed.load(Ordering::Relaxed) {
            let Some((key, input)) = pending.get(next.fetch_add(1, Ordering::Relaxed)).copied()
            else {
                break;
            };
            let outcome = work(input).and_then(|result| {
                let mut line = serde_json::to_string(&Line {
                    key: key.clone(),
                    result,
                })?;
                line.push('\n');
                file.lock()
                    .expect("items lock")
                    .write_all(line.as_bytes())
                    .with_context(|| format!("appending to {}", items_path.display()))?;
                let Line { result, .. } = serde_json::from_str::<Line<T>>(&line)?;
                Ok(result)
            });
            match outcome {
                Ok(result) => {
                    done.lock()
                        .expect("results lock")
                        .insert(key.clone(), result);
                    spec.progress.advance(1);
                }
                Err(e) => {
                    failed.store(true, Ordering::Relaxed);
                    first_error
                        .lock()
                        .expect("error lock")
                        .get_or_insert(e.context(format!("item {key}")));
                }
            }
        }
    };
    std::thread::scope(|s| {
        for _ in 0..spec.concurrency.min(pending.len().max(1)) {
            s.spawn(worker);
        }
    });
    spec.progress.finish();
    if let Some(e) = first_error.into_inner().expect("error lock") {
        return Err(e.context(format!(
            "finished items are kept in {}; run again to resume",
            items_path.display()
        )));
    }
    let mut done = done.into_inner().expect("results lock");
    items
        .iter()
        .map(|(k, _)| {
            done.remove(k)
                .with_context(|| format!("item {k} has no result"))
        })
        .collect()
}

/// Compares the stored configuration with this run's; writes it when new.
fn check_config(spec: &RunSpec, items_path: &Path) -> anyhow::Result<()> {
    let path = spec.out.join("config.json");
    let stored: Option<Value> = match std::fs::read_to_string(&path) {
        Ok(text) => Some(
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?,
        ),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let has_items = items_path.is_file();
    let matches = stored.as_ref() == Some(&spec.config);
    if spec.restart || (!matches && !has_items) {
        if has_items {
            std::fs::remove_file(items_path)
                .with_context(|| format!("removing {}", items_path.display()))?;
        }
    } else if !matches {
        let changed = match (&stored, &spec.config) {
            (Some(Value::Object(a)), Value::Object(b)) => {
                let mut keys: Vec<&str> = b.keys().chain(a.keys()).map(String::as_str).collect();
                keys.sort_unstable();
                keys.dedup();
                keys.retain(|k| a.get(*k) != b.get(*k));
                keys.join(", ")
            }
            _ => "config.json is missing".into(),
        };
        bail!(
            "{} holds a run with a different configuration (changed: {changed}); pass --restart to discard it, or use another --out",
            spec.out.display()
        );
    }
    let json = serde_json::to_string_pretty(&spec.config)? + "\n";
    std::fs::write(&path, json).with_context(|| format!("writing {}", path.display()))
}

/// Reads finished items. A torn last line (the run was killed while writing it)
/// is cut off; any other bad line is an error naming it.
fn load_items<T: DeserializeOwned>(path: &Path) -> anyhow::Result<HashMap<String, T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(HashMap::new()),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let mut out = HashMap::new();
    let mut offset = 0;
    for (i, line) in text.split_inclusive('\n').enumerate() {
        let complete = line.ends_with('\n');
        if line.trim().is_empty() {
            offset += line.len();
            continue;
        }
        if !complete {
            // The run was killed mid-write: drop the partial line.
            let f = std::fs::OpenOptions::new().write(true).open(path)?;
            f.set_len(offset as u64)?;
            break;
        }
        match serde_json::from_str::<Line<T>>(line) {
            Ok(l) => {
                out.insert(l.key, l.result);
            }
            Err(e) => bail!(
                "{}:{}: {e} (remove the line or pass --restart)",
                path.display(),
                i + 1
            ),
        }
        offset += line.len();
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_indexer::NoProgress;

    fn spec<'a>(out: &'a Path, config: Value, restart: bool) -> RunSpec<'a> {
        RunSpec {
            out,
            config,
            restart,
            concurrency: 3,
            stage: "test",
            progress: &NoProgress,
        }
    }

    #[test]
    fn resumes_skips_done_items_and_refuses_a_changed_config() {
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<(String, u32)> = (0..20).map(|i| (format!("q{i}"), i)).collect();
        let calls = AtomicUsize::new(0);
        let work = |i: &u32| {
            calls.fetch_add(1, Ordering::Relaxed);
            Ok(i * 2)
        };
        let cfg = serde_json::json!({"task": "t", "k": 5});
        let first = run(&spec(dir.path(), cfg.clone(), false), &items, work).unwrap();
        assert_eq!(first, (0..20).map(|i| i * 2).collect::<Vec<_>>());
        assert_eq!(calls.load(Ordering::Relaxed), 20);

        // Keep 15 lines and tear the 16th, as a kill mid-write would.
        let path = dir.path().join("items.jsonl");
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let kept = lines[..15].join("\n") + "\n" + &lines[15][..5];
        std::fs::write(&path, kept).unwrap();
        calls.store(0, Ordering::Relaxed);
        let again = run(&spec(dir.path(), cfg.clone(), false), &items, work).unwrap();
        assert_eq!(again, first);
        assert_eq!(calls.load(Ordering::Relaxed), 5);
        assert_eq!(std::fs::read_to_string(&path).unwrap().lines().count(), 20);

        let other = serde_json::json!({"task": "t", "k": 6});
        let err = run(&spec(dir.path(), other.clone(), false), &items, work).unwrap_err();
        assert!(format!("{err:#}").contains("changed: k"), "{err:#}");
        calls.store(0, Ordering::Relaxed);
        run(&spec(dir.path(), other, true), &items, work).unwrap();
        assert_eq!(calls.load(Ordering::Relaxed), 20);
    }

    #[test]
    fn an_error_keeps_finished_items() {
        let dir = tempfile::tempdir().unwrap();
        let items: Vec<(String, u32)> = (0..10).map(|i| (format!("q{i}"), i)).collect();
        let cfg = serde_json::json!({});
        let mut s = spec(dir.path(), cfg.clone(), false);
        s.concurrency = 1;
        let err = run(&s, &items, |i| if *i == 6 { bail!("boom") } else { Ok(*i) }).unwrap_err();
        assert!(format!("{err:#}").contains("item q6: boom"), "{err:#}");
        let text = std::fs::read_to_string(dir.path().join("items.jsonl")).unwrap();
        assert_eq!(text.lines().count(), 6);
        assert_eq!(
            run(&s, &items, |i| Ok(*i)).unwrap(),
            (0..10).collect::<Vec<_>>()
        );
    }
}
