//! The prefix cache kept on disk between one-shot runs (`capstan ask`): a process that reads
//! one prompt and exits would otherwise read again, every time, the instruction and worked
//! example every span prompt opens with.
//!
//! One safetensors file per model: a `key` naming the model (its file, size, modification
//! time and KV type: another model's keys and values are never read), then per block its
//! header (`b{n}.head`: the parent hash as two u32, its depth, its tokens) and its tensors
//! (`b{n}.{layer}.k`, `.v`, `.g`). A file that cannot be read, or was written for another
//! model, is ignored with a warning: the cache is only ever a shortcut.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use candle_core::{Device, Tensor};
use capstan_reader::{KvBlock, Llama};

use super::prefix::{PrefixCache, BLOCK_TOKENS};

/// Where a scheduler keeps its prefix cache between runs, and for which model.
#[derive(Debug, Clone)]
pub struct PrefixStore {
    /// The file.
    pub path: PathBuf,
    /// What names the model and its KV type; a file with another key is not read.
    pub key: String,
    /// The most blocks written (the most recently used).
    pub max_blocks: usize,
}

impl PrefixStore {
    /// Reads the blocks kept for this model into `cache`; nothing when there is no file yet,
    /// a warning when it cannot be used.
    pub(super) fn load_into(&self, model: &Llama, cache: &mut PrefixCache) {
        if !self.path.exists() {
            return;
        }
        if let Err(e) = self.try_load(model, cache) {
            eprintln!(
                "warning: prefix cache {} not used: {e}",
                self.path.display()
            );
        }
    }

    fn try_load(&self, model: &Llama, cache: &mut PrefixCache) -> Result<(), String> {
        let tensors =
            candle_core::safetensors::load(&self.path, &Device::Cpu).map_err(|e| e.to_string())?;
        let key = tensors
            .get("key")
            .and_then(|t| t.to_vec1::<u8>().ok())
            .ok_or("no key")?;
        if key != self.key.as_bytes() {
            return Err("written for another model or KV type".into());
        }
        let mut n = 0;
        while let Some(head) = tensors.get(&format!("b{n}.head")) {
            let head = head.to_vec1::<u32>().map_err(|e| e.to_string())?;
            if head.len() != 3 + BLOCK_TOKENS {
                return Err(format!("block {n}: a header of {} values", head.len()));
            }
            let parent = head[0] as u64 | (head[1] as u64) << 32;
            let block = KvBlock::from_tensors(model, BLOCK_TOKENS, |name| {
                tensors.get(&format!("b{n}.{name}")).cloned()
            })
            .map_err(|e| format!("block {n}: {e}"))?;
            cache.restore(
                head[3..].to_vec(),
                parent,
                head[2] as usize,
                Arc::new(block),
            );
            n += 1;
        }
        Ok(())
    }

    /// Writes the most recently used blocks of `cache` (within `max_blocks`), replacing the
    /// file whole (written beside it, then renamed), or warns.
    pub(super) fn save(&self, cache: &PrefixCache) {
        if let Err(e) = self.try_save(cache) {
            eprintln!(
                "warning: prefix cache {} not written: {e}",
                self.path.display()
            );
        }
    }

    fn try_save(&self, cache: &PrefixCache) -> candle_core::Result<()> {
        let mut tensors: HashMap<String, Tensor> = HashMap::new();
        let key = self.key.as_bytes().to_vec();
        let n = key.len();
        tensors.insert("key".into(), Tensor::from_vec(key, n, &Device::Cpu)?);
        for (i, (tokens, parent, depth, kv)) in
            cache.recent(self.max_blocks).into_iter().enumerate()
        {
            let mut head = vec![parent as u32, (parent >> 32) as u32, depth as u32];
            head.extend_from_slice(tokens);
            let len = head.len();
            tensors.insert(
                format!("b{i}.head"),
                Tensor::from_vec(head, len, &Device::Cpu)?,
            );
            for (name, t) in kv.tensors() {
                tensors.insert(format!("b{i}.{name}"), t.to_device(&Device::Cpu)?);
            }
        }
        if let Some(dir) = self.path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let partial = part_path(&self.path);
        candle_core::safetensors::save(&tensors, &partial)?;
        std::fs::rename(&partial, &self.path)?;
        Ok(())
    }
}

/// The file written before the rename: this process's own, so that two runs ending at once
/// never write into one file (the last rename wins, whole).
fn part_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(format!(".part{}", std::process::id()));
    path.with_file_name(name)
}
