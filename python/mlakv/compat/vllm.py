"""vLLM's cache ops over mlakv records (import in place of `vllm._custom_ops`' functions).

The cache is vLLM's own tensor, [num_blocks, block_size, record_bytes] uint8 (a padded block
stride is fine); `kv_cache_dtype` names an mlakv record format ("fp8_ds_mla" writes the bytes
vLLM's own kernel writes; "nvfp4_ds_mla", "nvfp4_fp8_rope", "nvfp4_fp8_rope_token_scale" the
4-bit records).
"""

import torch

from .. import torch_ops as _t  # registers torch.ops.mlakv

_ops = torch.ops.mlakv

# Record size -> format, for calls that do not name one (368 B is two formats: name it).
_BY_BYTES = {656: "fp8_ds_mla", 432: "nvfp4_ds_mla"}


def _format(kv_cache_dtype, cache, where):
    if kv_cache_dtype is None:
        rec = cache.shape[-1]
        fmt = _BY_BYTES.get(rec)
        if fmt is None:
            raise ValueError(f"{where}: {rec}-byte records are ambiguous; pass kv_cache_dtype")
        return fmt
    _t.format_code(kv_cache_dtype)  # ValueError naming the formats
    return kv_cache_dtype


def concat_and_cache_mla(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype, scale=None):
    """Quantize kv_c [n', 512] and k_pe [n', 64] (or [n', 1, 64]) into their slots.

    As in vLLM: the token count is slot_mapping's (kv_c may hold CUDA-graph padding rows past
    it), slot -1 (any negative) is skipped, slot_mapping is flattened. `scale` is accepted and
    not used: vLLM's fp8_ds_mla kernel ignores it too (each 128-value tile gets its own scale
    from its maximum), and the NVFP4 records carry their own scales.
    """
    where = "mlakv.compat.vllm.concat_and_cache_mla"
    fmt = _format(kv_cache_dtype, kv_cache, where)
    if k_pe.dim() == 3:
        k_pe = k_pe.squeeze(1)
    sm = slot_mapping.reshape(-1)
    if sm.dtype != torch.int64:
        sm = sm.to(torch.int64)
    _ops.write(kv_cache, kv_c, k_pe, sm, fmt)


def cp_gather_and_upconvert_fp8_kv_cache(src_cache, dst, block_table, seq_lens, workspace_starts,
                                         batch_size, seq_starts=None, kv_cache_dtype=None):
    """Gather the records of `batch_size` sequences into bf16 rows dst [rows, 576] (latent then
    RoPE): sequence b's seq_lens[b] tokens, read through block_table[b] (from position
    seq_starts[b] when given), go to dst[workspace_starts[b] ...]. vLLM's argument order; the
    format comes from the record size (or kv_cache_dtype for the 368-byte records)."""
    where = "mlakv.compat.vllm.cp_gather_and_upconvert_fp8_kv_cache"
    fmt = _format(kv_cache_dtype, src_cache, where)
    b = int(batch_size)
    _ops.gather_upconvert(src_cache, dst, block_table[:b], seq_lens[:b], workspace_starts[:b],
                          None if seq_starts is None else seq_starts[:b], fmt)
