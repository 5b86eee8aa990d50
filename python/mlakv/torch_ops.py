"""torch.ops.mlakv: the cache entry points as PyTorch operators.

Importing this module (it needs torch) registers, in the `mlakv` namespace:

    write(Tensor(a!) kv_cache, Tensor kv_c, Tensor k_pe, Tensor slot_mapping, str format,
          int fp8_scale_recipe=0, float latent_scale=1.0, int nvfp4_encoder=0) -> ()
    sparse_decode(Tensor q, Tensor kv_cache, Tensor indices, str format, float? sm_scale=None,
                  Tensor? lengths=None, Tensor? sink=None, Tensor(a!)? workspace=None,
                  int num_threads=0, float latent_scale=1.0) -> (Tensor out, Tensor lse)
    sparse_decode_out(Tensor q, Tensor kv_cache, Tensor indices, str format, Tensor(a!) out,
                      Tensor(b!) lse, float? sm_scale=None, Tensor? lengths=None,
                      Tensor? sink=None, Tensor(c!)? workspace=None, int num_threads=0,
                      float latent_scale=1.0) -> ()
    gather_bf16(Tensor kv_cache, Tensor slots, str format, float latent_scale=1.0) -> Tensor
    gather_upconvert(Tensor kv_cache, Tensor(a!) dst, Tensor block_table, Tensor seq_lens,
                     Tensor workspace_starts, Tensor? seq_starts, str format,
                     float latent_scale=1.0) -> ()
    encode_records(Tensor latent, Tensor rope, str format, int fp8_scale_recipe=0) -> Tensor
    decode_records(Tensor records, str format) -> (Tensor latent, Tensor rope)
    dcp_local_indices(Tensor positions, Tensor block_table, Tensor kv_cache, str format,
                      int rank, int world) -> (Tensor indices, Tensor lengths)
    merge_partials(Tensor out_parts, Tensor lse_parts, Tensor? sink=None)
                  -> (Tensor out, Tensor lse)

latent_scale is the layer's static latent scale s_l (static NVFP4 records; mlakv.calibrate).
Decode context parallelism (token p on rank p % world): each rank maps the step's global top-k
positions [b, s_q, topk] to its slots (dcp_local_indices, its own block table), decodes
without the sink, the engine all-gathers out and lse (torch.distributed), and merge_partials
([world, b, s_q, heads, 512] and [world, b, s_q, heads], the sink applied once) gives the
output of one decode over the whole context.

The cache is the engine's own tensor: [num_blocks, block_size, record_bytes] (or FlashMLA's
[num_blocks, block_size, 1, record_bytes]) of a 1-byte dtype, records contiguous within a block
and any block stride >= block_size * record_bytes (padded blocks). `format` is a record format
name ("fp8_ds_mla", "nvfp4_ds_mla", ...). Each op has a CPU and a CUDA kernel and a fake
(meta) kernel, so it works under torch.compile(fullgraph=True) and inside CUDA graphs (CUDA
work goes to torch's current stream, with the tensors' device made current).

The operators are defined with the low-level torch.library.Library API (the schema declares
the mutated arguments, `Tensor(a!)`): a call costs a few microseconds of dispatch, where
torch.library.custom_op adds about ten more. Argument structs for the C calls are cached per
cache tensor and per shape, so a repeated call only sets pointers. use_compiled_ops() (or
MLAKV_TORCH_COMPILED_OPS=1 at import) replaces the Python kernels of write, sparse_decode and
sparse_decode_out with C++ ones built against the running torch: the same ops, results and
errors at a fraction of the host time per call (bench/python_overhead.py).

Shapes and dtypes:
  write: kv_c [n', 512], k_pe [n', 64] or [n', 1, 64] (n' >= n, rows strided, last dim unit
    stride; fp32/bf16/fp16 on the CPU, bf16/fp16 on CUDA), slot_mapping int64 [n] (negative =
    padding, skipped). n is slot_mapping's length (vLLM pads kv_c for CUDA graphs). A CPU slot
    >= capacity raises and writes nothing; on CUDA such slots are skipped.
  sparse_decode: q [batch, s_q, heads, 576] (bf16; fp32 also on the CPU), indices int32
    [batch, s_q, topk] (flat slots, negative = invalid), lengths int32 [batch], sink fp32
    [heads]. Returns out [batch, s_q, heads, 512] (q's dtype) and lse fp32 [batch, s_q, heads]
    (natural log; -inf for a row with no valid candidate). workspace: a uint8 CUDA tensor of at
    least workspace_bytes(...) bytes; None uses one workspace per device kept by this module
    (grown when a shape needs more: call reserve_workspace before capturing a CUDA graph).
  sparse_decode_out: the same into the caller's out and lse (contiguous, the shapes and dtypes
    above; declared mutated): no allocation per call, as engines that own their output
    buffers call attention.
  gather_bf16: slots int32 [n] -> bf16 [n, 576] (latent then RoPE; negative slot: zero row).
  gather_upconvert: vLLM's cp_gather_and_upconvert_fp8_kv_cache: block_table int32
    [batch, max_blocks], seq_lens / workspace_starts / seq_starts int32 [batch], dst bf16
    [rows, 576]; rows of sequence b go to dst[workspace_starts[b] ...].
  encode_records / decode_records: one record per row, [n, record_bytes] uint8 <->
    latent [n, 512], rope [n, 64] (decode gives fp32; on CUDA it round-trips through the host).
"""

import ctypes
import math
import os
import threading

import torch

from . import _lib
from ._info import Format
from ._lib import LATENT_DIM, QK_DIM, ROPE_DIM, V_DIM

NAMESPACE = "mlakv"

_DTYPE_CODE = {torch.float32: _lib.DT_F32, torch.bfloat16: _lib.DT_BF16,
               torch.float16: _lib.DT_F16}
_DEFAULT_SM_SCALE = 1.0 / math.sqrt(QK_DIM)


# --------------------------------------------------------------------------------------------
# formats, C functions, devices
# --------------------------------------------------------------------------------------------

_FORMATS = {}  # name -> (code, record_bytes)


def format_code(name):
    """(mlakv_format code, record bytes) of a format name; ValueError naming the formats."""
    f = _FORMATS.get(name)
    if f is None:
        if not _FORMATS:
            for fmt in Format:
                info = _lib.fn("mlakv_format_get")(int(fmt)).contents
                _FORMATS[info.name.decode()] = (int(fmt), int(info.record_bytes))
            f = _FORMATS.get(name)
        if f is None:
            raise ValueError(f"mlakv: unknown record format {name!r} (formats: "
                             f"{', '.join(_FORMATS)})")
    return f


class _Fns:
    """The C functions, bound once (argtypes set by _lib); None for a symbol the library does
    not export."""

    def __init__(self):
        for name in ("mlakv_write", "mlakv_read", "mlakv_sparse_decode", "mlakv_cuda_write",
                     "mlakv_cuda_sparse_decode", "mlakv_cuda_decode_workspace_size",
                     "mlakv_gather_bf16", "mlakv_gather_upconvert", "mlakv_cuda_gather_bf16",
                     "mlakv_cuda_gather_upconvert", "mlakv_cache_init",
                     "mlakv_cache_set_latent_scale", "mlakv_dcp_local_indices",
                     "mlakv_cuda_dcp_local_indices", "mlakv_merge_partials",
                     "mlakv_cuda_merge_partials",
                     "mlakv_cuda_check_device", "mlakv_write_options_default"):
            setattr(self, name[len("mlakv_"):], getattr(_lib.lib(), name, None))


_fns = None


def _f():
    global _fns
    if _fns is None:
        _fns = _Fns()
    return _fns


def _require(fn, name):
    if fn is None:
        raise NotImplementedError(f"mlakv: {_lib.library_path()} does not export {name} "
                                  "(library older than the Python package)")
    return fn


def missing_symbols():
    """C symbols the ops use that the loaded library does not export (tests skip on them)."""
    f = _f()
    return [f"mlakv_{n}" for n in ("gather_bf16", "gather_upconvert", "cuda_gather_bf16",
                                   "cuda_gather_upconvert") if getattr(f, n) is None]


def _check(status, name):
    if status:
        _lib.check(status, name)


_raw_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)


def _stream(idx):
    if _raw_stream is not None:
        return _raw_stream(idx)
    return torch.cuda.current_stream(idx).cuda_stream


_checked_devices = set()


class _DeviceGuard:
    """Make device `idx` current for a CUDA call (a no-op when it already is) and check once
    per device that this build has kernels for it."""

    __slots__ = ("idx", "prev")

    def __init__(self, idx):
        self.idx = idx
        self.prev = None

    def __enter__(self):
        self.prev = _device_enter(self.idx)
        return self

    def __exit__(self, *exc):
        if self.prev is not None:
            torch.cuda.set_device(self.prev)
        return False


def _device_enter(idx):
    """Make device `idx` current, checking once per device that this build has kernels for it;
    returns the device to restore (None: nothing to restore). _DeviceGuard as a function, for
    the hot paths."""
    cur = torch.cuda.current_device()
    prev = None
    if cur != idx:
        prev = cur
        torch.cuda.set_device(idx)
    if idx not in _checked_devices:
        try:
            _check(_require(_f().cuda_check_device, "mlakv_cuda_check_device")(),
                   "mlakv_cuda_check_device")
        except BaseException:
            if prev is not None:  # a failed check leaves the current device as it was
                torch.cuda.set_device(prev)
            raise
        _checked_devices.add(idx)
    return prev


def _same_device(t, dev, name, op):
    if t.device != dev:
        raise ValueError(f"mlakv.{op}: {name} is on {t.device} but the cache is on {dev}")


# --------------------------------------------------------------------------------------------
# cache descriptors
# --------------------------------------------------------------------------------------------

class _Desc:
    __slots__ = ("c", "ref", "key", "capacity", "record_bytes")


_desc_cache = {}
_DESC_CACHE_MAX = 4096


def cache_descriptor(kv_cache, fmt, latent_scale=1.0):
    """The C mlakv_cache of an engine cache tensor with its layer's latent scale s_l (cached
    per pointer, shape, strides and s_l)."""
    key = (kv_cache.data_ptr(), kv_cache.shape, kv_cache.stride(), kv_cache.dtype, fmt,
           latent_scale)
    d = _desc_cache.get(key)
    if d is None:
        d = _make_desc(kv_cache, fmt, key, latent_scale)
    return d


def _make_desc(kv_cache, fmt, key, latent_scale=1.0):
    where = "mlakv: kv_cache"
    code, rec = format_code(fmt)
    if kv_cache.element_size() != 1:
        raise TypeError(f"{where} must have a 1-byte dtype (uint8 or an fp8 view), got "
                        f"{kv_cache.dtype}")
    shape, strides = tuple(kv_cache.shape), tuple(kv_cache.stride())
    if len(shape) == 4 and shape[2] == 1:  # FlashMLA: [num_blocks, block_size, 1, bytes]
        shape, strides = shape[:2] + shape[3:], strides[:2] + strides[3:]
    if len(shape) != 3 or shape[2] != rec:
        raise ValueError(f"{where} must have shape [num_blocks, block_size, {rec}] for {fmt} "
                         f"({rec}-byte records), got {list(kv_cache.shape)}")
    num_blocks, block_size = shape[0], shape[1]
    if (strides[2] != 1 and rec > 1) or (strides[1] != rec and block_size > 1):
        raise ValueError(f"{where} must hold its records contiguously within a block, got "
                         f"strides {list(kv_cache.stride())}")
    block_stride = strides[0] if num_blocks > 1 else block_size * rec
    d = _Desc()
    d.c = _lib.CacheC()
    _check(_f().cache_init(ctypes.byref(d.c), kv_cache.data_ptr(), code, num_blocks, block_size,
                           block_stride), "mlakv_cache_init")
    if latent_scale != 1.0:
        _check(_f().cache_set_latent_scale(ctypes.byref(d.c), float(latent_scale)),
               "mlakv_cache_set_latent_scale")
    d.ref = ctypes.byref(d.c)
    d.key = key
    d.capacity = num_blocks * block_size
    d.record_bytes = rec
    if len(_desc_cache) >= _DESC_CACHE_MAX:
        _desc_cache.clear()
    _desc_cache[key] = d
    return d


_opts_cache = {}


def _write_opts(recipe, encoder=0):
    o = _opts_cache.get((recipe, encoder))
    if o is None:
        c = _f().write_options_default()
        c.fp8_scale_recipe = int(recipe)
        c.nvfp4_encoder = int(encoder)
        o = (c, ctypes.byref(c))
        _opts_cache[(recipe, encoder)] = o
    return o[1]


# --------------------------------------------------------------------------------------------
# write
# --------------------------------------------------------------------------------------------

def _write_common(kv_cache, kv_c, k_pe, slot_mapping, op):
    dev = kv_cache.device
    if kv_c.device != dev or k_pe.device != dev or slot_mapping.device != dev:
        for name, t in (("kv_c", kv_c), ("k_pe", k_pe), ("slot_mapping", slot_mapping)):
            _same_device(t, dev, name, op)
    if slot_mapping.dtype != torch.int64 or slot_mapping.dim() != 1:
        raise TypeError(f"mlakv.{op}: slot_mapping must be int64 [n], got {slot_mapping.dtype} "
                        f"{list(slot_mapping.shape)}")
    n = slot_mapping.shape[0]
    if n > 1 and slot_mapping.stride(0) != 1:
        raise ValueError(f"mlakv.{op}: slot_mapping must be contiguous")
    kv_shape = kv_c.shape
    if len(kv_shape) != 2 or kv_shape[1] != LATENT_DIM or kv_shape[0] < n or \
            kv_c.stride(1) != 1:
        raise ValueError(f"mlakv.{op}: kv_c must be [n >= {n}, {LATENT_DIM}] with unit stride "
                         f"in its last dimension, got shape {list(kv_shape)} strides "
                         f"{list(kv_c.stride())}")
    kp_shape = k_pe.shape
    if len(kp_shape) == 3 and kp_shape[1] == 1:
        kp_ok = kp_shape[2] == ROPE_DIM and k_pe.stride(2) == 1
    else:
        kp_ok = len(kp_shape) == 2 and kp_shape[1] == ROPE_DIM and k_pe.stride(1) == 1
    if not kp_ok or kp_shape[0] < n:
        raise ValueError(f"mlakv.{op}: k_pe must be [n >= {n}, {ROPE_DIM}] or [n, 1, "
                         f"{ROPE_DIM}] with unit stride in its last dimension, got shape "
                         f"{list(kp_shape)} strides {list(k_pe.stride())}")
    dt = kv_c.dtype
    code = _DTYPE_CODE.get(dt)
    if code is None or k_pe.dtype != dt:
        raise TypeError(f"mlakv.{op}: kv_c and k_pe must share one dtype of float32, bfloat16 "
                        f"or float16, got {kv_c.dtype} and {k_pe.dtype}")
    kvs = kv_c.stride(0) if n > 1 else LATENT_DIM
    kps = k_pe.stride(0) if n > 1 else ROPE_DIM
    return n, kvs, kps, code


def _write_cpu(kv_cache, kv_c, k_pe, slot_mapping, format, fp8_scale_recipe=0,
               latent_scale=1.0, nvfp4_encoder=0):
    d = cache_descriptor(kv_cache, format, latent_scale)
    n, kvs, kps, code = _write_common(kv_cache, kv_c, k_pe, slot_mapping, "write")
    if n:
        _check(_f().write(d.ref, n, kv_c.data_ptr(), kvs, k_pe.data_ptr(), kps, code,
                          slot_mapping.data_ptr(), _write_opts(fp8_scale_recipe, nvfp4_encoder)), "mlakv_write")


def _write_cuda(kv_cache, kv_c, k_pe, slot_mapping, format, fp8_scale_recipe=0,
                latent_scale=1.0, nvfp4_encoder=0):
    d = cache_descriptor(kv_cache, format, latent_scale)
    n, kvs, kps, code = _write_common(kv_cache, kv_c, k_pe, slot_mapping, "write")
    if kv_c.dtype not in (torch.bfloat16, torch.float16):
        raise TypeError(f"mlakv: kv_c must be bfloat16 or float16, got "
                        f"{str(kv_c.dtype).replace('torch.', '')} (the GPU writer's inputs)")
    if not n:
        return
    idx = kv_cache.device.index
    with _DeviceGuard(idx):
        _check(_require(_f().cuda_write, "mlakv_cuda_write")(
            d.ref, n, kv_c.data_ptr(), kvs, k_pe.data_ptr(), kps, code, slot_mapping.data_ptr(),
            _write_opts(fp8_scale_recipe, nvfp4_encoder), None, _stream(idx)), "mlakv_cuda_write")


def _write_fake(kv_cache, kv_c, k_pe, slot_mapping, format, fp8_scale_recipe=0,
                latent_scale=1.0, nvfp4_encoder=0):
    return None


# --------------------------------------------------------------------------------------------
# sparse decode
# --------------------------------------------------------------------------------------------

class _DecodeEntry:
    __slots__ = ("args", "ref", "p_q", "p_idx", "p_len", "p_sink", "p_out", "p_lse",
                 "out_shape", "lse_shape", "out_dtype", "ws_need", "d")


_OFF = {name: getattr(_lib.DecodeArgsC, name).offset
        for name in ("q", "indices", "lengths", "sink", "out", "lse")}
_tls = threading.local()
_ARGS_CACHE_MAX = 1024


def _args_cache():
    c = getattr(_tls, "decode", None)
    if c is None:
        c = _tls.decode = {}
    return c


def _decode_lookup(kv_cache, fmt, latent_scale, q, indices, sm_scale, has_len, has_sink,
                   num_threads, cuda, op):
    """The cached argument struct of a decode call (its cache descriptor in .d): one dict lookup
    on every property the checks looked at, so a repeated call only sets pointers."""
    cache = _args_cache()
    key = (kv_cache.data_ptr(), kv_cache.shape, kv_cache.stride(), kv_cache.dtype,
           kv_cache.device, fmt, latent_scale, q.shape, q.stride(), q.dtype, q.device,
           indices.shape, indices.stride(), indices.dtype, indices.device, sm_scale, has_len,
           has_sink, num_threads)
    e = cache.get(key)
    if e is None:
        d = cache_descriptor(kv_cache, fmt, latent_scale)
        if q.device != kv_cache.device:
            _same_device(q, kv_cache.device, "q", op)
        e = _make_decode_entry(d, q, indices, sm_scale, num_threads, cuda)
        e.d = d
        if len(cache) >= _ARGS_CACHE_MAX:
            cache.clear()
        cache[key] = e
    return e


def _make_decode_entry(d, q, indices, sm_scale, num_threads, cuda):
    op = "sparse_decode"
    dev = q.device
    if indices.device != dev:
        raise ValueError(f"mlakv.{op}: indices is on {indices.device} but q is on {dev}")
    allowed = (torch.bfloat16,) if cuda else (torch.bfloat16, torch.float32)
    if q.dtype not in allowed:
        raise TypeError(f"mlakv.{op}: q must be {' or '.join(map(str, allowed))} on {dev.type}, "
                        f"got {q.dtype}")
    if q.dim() != 4 or q.shape[3] != QK_DIM or q.stride(3) != 1:
        raise ValueError(f"mlakv.{op}: q must be [batch, s_q, heads, {QK_DIM}] with unit "
                         f"stride in its last dimension, got shape {list(q.shape)} strides "
                         f"{list(q.stride())}")
    b, s_q, h = q.shape[:3]
    if indices.dtype != torch.int32 or indices.dim() != 3 or \
            tuple(indices.shape[:2]) != (b, s_q) or \
            (indices.shape[2] > 1 and indices.stride(2) != 1):
        raise ValueError(f"mlakv.{op}: indices must be int32 [{b}, {s_q}, topk] with unit "
                         f"stride in its last dimension, got {indices.dtype} "
                         f"{list(indices.shape)} strides {list(indices.stride())}")
    topk = indices.shape[2]
    for name, t in (("q", q), ("indices", indices)):
        if any(s < 0 for s in t.stride()):
            raise ValueError(f"mlakv.{op}: {name} has a negative stride")
    e = _DecodeEntry()
    a = _f_default_args(b, s_q, h, topk)
    qs = _unit_strides(q)
    a.q_stride_batch, a.q_stride_token, a.q_stride_head = qs[0], qs[1], qs[2]
    a.q_dtype = _DTYPE_CODE[q.dtype]
    ist = _unit_strides(indices)
    a.indices_stride_batch, a.indices_stride_token = ist[0], ist[1]
    a.sm_scale = _DEFAULT_SM_SCALE if sm_scale is None else float(sm_scale)
    a.out_dtype = _DTYPE_CODE[q.dtype]
    a.num_threads = int(num_threads)
    e.args = a
    e.ref = ctypes.byref(a)
    for name in _OFF:
        setattr(e, "p_" + {"indices": "idx", "lengths": "len"}.get(name, name),
                ctypes.c_void_p.from_buffer(a, _OFF[name]))
    e.out_shape = (b, s_q, h, V_DIM)
    e.lse_shape = (b, s_q, h)
    e.out_dtype = q.dtype
    e.ws_need = 0
    if cuda:
        need = ctypes.c_size_t(0)
        with _DeviceGuard(q.device.index):
            _check(_require(_f().cuda_decode_workspace_size, "mlakv_cuda_decode_workspace_size")(
                d.ref, e.ref, ctypes.byref(need)), "mlakv_cuda_decode_workspace_size")
        e.ws_need = int(need.value)
    return e


def _f_default_args(b, s_q, h, topk):
    return _lib.fn("mlakv_decode_args_default")(b, s_q, h, topk)


def _unit_strides(t):
    """Strides with size-1 dimensions replaced by their contiguous value."""
    shape, out = t.shape, list(t.stride())
    for i in range(len(out) - 1, -1, -1):
        if shape[i] == 1:
            out[i] = 1 if i == len(out) - 1 else out[i + 1] * shape[i + 1]
    return out


def _vector_ptr(t, name, dtype, n, dev):
    """Pointer of an optional contiguous 1-D [n] tensor of `dtype` on `dev` (None when absent)."""
    if t is None:
        return None
    if t.dtype != dtype or t.shape != (n,) or t.device != dev or (n > 1 and t.stride(0) != 1):
        raise ValueError(f"mlakv.sparse_decode: {name} must be "
                         f"{str(dtype).replace('torch.', '')} [{n}] contiguous on {dev}, got "
                         f"{t.dtype} {list(t.shape)} on {t.device}")
    return t.data_ptr()


def _optional_inputs(e, q, lengths, sink):
    e.p_len.value = _vector_ptr(lengths, "lengths", torch.int32, e.out_shape[0], q.device)
    e.p_sink.value = _vector_ptr(sink, "sink", torch.float32, e.out_shape[2], q.device)


def _check_outputs(e, out, lse, dev):
    """out / lse of sparse_decode_out: exactly the shapes and dtypes sparse_decode returns,
    contiguous, on q's device."""
    if out.shape != e.out_shape or out.dtype != e.out_dtype or out.device != dev or \
            not out.is_contiguous():
        raise ValueError(f"mlakv.sparse_decode_out: out must be a contiguous "
                         f"{str(e.out_dtype).replace('torch.', '')} {list(e.out_shape)} tensor on "
                         f"{dev}, got {out.dtype} {list(out.shape)} on {out.device}")
    if lse.shape != e.lse_shape or lse.dtype != torch.float32 or lse.device != dev or \
            not lse.is_contiguous():
        raise ValueError(f"mlakv.sparse_decode_out: lse must be a contiguous float32 "
                         f"{list(e.lse_shape)} tensor on {dev}, got {lse.dtype} "
                         f"{list(lse.shape)} on {lse.device}")


def _decode_cpu_into(d, e, q, indices, out, lse, lengths, sink):
    _optional_inputs(e, q, lengths, sink)
    e.p_q.value = q.data_ptr()
    e.p_idx.value = indices.data_ptr()
    e.p_out.value = out.data_ptr()
    e.p_lse.value = lse.data_ptr()
    _check(_f().sparse_decode(d.ref, e.ref), "mlakv_sparse_decode")


def _decode_cpu(q, kv_cache, indices, format, sm_scale=None, lengths=None, sink=None,
                workspace=None, num_threads=0, latent_scale=1.0):
    e = _decode_lookup(kv_cache, format, latent_scale, q, indices, sm_scale,
                       lengths is not None, sink is not None, num_threads, False, "sparse_decode")
    out = torch.empty(e.out_shape, dtype=e.out_dtype)
    lse = torch.empty(e.lse_shape, dtype=torch.float32)
    _decode_cpu_into(e.d, e, q, indices, out, lse, lengths, sink)
    return out, lse


def _decode_out_cpu(q, kv_cache, indices, format, out, lse, sm_scale=None, lengths=None,
                    sink=None, workspace=None, num_threads=0, latent_scale=1.0):
    e = _decode_lookup(kv_cache, format, latent_scale, q, indices, sm_scale,
                       lengths is not None, sink is not None, num_threads, False,
                       "sparse_decode_out")
    _check_outputs(e, out, lse, q.device)
    _decode_cpu_into(e.d, e, q, indices, out, lse, lengths, sink)


_workspaces = {}  # device index -> uint8 tensor


def reserve_workspace(device, nbytes):
    """Grow the per-device decode workspace to at least `nbytes` (call it before capturing a
    CUDA graph so that no allocation happens during capture). Returns the workspace."""
    idx = torch.device(device).index
    if idx is None:
        idx = torch.cuda.current_device()
    ws = _workspaces.get(idx)
    if ws is None or ws.numel() < nbytes:
        size = max(int(nbytes), 1 if ws is None else 2 * ws.numel())
        ws = torch.empty(size, dtype=torch.uint8, device=f"cuda:{idx}")
        _workspaces[idx] = ws
    return ws


def workspace_bytes(q, kv_cache, indices, format, lengths=None, sink=None):
    """CUDA workspace bytes sparse_decode needs for these shapes."""
    e = _decode_lookup(kv_cache, format, 1.0, q, indices, None, lengths is not None,
                       sink is not None, 0, q.device.type == "cuda", "workspace_bytes")
    return e.ws_need


def _decode_cuda_into(d, e, idx, dev, q, indices, out, lse, lengths, sink, workspace):
    _optional_inputs(e, q, lengths, sink)
    need = e.ws_need
    ws_ptr, ws_bytes = None, 0
    if need:
        if workspace is None:
            workspace = _workspaces.get(idx)
            if workspace is None or workspace.numel() < need:
                workspace = reserve_workspace(dev, need)
        elif workspace.device != dev or workspace.numel() * workspace.element_size() < need \
                or not workspace.is_contiguous():
            raise ValueError(f"mlakv.sparse_decode: workspace must be a contiguous tensor "
                             f"on {dev} of at least {need} bytes, got "
                             f"{workspace.numel() * workspace.element_size()} bytes on "
                             f"{workspace.device}")
        ws_ptr, ws_bytes = workspace.data_ptr(), workspace.numel() * workspace.element_size()
    e.p_q.value = q.data_ptr()
    e.p_idx.value = indices.data_ptr()
    e.p_out.value = out.data_ptr()
    e.p_lse.value = lse.data_ptr()
    _check(_require(_f().cuda_sparse_decode, "mlakv_cuda_sparse_decode")(
        d.ref, e.ref, ws_ptr, ws_bytes, _stream(idx)), "mlakv_cuda_sparse_decode")


def _decode_cuda_run(q, kv_cache, indices, format, out, lse, sm_scale, lengths, sink, workspace,
                     num_threads, latent_scale, op):
    """sparse_decode (out None: allocated) and sparse_decode_out on CUDA."""
    dev = kv_cache.device
    idx = dev.index
    prev = _device_enter(idx)
    try:
        e = _decode_lookup(kv_cache, format, latent_scale, q, indices, sm_scale,
                           lengths is not None, sink is not None, num_threads, True, op)
        if out is None:
            out = torch.empty(e.out_shape, dtype=e.out_dtype, device=dev)
            lse = torch.empty(e.lse_shape, dtype=torch.float32, device=dev)
        else:
            _check_outputs(e, out, lse, dev)
        _decode_cuda_into(e.d, e, idx, dev, q, indices, out, lse, lengths, sink, workspace)
    finally:
        if prev is not None:
            torch.cuda.set_device(prev)
    return out, lse


def _decode_cuda(q, kv_cache, indices, format, sm_scale=None, lengths=None, sink=None,
                 workspace=None, num_threads=0, latent_scale=1.0):
    return _decode_cuda_run(q, kv_cache, indices, format, None, None, sm_scale, lengths, sink,
                            workspace, num_threads, latent_scale, "sparse_decode")


def _decode_out_cuda(q, kv_cache, indices, format, out, lse, sm_scale=None, lengths=None,
                     sink=None, workspace=None, num_threads=0, latent_scale=1.0):
    _decode_cuda_run(q, kv_cache, indices, format, out, lse, sm_scale, lengths, sink, workspace,
                     num_threads, latent_scale, "sparse_decode_out")


def _decode_out_fake(q, kv_cache, indices, format, out, lse, sm_scale=None, lengths=None,
                     sink=None, workspace=None, num_threads=0, latent_scale=1.0):
    return None


def _decode_fake(q, kv_cache, indices, format, sm_scale=None, lengths=None, sink=None,
                 workspace=None, num_threads=0, latent_scale=1.0):
    b, s_q, h = q.shape[0], q.shape[1], q.shape[2]
    return (q.new_empty((b, s_q, h, V_DIM)), q.new_empty((b, s_q, h), dtype=torch.float32))


# --------------------------------------------------------------------------------------------
# gathers (bf16 rows for prefill kernels that read bf16 K/V)
# --------------------------------------------------------------------------------------------

def _gather_bf16_check(kv_cache, slots):
    _same_device(slots, kv_cache.device, "slots", "gather_bf16")
    if slots.dtype != torch.int32 or slots.dim() != 1 or \
            (slots.shape[0] > 1 and slots.stride(0) != 1):
        raise ValueError(f"mlakv.gather_bf16: slots must be contiguous int32 [n], got "
                         f"{slots.dtype} {list(slots.shape)}")
    return slots.shape[0]


def _gather_bf16_cpu(kv_cache, slots, format, latent_scale=1.0):
    fn = _require(_f().gather_bf16, "mlakv_gather_bf16")
    d = cache_descriptor(kv_cache, format, latent_scale)
    n = _gather_bf16_check(kv_cache, slots)
    out = torch.empty((n, QK_DIM), dtype=torch.bfloat16)
    if n:
        _check(fn(d.ref, n, slots.data_ptr(), out.data_ptr(), QK_DIM), "mlakv_gather_bf16")
    return out


def _gather_bf16_cuda(kv_cache, slots, format, latent_scale=1.0):
    fn = _require(_f().cuda_gather_bf16, "mlakv_cuda_gather_bf16")
    d = cache_descriptor(kv_cache, format, latent_scale)
    n = _gather_bf16_check(kv_cache, slots)
    out = torch.empty((n, QK_DIM), dtype=torch.bfloat16, device=kv_cache.device)
    if n:
        idx = kv_cache.device.index
        with _DeviceGuard(idx):
            _check(fn(d.ref, n, slots.data_ptr(), out.data_ptr(), QK_DIM, None, _stream(idx)),
                   "mlakv_cuda_gather_bf16")
    return out


def _gather_bf16_fake(kv_cache, slots, format, latent_scale=1.0):
    return kv_cache.new_empty((slots.shape[0], QK_DIM), dtype=torch.bfloat16)


def _upconvert_check(kv_cache, dst, block_table, seq_lens, workspace_starts, seq_starts):
    op = "gather_upconvert"
    dev = kv_cache.device
    named = [("dst", dst), ("block_table", block_table), ("seq_lens", seq_lens),
             ("workspace_starts", workspace_starts)]
    if seq_starts is not None:
        named.append(("seq_starts", seq_starts))
    for name, t in named:
        _same_device(t, dev, name, op)
    if dst.dtype != torch.bfloat16 or dst.dim() != 2 or dst.shape[1] != QK_DIM or \
            dst.stride(1) != 1:
        raise ValueError(f"mlakv.{op}: dst must be bfloat16 [rows, {QK_DIM}] with unit stride "
                         f"in its last dimension, got {dst.dtype} {list(dst.shape)}")
    if seq_lens.dim() != 1:
        raise ValueError(f"mlakv.{op}: seq_lens must be int32 [batch], got "
                         f"{list(seq_lens.shape)}")
    batch = seq_lens.shape[0]
    for name, t in named[2:]:
        if t.dtype != torch.int32 or tuple(t.shape) != (batch,) or \
                (batch > 1 and t.stride(0) != 1):
            raise ValueError(f"mlakv.{op}: {name} must be contiguous int32 [{batch}], got "
                             f"{t.dtype} {list(t.shape)}")
    if block_table.dtype != torch.int32 or block_table.dim() != 2 or \
            block_table.shape[0] < batch or \
            (block_table.shape[1] > 1 and block_table.stride(1) != 1):
        raise ValueError(f"mlakv.{op}: block_table must be int32 [batch >= {batch}, "
                         f"max_blocks] with unit stride in its last dimension, got "
                         f"{block_table.dtype} {list(block_table.shape)}")
    bt_stride = block_table.stride(0) if block_table.shape[0] > 1 else block_table.shape[1]
    out_stride = dst.stride(0) if dst.shape[0] > 1 else QK_DIM
    return batch, bt_stride, out_stride


def _gather_upconvert_cpu(kv_cache, dst, block_table, seq_lens, workspace_starts, seq_starts,
                          format, latent_scale=1.0):
    fn = _require(_f().gather_upconvert, "mlakv_gather_upconvert")
    d = cache_descriptor(kv_cache, format, latent_scale)
    batch, bts, ds = _upconvert_check(kv_cache, dst, block_table, seq_lens, workspace_starts,
                                      seq_starts)
    _check(fn(d.ref, batch, block_table.data_ptr(), bts, seq_lens.data_ptr(),
              workspace_starts.data_ptr(),
              None if seq_starts is None else seq_starts.data_ptr(), dst.data_ptr(),
              dst.shape[0], ds), "mlakv_gather_upconvert")


def _gather_upconvert_cuda(kv_cache, dst, block_table, seq_lens, workspace_starts, seq_starts,
                           format, latent_scale=1.0):
    fn = _require(_f().cuda_gather_upconvert, "mlakv_cuda_gather_upconvert")
    d = cache_descriptor(kv_cache, format, latent_scale)
    batch, bts, ds = _upconvert_check(kv_cache, dst, block_table, seq_lens, workspace_starts,
                                      seq_starts)
    idx = kv_cache.device.index
    with _DeviceGuard(idx):
        _check(fn(d.ref, batch, block_table.data_ptr(), bts, seq_lens.data_ptr(),
                  workspace_starts.data_ptr(),
                  None if seq_starts is None else seq_starts.data_ptr(), dst.data_ptr(),
                  dst.shape[0], ds, None, _stream(idx)), "mlakv_cuda_gather_upconvert")


def _gather_upconvert_fake(kv_cache, dst, block_table, seq_lens, workspace_starts, seq_starts,
                           format, latent_scale=1.0):
    return None


# --------------------------------------------------------------------------------------------
# record conversion
# --------------------------------------------------------------------------------------------

def _records_cache(records, rec):
    """A one-block view [1, n, rec] of n contiguous records."""
    return records.view(1, records.shape[0], rec)


def _encode_impl(latent, rope, format, fp8_scale_recipe=0):
    code, rec = format_code(format)
    n = latent.shape[0] if latent.dim() else 0
    records = torch.zeros((n, rec), dtype=torch.uint8, device=latent.device)
    if latent.dim() != 2 or latent.shape[1] != LATENT_DIM or rope.dim() != 2 or \
            rope.shape != (n, ROPE_DIM):
        raise ValueError(f"mlakv.encode_records: latent must be [n, {LATENT_DIM}] and rope "
                         f"[n, {ROPE_DIM}], got {list(latent.shape)} and {list(rope.shape)}")
    if n == 0:
        return records
    slots = torch.arange(n, dtype=torch.int64, device=latent.device)
    lat, rp = latent.contiguous(), rope.contiguous()
    view = _records_cache(records, rec)
    if latent.device.type == "cuda":
        _write_cuda(view, lat, rp, slots, format, fp8_scale_recipe)
    else:
        _write_cpu(view, lat, rp, slots, format, fp8_scale_recipe)
    return records


def _encode_fake(latent, rope, format, fp8_scale_recipe=0):
    _, rec = format_code(format)
    return latent.new_empty((latent.shape[0], rec), dtype=torch.uint8)


def _decode_records_cpu(records, format):
    code, rec = format_code(format)
    if records.dim() != 2 or records.shape[1] != rec or records.element_size() != 1:
        raise ValueError(f"mlakv.decode_records: records must be 1-byte [n, {rec}] for "
                         f"{format}, got {records.dtype} {list(records.shape)}")
    n = records.shape[0]
    latent = torch.empty((n, LATENT_DIM), dtype=torch.float32)
    rope = torch.empty((n, ROPE_DIM), dtype=torch.float32)
    if n == 0:
        return latent, rope
    r = records.contiguous()
    c = _lib.CacheC()
    _check(_f().cache_init(ctypes.byref(c), r.data_ptr(), code, 1, n, 0), "mlakv_cache_init")
    slots = torch.arange(n, dtype=torch.int64)
    _check(_f().read(ctypes.byref(c), n, slots.data_ptr(), latent.data_ptr(), rope.data_ptr()),
           "mlakv_read")
    return latent, rope


def _decode_records_cuda(records, format):
    # Not a serving path: the records go through the host (it synchronizes).
    latent, rope = _decode_records_cpu(records.cpu(), format)
    return latent.to(records.device), rope.to(records.device)


def _decode_records_fake(records, format):
    n = records.shape[0]
    return (records.new_empty((n, LATENT_DIM), dtype=torch.float32),
            records.new_empty((n, ROPE_DIM), dtype=torch.float32))


# --------------------------------------------------------------------------------------------
# registration
# --------------------------------------------------------------------------------------------
# decode context parallelism: global positions -> a rank's slots; the merge of the partials
# --------------------------------------------------------------------------------------------

def _dcp_check(positions, block_table, kv_cache, rank, world):
    op = "dcp_local_indices"
    dev = kv_cache.device
    for name, t in (("positions", positions), ("block_table", block_table)):
        if t.device != dev:
            raise ValueError(f"mlakv.{op}: {name} is on {t.device} but kv_cache is on {dev}")
        if t.dtype != torch.int32:
            raise TypeError(f"mlakv.{op}: {name} must be int32, got {t.dtype}")
    if positions.dim() != 3 or (positions.shape[2] > 1 and positions.stride(2) != 1):
        raise ValueError(f"mlakv.{op}: positions must be [batch, s_q, topk] with unit stride in "
                         f"its last dimension, got {list(positions.shape)}")
    b = positions.shape[0]
    if block_table.dim() != 2 or block_table.shape[0] != b or \
            (block_table.shape[1] > 1 and block_table.stride(1) != 1):
        raise ValueError(f"mlakv.{op}: block_table must be [{b}, blocks] with unit stride in its "
                         f"last dimension, got {list(block_table.shape)}")
    st = _unit_strides(positions)
    bts = block_table.stride(0) if b > 1 else block_table.shape[1]
    return b, positions.shape[1], positions.shape[2], st[0], st[1], bts


def _dcp_local_indices_cpu(positions, block_table, kv_cache, format, rank, world):
    d = cache_descriptor(kv_cache, format)
    b, s_q, topk, psb, pst, bts = _dcp_check(positions, block_table, kv_cache, rank, world)
    out = torch.empty((b, s_q, topk), dtype=torch.int32)
    lengths = torch.empty((b,), dtype=torch.int32)
    _check(_f().dcp_local_indices(d.ref, int(rank), int(world), b, s_q, topk,
                                  positions.data_ptr(), psb, pst, block_table.data_ptr(), bts,
                                  out.data_ptr(), lengths.data_ptr()), "mlakv_dcp_local_indices")
    return out, lengths


def _dcp_local_indices_cuda(positions, block_table, kv_cache, format, rank, world):
    d = cache_descriptor(kv_cache, format)
    b, s_q, topk, psb, pst, bts = _dcp_check(positions, block_table, kv_cache, rank, world)
    dev = kv_cache.device
    out = torch.empty((b, s_q, topk), dtype=torch.int32, device=dev)
    lengths = torch.empty((b,), dtype=torch.int32, device=dev)
    idx = dev.index
    with _DeviceGuard(idx):
        _check(_require(_f().cuda_dcp_local_indices, "mlakv_cuda_dcp_local_indices")(
            d.ref, int(rank), int(world), b, s_q, topk, positions.data_ptr(), psb, pst,
            block_table.data_ptr(), bts, out.data_ptr(), lengths.data_ptr(), None,
            _stream(idx)), "mlakv_cuda_dcp_local_indices")
    return out, lengths


def _dcp_local_indices_fake(positions, block_table, kv_cache, format, rank, world):
    return (positions.new_empty(tuple(positions.shape), dtype=torch.int32),
            positions.new_empty((positions.shape[0],), dtype=torch.int32))


def _merge_check(out_parts, lse_parts, sink):
    op = "merge_partials"
    if out_parts.dim() < 2 or lse_parts.dim() != out_parts.dim() - 1 or \
            tuple(lse_parts.shape) != tuple(out_parts.shape[:-1]):
        raise ValueError(f"mlakv.{op}: out_parts [n, ..., heads, dim] and lse_parts "
                         f"[n, ..., heads] expected, got {list(out_parts.shape)} and "
                         f"{list(lse_parts.shape)}")
    if out_parts.dtype not in (torch.bfloat16, torch.float32) or lse_parts.dtype != torch.float32:
        raise TypeError(f"mlakv.{op}: out_parts must be bfloat16 or float32 and lse_parts "
                        f"float32, got {out_parts.dtype} and {lse_parts.dtype}")
    for name, t in (("lse_parts", lse_parts), ("sink", sink)):
        if t is not None and t.device != out_parts.device:
            raise ValueError(f"mlakv.{op}: {name} is on {t.device} but out_parts is on "
                             f"{out_parts.device}")
    heads = out_parts.shape[-2] if out_parts.dim() >= 3 else 1
    if sink is not None and (sink.dtype != torch.float32 or tuple(sink.shape) != (heads,)):
        raise ValueError(f"mlakv.{op}: sink must be float32 [{heads}], got {sink.dtype} "
                         f"{list(sink.shape)}")
    n, dim = out_parts.shape[0], out_parts.shape[-1]
    rows = lse_parts[0].numel() if n else 0
    return n, rows, dim, heads


def _merge_partials_cpu(out_parts, lse_parts, sink=None):
    n, rows, dim, heads = _merge_check(out_parts, lse_parts, sink)
    parts = out_parts.float().contiguous()
    lse_c = lse_parts.contiguous()
    row_sink = None if sink is None else sink.repeat(rows // heads).contiguous()
    out = torch.empty(tuple(out_parts.shape[1:]), dtype=torch.float32)
    lse = torch.empty(tuple(lse_parts.shape[1:]), dtype=torch.float32)
    _check(_f().merge_partials(n, rows, dim, parts.data_ptr(), lse_c.data_ptr(),
                               None if row_sink is None else row_sink.data_ptr(), out.data_ptr(),
                               lse.data_ptr()), "mlakv_merge_partials")
    return out.to(out_parts.dtype), lse


def _merge_partials_cuda(out_parts, lse_parts, sink=None):
    n, rows, dim, heads = _merge_check(out_parts, lse_parts, sink)
    parts = out_parts.contiguous()
    lse_c = lse_parts.contiguous()
    dev = out_parts.device
    out = torch.empty(tuple(out_parts.shape[1:]), dtype=out_parts.dtype, device=dev)
    lse = torch.empty(tuple(lse_parts.shape[1:]), dtype=torch.float32, device=dev)
    code = _DTYPE_CODE[out_parts.dtype]
    idx = dev.index
    with _DeviceGuard(idx):
        _check(_require(_f().cuda_merge_partials, "mlakv_cuda_merge_partials")(
            n, rows, dim, heads, parts.data_ptr(), code, lse_c.data_ptr(),
            None if sink is None else sink.contiguous().data_ptr(), out.data_ptr(), code,
            lse.data_ptr(), _stream(idx)), "mlakv_cuda_merge_partials")
    return out, lse


def _merge_partials_fake(out_parts, lse_parts, sink=None):
    return (out_parts.new_empty(tuple(out_parts.shape[1:])),
            lse_parts.new_empty(tuple(lse_parts.shape[1:])))

# --------------------------------------------------------------------------------------------

SCHEMAS = {
    "write": "write(Tensor(a!) kv_cache, Tensor kv_c, Tensor k_pe, Tensor slot_mapping, "
             "str format, int fp8_scale_recipe=0, float latent_scale=1.0, "
             "int nvfp4_encoder=0) -> ()",
    "sparse_decode": "sparse_decode(Tensor q, Tensor kv_cache, Tensor indices, str format, "
                     "float? sm_scale=None, Tensor? lengths=None, Tensor? sink=None, "
                     "Tensor(a!)? workspace=None, int num_threads=0, "
                     "float latent_scale=1.0) -> (Tensor, Tensor)",
    "sparse_decode_out": "sparse_decode_out(Tensor q, Tensor kv_cache, Tensor indices, str format, "
                         "Tensor(a!) out, Tensor(b!) lse, float? sm_scale=None, "
                         "Tensor? lengths=None, Tensor? sink=None, Tensor(c!)? workspace=None, "
                         "int num_threads=0, float latent_scale=1.0) -> ()",
    "gather_bf16": "gather_bf16(Tensor kv_cache, Tensor slots, str format, "
                   "float latent_scale=1.0) -> Tensor",
    "gather_upconvert": "gather_upconvert(Tensor kv_cache, Tensor(a!) dst, Tensor block_table, "
                        "Tensor seq_lens, Tensor workspace_starts, Tensor? seq_starts, "
                        "str format, float latent_scale=1.0) -> ()",
    "encode_records": "encode_records(Tensor latent, Tensor rope, str format, "
                      "int fp8_scale_recipe=0) -> Tensor",
    "decode_records": "decode_records(Tensor records, str format) -> (Tensor, Tensor)",
    "dcp_local_indices": "dcp_local_indices(Tensor positions, Tensor block_table, Tensor kv_cache, "
                         "str format, int rank, int world) -> (Tensor, Tensor)",
    "merge_partials": "merge_partials(Tensor out_parts, Tensor lse_parts, Tensor? sink=None) "
                      "-> (Tensor, Tensor)",
}

_KERNELS = {
    "write": (_write_cpu, _write_cuda, _write_fake),
    "sparse_decode": (_decode_cpu, _decode_cuda, _decode_fake),
    "sparse_decode_out": (_decode_out_cpu, _decode_out_cuda, _decode_out_fake),
    "gather_bf16": (_gather_bf16_cpu, _gather_bf16_cuda, _gather_bf16_fake),
    "gather_upconvert": (_gather_upconvert_cpu, _gather_upconvert_cuda, _gather_upconvert_fake),
    "encode_records": (_encode_impl, _encode_impl, _encode_fake),
    "decode_records": (_decode_records_cpu, _decode_records_cuda, _decode_records_fake),
    "dcp_local_indices": (_dcp_local_indices_cpu, _dcp_local_indices_cuda,
                          _dcp_local_indices_fake),
    "merge_partials": (_merge_partials_cpu, _merge_partials_cuda, _merge_partials_fake),
}


# the ops whose Python CPU / CUDA kernels the compiled ones replace (use_compiled_ops)
_HOT = ("write", "sparse_decode", "sparse_decode_out")


def _register():
    if hasattr(torch.ops, NAMESPACE) and hasattr(getattr(torch.ops, NAMESPACE), "write") and \
            getattr(_register, "lib", None) is not None:
        return
    lib = torch.library.Library(NAMESPACE, "DEF")
    hot = torch.library.Library(NAMESPACE, "IMPL")  # its own object: use_compiled_ops drops it
    for name, schema in SCHEMAS.items():
        lib.define(schema)
        cpu, cuda, fake = _KERNELS[name]
        target = hot if name in _HOT else lib
        target.impl(name, cpu, "CPU")
        target.impl(name, cuda, "CUDA")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
    _register.lib = lib  # the registrations live as long as these objects
    _register.hot = hot


_register()

ops = getattr(torch.ops, NAMESPACE)


# --------------------------------------------------------------------------------------------
# compiled kernels
# --------------------------------------------------------------------------------------------

_compiled = None


def _header_dir():
    here = os.path.dirname(os.path.abspath(__file__))
    for d in (os.path.join(here, "include"), os.path.join(_lib.repo_root(), "include")):
        if os.path.exists(os.path.join(d, "mlakv.h")):
            return d
    raise FileNotFoundError("mlakv: mlakv.h not found (neither in the package nor in the "
                            "source tree)")


def _write_any(kv_cache, *args):
    return (_write_cuda if kv_cache.is_cuda else _write_cpu)(kv_cache, *args)


def _decode_any(q, kv_cache, *args):
    return (_decode_cuda if kv_cache.is_cuda else _decode_cpu)(q, kv_cache, *args)


def _decode_out_any(q, kv_cache, *args):
    return (_decode_out_cuda if kv_cache.is_cuda else _decode_out_cpu)(q, kv_cache, *args)


def use_compiled_ops(verbose=False):
    """Replace the Python kernels of write, sparse_decode and sparse_decode_out (CPU and CUDA)
    with compiled ones (csrc/torch_ops.cpp, built on the first call by
    torch.utils.cpp_extension against this torch and cached; needs a C++ compiler, ninja, and
    the CUDA toolkit's headers for the CUDA kernels). The ops, their schemas, results and
    errors stay the same: the compiled kernels take the calls whose checks pass and whose C
    call succeeds, and hand every other call to the Python kernel. Saves most of the host time
    per call (bench/python_overhead.py). Setting MLAKV_TORCH_COMPILED_OPS=1 calls this at
    import. Returns the extension module."""
    global _compiled
    if _compiled is not None:
        return _compiled
    import shutil
    import sys
    from torch.utils import cpp_extension
    # ninja from pip sits beside the interpreter, off PATH when a venv is not activated
    bindir = os.path.dirname(sys.executable)
    if shutil.which("ninja") is None and os.path.exists(os.path.join(bindir, "ninja")):
        os.environ["PATH"] = bindir + os.pathsep + os.environ.get("PATH", "")
    src = os.path.join(os.path.dirname(os.path.abspath(__file__)), "csrc", "torch_ops.cpp")
    cuda = torch.version.cuda is not None and cpp_extension.CUDA_HOME is not None
    # no .cu source, so no GPU architecture is compiled for; torch still derives nvcc flags
    # and, without a GPU to ask, needs a list
    arch_env = os.environ.get("TORCH_CUDA_ARCH_LIST")
    if cuda and arch_env is None:
        os.environ["TORCH_CUDA_ARCH_LIST"] = "9.0"
    try:
        ext = cpp_extension.load(
            name="mlakv_torch_ops" + ("_cuda" if cuda else "_cpu"), sources=[src],
            extra_include_paths=[_header_dir()],
            extra_cflags=["-O2"] + (["-DMLAKV_TORCH_CUDA"] if cuda else []),
            with_cuda=cuda, verbose=verbose)
    finally:
        if cuda and arch_env is None:
            del os.environ["TORCH_CUDA_ARCH_LIST"]
    names = ["mlakv_cache_init", "mlakv_cache_set_latent_scale", "mlakv_format_get",
             "mlakv_write_options_default", "mlakv_decode_args_default", "mlakv_write",
             "mlakv_sparse_decode"]
    if ext.has_cuda():
        names += ["mlakv_cuda_write", "mlakv_cuda_sparse_decode",
                  "mlakv_cuda_decode_workspace_size"]
    handle = _lib.lib()
    # 0 for a function the library lacks (the CUDA ones in a CPU-only build)
    addresses = {n: ctypes.cast(getattr(handle, n), ctypes.c_void_p).value or 0
                 if getattr(handle, n, None) is not None else 0 for n in names}
    _register.hot._destroy()  # the Python kernels of these ops stay reachable as fallbacks
    ext.init(addresses, _write_any, _decode_any, _decode_out_any)
    _compiled = ext
    return ext


if os.environ.get("MLAKV_TORCH_COMPILED_OPS") == "1":
    use_compiled_ops()
