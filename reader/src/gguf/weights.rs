//! The tensors of a GGUF file under their Hugging Face names, quantized ([`GgufWeights::qtensor`])
//! or dequantized (the [`SimpleBackend`] behind a `VarBuilder`).
//!
//! llama.cpp's converter permutes the rows of `attn_q` and `attn_k` of `llama` files (per head,
//! the two halves of the rotary dimensions interleaved: its rotary kernel pairs neighbouring
//! elements). The rows are put back in Hugging Face's rotate-half order at load, so the model
//! code and its RoPE are the same for both formats. Rows of a quantized matrix are whole
//! blocks, so this is a reordering of bytes, exact for every quantization type. `qwen2` files
//! are not permuted (llama.cpp runs them with the rotate-half layout).

use std::borrow::Cow;
use std::sync::Arc;

use candle_core::quantized::{GgmlDType, QStorage, QTensor};
use candle_core::{DType, Device, Shape, Tensor};
use candle_nn::var_builder::SimpleBackend;

use super::{GgufArch, GgufFile};
use crate::config::LlamaConfig;

type CResult<T> = candle_core::Result<T>;

/// A GGUF file's tensors, read on demand from a read-only map of the file: a tensor repacked
/// for the CPU is read once, from the page cache, instead of being copied into a buffer first
/// (fresh memory costs a page fault a page, a third of a one-shot `ask`'s model load).
pub(crate) struct GgufWeights {
    gguf: Arc<GgufFile>,
    map: memmap2::Mmap,
    heads: usize,
    kv_heads: usize,
}

impl std::fmt::Debug for GgufWeights {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GgufWeights({})", self.gguf.path().display())
    }
}

/// The GGUF name of a Hugging Face tensor name (`None`: no such tensor in GGUF files).
fn gguf_name(hf: &str) -> Option<String> {
    let fixed = match hf {
        "model.embed_tokens.weight" => Some("token_embd.weight"),
        "model.norm.weight" => Some("output_norm.weight"),
        "lm_head.weight" => Some("output.weight"),
        "model.rope_freqs.weight" => Some("rope_freqs.weight"),
        _ => None,
    };
    if let Some(name) = fixed {
        return Some(name.to_string());
    }
    let rest = hf.strip_prefix("model.layers.")?;
    let (layer, rest) = rest.split_once('.')?;
    let layer: usize = layer.parse().ok()?;
    let (module, kind) = rest.rsplit_once('.')?;
    let module = match module {
        "input_layernorm" => "attn_norm",
        "self_attn.q_proj" => "attn_q",
        "self_attn.k_proj" => "attn_k",
        "self_attn.v_proj" => "attn_v",
        "self_attn.o_proj" => "attn_output",
        "post_attention_layernorm" => "ffn_norm",
        "mlp.gate_proj" => "ffn_gate",
        "mlp.up_proj" => "ffn_up",
        "mlp.down_proj" => "ffn_down",
        _ => return None,
    };
    Some(format!("blk.{layer}.{module}.{kind}"))
}

impl GgufWeights {
    /// `cfg`: the file's [`GgufFile::config`] (it names the heads of the permuted rows).
    pub(crate) fn new(gguf: Arc<GgufFile>, cfg: &LlamaConfig) -> crate::Result<Self> {
        let file = super::open_reader(gguf.path())?;
        // SAFETY: read-only; Capstan never writes model files, and a file changed under the
        // map gives other weights, never unsafety beyond what any reader of a map accepts.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|cause| crate::Error::Io {
            path: gguf.path().to_path_buf(),
            cause,
        })?;
        Ok(Self {
            heads: cfg.num_attention_heads,
            kv_heads: cfg.kv_heads(),
            gguf,
            map,
        })
    }

    /// Heads whose rows llama.cpp interleaved in this tensor, if any.
    fn permuted_heads(&self, gguf: &str) -> Option<usize> {
        if self.gguf.arch() != GgufArch::Llama {
            return None;
        }
        let module = gguf.rsplit('.').nth(1)?;
        match module {
            "attn_q" => Some(self.heads),
            "attn_k" => Some(self.kv_heads),
            _ => None,
        }
    }

    /// Whether the file holds the tensor `hf_name` (Hugging Face name).
    pub(crate) fn contains(&self, hf_name: &str) -> bool {
        gguf_name(hf_name).is_some_and(|g| self.gguf.content().tensor_infos.contains_key(&g))
    }

    /// The block type of the tensor `hf_name`, if the file holds it (read from its header).
    pub(crate) fn dtype(&self, hf_name: &str) -> Option<GgmlDType> {
        let name = gguf_name(hf_name)?;
        Some(self.gguf.content().tensor_infos.get(&name)?.ggml_dtype)
    }

    /// The tensor `hf_name` as stored (quantized), rows in Hugging Face order, on `device`.
    pub(crate) fn qtensor(&self, hf_name: &str, device: &Device) -> CResult<QTensor> {
        let stored = self.stored(hf_name)?;
        let storage = QStorage::from_data(stored.bytes, device, stored.dtype)?;
        QTensor::new(storage, stored.shape)
    }

    /// The bytes of the tensor `hf_name` as stored, rows in Hugging Face order: borrowed from
    /// the file's map, or for llama.cpp's permuted rows reordered into a new buffer.
    pub(crate) fn stored(&self, hf_name: &str) -> CResult<StoredTensor<'_>> {
        let missing = || candle_core::Error::CannotFindTensor {
            path: hf_name.to_string(),
        };
        let name = gguf_name(hf_name).ok_or_else(missing)?;
        let content = self.gguf.content();
        let info = content.tensor_infos.get(&name).ok_or_else(missing)?;
        let context = |message: String| {
            candle_core::Error::Msg(format!(
                "{}: tensor {name}: {message}",
                self.gguf.path().display()
            ))
        };
        let elements = info.shape.elem_count();
        let block = info.ggml_dtype.block_size();
        if !elements.is_multiple_of(block) {
            return Err(context(format!(
                "{elements} values are not whole blocks of {block}"
            )));
        }
        let len = elements / block * info.ggml_dtype.type_size();
        let start = (content.tensor_data_offset as usize).checked_add(info.offset as usize);
        let data = start
            .and_then(|a| Some(a..a.checked_add(len)?))
            .and_then(|range| self.map.get(range))
            .ok_or_else(|| context(format!("its {len} bytes lie past the end of the file")))?;
        let stored = |bytes| StoredTensor {
            dtype: info.ggml_dtype,
            shape: info.shape.clone(),
            bytes,
        };
        let Some(heads) = self.permuted_heads(&name) else {
            return Ok(stored(Cow::Borrowed(data)));
        };
        let rows = info.shape.dims()[0];
        if heads == 0 || !rows.is_multiple_of(heads) || !(rows / heads).is_multiple_of(2) {
            return Err(context(format!(
                "{rows} rows do not split into {heads} heads of even size"
            )));
        }
        let row_bytes = data.len() / rows;
        let head = rows / heads;
        let half = head / 2;
        let mut out = Vec::with_capacity(data.len());
        for h in 0..heads {
            for r in 0..2 {
                for j in 0..half {
                    // Hugging Face row (h, r, j) was written by llama.cpp at (h, j, r).
                    let src = h * head + 2 * j + r;
                    out.extend_from_slice(&data[src * row_bytes..(src + 1) * row_bytes]);
                }
            }
        }
        Ok(stored(Cow::Owned(out)))
    }
}

/// A tensor's bytes as a GGUF file stores them ([`GgufWeights::stored`]).
pub(crate) struct StoredTensor<'a> {
    pub(crate) dtype: GgmlDType,
    pub(crate) shape: Shape,
    pub(crate) bytes: Cow<'a, [u8]>,
}

/// One [`GgufWeights`] serving both the dequantizing `VarBuilder` and the quantized matrices.
pub(crate) struct SharedGgufWeights(pub(crate) Arc<GgufWeights>);

impl SimpleBackend for SharedGgufWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        init: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> CResult<Tensor> {
        self.0.get(s, name, init, dtype, dev)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> CResult<Tensor> {
        self.0.get_unchecked(name, dtype, dev)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.0.contains(name)
    }
}

impl SimpleBackend for GgufWeights {
    fn get(
        &self,
        s: Shape,
        name: &str,
        _: candle_nn::Init,
        dtype: DType,
        dev: &Device,
    ) -> CResult<Tensor> {
        crate::checkpoint::expect_shape(self.get_unchecked(name, dtype, dev)?, s, name)
    }

    fn get_unchecked(&self, name: &str, dtype: DType, dev: &Device) -> CResult<Tensor> {
        self.qtensor(name, dev)?.dequantize(dev)?.to_dtype(dtype)
    }

    fn contains_tensor(&self, name: &str) -> bool {
        self.contains(name)
    }
}

#[cfg(test)]
mod tests {
    use super::gguf_name;

    #[test]
    fn names_map_to_gguf() {
        assert_eq!(
            gguf_name("model.layers.12.self_attn.o_proj.weight").as_deref(),
            Some("blk.12.attn_output.weight")
        );
        assert_eq!(
            gguf_name("model.layers.0.self_attn.q_proj.bias").as_deref(),
            Some("blk.0.attn_q.bias")
        );
        assert_eq!(
            gguf_name("model.layers.3.post_attention_layernorm.weight").as_deref(),
            Some("blk.3.ffn_norm.weight")
        );
        assert_eq!(
            gguf_name("lm_head.weight").as_deref(),
            Some("output.weight")
        );
        assert_eq!(gguf_name("model.layers.x.mlp.up_proj.weight"), None);
        assert_eq!(gguf_name("encoder.layers.0.mlp.up_proj.weight"), None);
    }
}
