"""FlashMLA's sparse-decode Python API over mlakv records: an engine switches by changing
`from flash_mla import ...` to `from mlakv.compat.flashmla import ...`.

Covered: get_mla_metadata, flash_mla_with_kvcache with `indices=` (sparse decode; the dense
path is not), flash_mla_sparse_fwd (sparse prefill, over the record cache rather than a bf16
copy of it). Conventions kept from FlashMLA:
  - q [b, s_q, h_q, 576] bf16, k_cache [num_blocks, page_block_size, 1, record_bytes] (1-byte
    dtype, e.g. FlashMLA's float8_e4m3fn view of the 656-byte records), indices int32
    [b, s_q, topk] of flat slots (block * page_block_size + offset), -1 = invalid;
  - returns out [b, s_q, h_q, 512] bf16 and softmax_lse [b, h_q, s_q] fp32 (natural log; +inf for
    a row with no valid candidate, whose output is 0);
  - attn_sink [h_q] scales the output by exp(lse) / (exp(lse) + exp(sink)) and leaves the
    returned lse alone; topk_length [b] keeps the first topk_length[i] candidates;
  - softmax_scale defaults to 576 ** -0.5.
The record format comes from the record size (656 B fp8_ds_mla, 432 B nvfp4_ds_mla); the
368-byte records need kv_format="nvfp4_fp8_rope" or "nvfp4_fp8_rope_token_scale".
"""

import dataclasses
from typing import Optional

import torch

from .. import torch_ops as _t  # registers torch.ops.mlakv

_ops = torch.ops.mlakv
_BY_BYTES = {656: "fp8_ds_mla", 432: "nvfp4_ds_mla"}


@dataclasses.dataclass
class FlashMLASchedMeta:
    """What get_mla_metadata returns. mlakv needs no tile-scheduler metadata; the object
    records the shapes of its first use and checks that later calls match (as FlashMLA's
    does), so an engine's reuse rules carry over unchanged."""
    have_initialized: bool = False
    config: Optional[tuple] = None
    tile_scheduler_metadata: Optional[torch.Tensor] = None
    num_splits: Optional[torch.Tensor] = None


def get_mla_metadata(*args, **kwargs):
    """(FlashMLASchedMeta(), None); every argument of the older interface is accepted and not
    needed."""
    return FlashMLASchedMeta(), None


def _cache_and_format(k_cache, kv_format, where):
    if k_cache.element_size() != 1:
        raise TypeError(f"{where}: k_cache must hold record bytes (a 1-byte dtype), got "
                        f"{k_cache.dtype}")
    if k_cache.dtype != torch.uint8:
        k_cache = k_cache.view(torch.uint8)
    fmt = kv_format or _BY_BYTES.get(k_cache.shape[-1])
    if fmt is None:
        raise ValueError(f"{where}: {k_cache.shape[-1]}-byte records: pass kv_format= "
                         "(nvfp4_fp8_rope or nvfp4_fp8_rope_token_scale)")
    return k_cache, fmt


def _apply_sink(out, lse, attn_sink):
    # out * exp(lse) / (exp(lse) + exp(sink)) = out * sigmoid(lse - sink); a row with no
    # candidate has lse -inf and stays 0.
    h = out.shape[2]
    w = torch.sigmoid(lse - attn_sink.view(1, 1, h))
    return (out.float() * w.unsqueeze(-1)).to(out.dtype)


def _lonely_to_inf(lse):
    return torch.where(lse == float("-inf"), torch.full_like(lse, float("inf")), lse)


def flash_mla_with_kvcache(q, k_cache, block_table, cache_seqlens, head_dim_v,
                           tile_scheduler_metadata, num_splits=None, softmax_scale=None,
                           causal=False, is_fp8_kvcache=False, indices=None, attn_sink=None,
                           extra_k_cache=None, extra_indices_in_kvcache=None,
                           topk_length=None, extra_topk_length=None, *, kv_format=None):
    """Sparse MLA decode over a paged record cache, FlashMLA's signature and return values:
    (out [b, s_q, h_q, 512] bf16, softmax_lse [b, h_q, s_q] fp32). block_table and
    cache_seqlens are not used by sparse attention (indices are flat slots)."""
    where = "mlakv.compat.flashmla.flash_mla_with_kvcache"
    if indices is None:
        raise NotImplementedError(f"{where}: only sparse attention (indices=...) is provided; "
                                  "dense MLA stays with FlashMLA")
    if causal:
        raise ValueError(f"{where}: causal must be False with sparse attention")
    if head_dim_v != 512:
        raise ValueError(f"{where}: head_dim_v must be 512, got {head_dim_v}")
    if extra_k_cache is not None or extra_indices_in_kvcache is not None:
        raise NotImplementedError(f"{where}: extra_k_cache is not provided; decode each cache "
                                  "and merge by lse")
    meta = tile_scheduler_metadata
    if not isinstance(meta, FlashMLASchedMeta):
        raise TypeError(f"{where}: tile_scheduler_metadata must come from get_mla_metadata")
    k_cache, fmt = _cache_and_format(k_cache, kv_format, where)
    config = (q.shape[0], q.shape[1], q.shape[2], k_cache.shape[1], indices.shape[-1], fmt)
    if not meta.have_initialized:
        meta.have_initialized, meta.config = True, config
    elif meta.config != config:
        raise ValueError(f"{where}: arguments inconsistent with the metadata's first use "
                         f"(b, s_q, h_q, page_block_size, topk, format): {meta.config} vs "
                         f"{config}; get a new metadata object for a new shape")
    lengths = topk_length
    if lengths is not None and lengths.dtype != torch.int32:
        lengths = lengths.to(torch.int32)
    scale = q.shape[-1] ** -0.5 if softmax_scale is None else float(softmax_scale)
    out, lse = _ops.sparse_decode(q, k_cache, indices, fmt, scale, lengths, None)
    if attn_sink is not None:
        out = _apply_sink(out, lse, attn_sink)
    return out, _lonely_to_inf(lse).transpose(1, 2)


def flash_mla_sparse_fwd(q, kv, indices, sm_scale, d_v=512, attn_sink=None, topk_length=None,
                         indexer_topk=0, *, kv_format=None):
    """Sparse prefill, FlashMLA's signature, over the record cache: `kv` is the paged record
    tensor ([num_blocks, block_size, (1,) record_bytes]) and `indices` [s_q, 1, topk] flat
    slots, where FlashMLA takes a gathered bf16 kv [s_kv, 1, 576] (no gather and upconvert
    step is needed). Each query token is one decode row (batch = s_q, so topk_length [s_q]
    stays per token). Returns (out [s_q, h_q, 512] bf16, max_logits [s_q, h_q], lse [s_q, h_q]);
    max_logits is not computed and is NaN. lse excludes the sink; +inf for a token with no valid
    candidate."""
    where = "mlakv.compat.flashmla.flash_mla_sparse_fwd"
    if d_v != 512:
        raise ValueError(f"{where}: d_v must be 512, got {d_v}")
    if indexer_topk:
        raise NotImplementedError(f"{where}: indexer_topk (lse over the indexer part) is not "
                                  "provided")
    if kv.element_size() != 1:
        raise NotImplementedError(f"{where}: kv must be the paged record cache (1-byte "
                                  f"records), got {kv.dtype}; mlakv attends over the records "
                                  "directly instead of a bf16 copy")
    kv, fmt = _cache_and_format(kv, kv_format, where)
    if kv.dim() == 3 and kv.shape[1] == 1:  # [s_kv, 1, bytes]: one slot per block
        kv = kv.view(kv.shape[0], 1, kv.shape[2])
    s_q, h_q = q.shape[0], q.shape[1]
    if indices.dim() != 3 or indices.shape[0] != s_q or indices.shape[1] != 1:
        raise ValueError(f"{where}: indices must be [s_q, 1, topk], got {list(indices.shape)}")
    lengths = topk_length
    if lengths is not None and lengths.dtype != torch.int32:
        lengths = lengths.to(torch.int32)
    out, lse = _ops.sparse_decode(q.unsqueeze(1), kv, indices, fmt, float(sm_scale), lengths,
                                  None)
    if attn_sink is not None:
        out = _apply_sink(out, lse, attn_sink)
    out, lse = out.squeeze(1), lse.squeeze(1)
    max_logits = torch.full_like(lse, float("nan"))
    return out, max_logits, _lonely_to_inf(lse)
