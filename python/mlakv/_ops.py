"""The paged cache helper, the writer, the reader and sparse decode, for numpy (CPU) and torch
(CPU or CUDA) arrays."""

import ctypes
import math

import numpy as np

from . import _arrays as A
from . import _lib
from ._info import cache_bytes, format_info, to_format, write_options
from ._lib import LATENT_DIM, QK_DIM, ROPE_DIM, V_DIM

_MODES = {"exact": 0, "engine": 1}


# --------------------------------------------------------------------------------------------
# devices
# --------------------------------------------------------------------------------------------

def _torch_or_raise(where):
    try:
        import torch
    except ImportError as exc:
        raise ImportError(f"{where}: a CUDA cache needs torch, which is not installed") from exc
    return torch


def normalize_device(device, where="mlakv"):
    """"cpu" or "cuda:N" from a string or a torch.device."""
    text = str(device)
    if text == "cpu":
        return "cpu"
    if text.startswith("cuda"):
        torch = _torch_or_raise(where)
        if not torch.cuda.is_available():
            raise ValueError(f"{where}: device {text!r} requested but torch sees no CUDA device")
        idx = torch.device(text).index
        return f"cuda:{torch.cuda.current_device() if idx is None else idx}"
    raise ValueError(f"{where}: device must be 'cpu' or 'cuda[:N]', got {text!r}")


_checked_devices = set()


def _cuda_guard(device, where):
    """(torch, device context manager, stream handle) for a CUDA call on `device`. The first
    call per device runs mlakv_cuda_check_device() (outside any graph capture it may be in
    later)."""
    torch = _torch_or_raise(where)
    idx = int(device.split(":")[1])
    guard = torch.cuda.device(idx)
    if idx not in _checked_devices:
        with guard:
            _lib.call("mlakv_cuda_check_device")
        _checked_devices.add(idx)
    return torch, guard


def _current_stream(torch, idx):
    return torch.cuda.current_stream(idx).cuda_stream


# --------------------------------------------------------------------------------------------
# the paged cache
# --------------------------------------------------------------------------------------------

class PagedCache:
    """A paged cache of `num_blocks x block_size` records of one format, on the CPU (a numpy
    uint8 buffer) or a CUDA device (a torch uint8 tensor), zero-filled.

    `descriptor` is the C `mlakv_cache` (a ctypes Structure) the entry points take; `data` is
    the buffer, kept alive by this object. Use `PagedCache.wrap` for a buffer an engine owns.
    """

    def __init__(self, format, num_blocks, block_size=64, device="cpu", block_stride_bytes=0):
        where = "mlakv.PagedCache"
        f = to_format(format, where)
        nbytes = cache_bytes(f, num_blocks, block_size, block_stride_bytes)
        dev = normalize_device(device, where)
        if dev == "cpu":
            raw = np.zeros(nbytes + 64, dtype=np.uint8)
            off = (-raw.ctypes.data) % 64  # 64-byte aligned base
            buf = raw[off:off + nbytes]
        else:
            torch = _torch_or_raise(where)
            buf = torch.zeros(nbytes, dtype=torch.uint8, device=dev)
        self._setup(buf, f, int(num_blocks), int(block_size), int(block_stride_bytes), dev,
                    nbytes)

    @classmethod
    def wrap(cls, buffer, format, block_size, num_blocks=None):
        """A PagedCache over an existing uint8 buffer (numpy array or torch tensor). Either 1-D
        contiguous (dense blocks; num_blocks defaults to what fits), or [num_blocks, ...] with
        each block's bytes contiguous and the block stride taken from buffer.stride(0)."""
        where = "mlakv.PagedCache.wrap"
        f = to_format(format, where)
        arg = A.describe(buffer, "buffer", where)
        A.require_dtype(arg, ("uint8",), where)
        rec = format_info(f).record_bytes
        block_size = int(block_size)
        if block_size < 1:
            raise ValueError(f"{where}: block_size must be >= 1, got {block_size}")
        if arg.ndim == 1:
            A.require_contiguous(arg, where)
            stride = block_size * rec
            avail = arg.shape[0]
            if num_blocks is None:
                num_blocks = avail // stride
        else:
            inner = A.Arg(arg.name, None, arg.kind, arg.device, arg.ptr, arg.shape[1:],
                          arg.strides[1:], arg.dtype, 1)
            if not inner.is_contiguous():
                raise ValueError(f"{where}: buffer must be contiguous within a block "
                                 f"(dimensions 1..), got strides {list(arg.strides)}")
            per_block = int(np.prod(arg.shape[1:]))
            if per_block < block_size * rec:
                raise ValueError(f"{where}: buffer blocks hold {per_block} bytes, fewer than "
                                 f"block_size * record_bytes = {block_size * rec}")
            if num_blocks is None:
                num_blocks = arg.shape[0]
            elif num_blocks > arg.shape[0]:
                raise ValueError(f"{where}: num_blocks {num_blocks} > buffer.shape[0] "
                                 f"{arg.shape[0]}")
            stride = arg.strides[0] if arg.shape[0] > 1 else per_block
            if stride < 0:
                raise ValueError(f"{where}: buffer has a negative block stride")
            avail = (arg.shape[0] - 1) * stride + per_block if arg.shape[0] else 0
        cache_bytes(f, num_blocks, block_size, stride)  # geometry checks (MlakvError)
        nbytes = (num_blocks - 1) * stride + block_size * rec  # bytes the records touch
        if nbytes > avail:
            raise ValueError(f"{where}: buffer spans {avail} bytes, the cache needs {nbytes}")
        self = cls.__new__(cls)
        self._setup(buffer, f, int(num_blocks), block_size, int(stride), arg.device, nbytes)
        return self

    def _setup(self, buf, f, num_blocks, block_size, block_stride_bytes, device, nbytes):
        self.data = buf
        self.format = f
        self.format_info = format_info(f)
        self.record_bytes = self.format_info.record_bytes
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.device = device
        self.nbytes = nbytes
        ptr = buf.ctypes.data if isinstance(buf, np.ndarray) else buf.data_ptr()
        self.descriptor = _lib.CacheC()
        _lib.call("mlakv_cache_init", ctypes.byref(self.descriptor), ptr, int(f), num_blocks,
                  block_size, block_stride_bytes)
        self.block_stride_bytes = int(self.descriptor.block_stride_bytes)
        # torch buffers: the [num_blocks, block_size, record_bytes] view torch.ops.mlakv takes
        # (write / sparse_decode with torch tensors go through its cached argument structs)
        self._tview = None
        if not isinstance(buf, np.ndarray):
            self._tview = buf.as_strided((num_blocks, block_size, self.record_bytes),
                                         (self.block_stride_bytes, self.record_bytes, 1),
                                         buf.storage_offset())

    @property
    def capacity(self):
        """Number of slots: num_blocks * block_size."""
        return self.num_blocks * self.block_size

    @property
    def is_cuda(self):
        return self.device != "cpu"

    def __repr__(self):
        return (f"PagedCache({self.format_info.name}, num_blocks={self.num_blocks}, "
                f"block_size={self.block_size}, device={self.device!r}, "
                f"block_stride_bytes={self.block_stride_bytes})")

    def _flat(self):
        """The cache's bytes as a 1-D uint8 view of `data` (numpy or torch, no copy)."""
        buf = self.data
        if isinstance(buf, np.ndarray):
            if buf.ndim == 1:
                return buf[:self.nbytes]
            return np.lib.stride_tricks.as_strided(buf, shape=(self.nbytes,), strides=(1,))
        if buf.dim() == 1:
            return buf[:self.nbytes]
        return buf.as_strided((self.nbytes,), (1,), buf.storage_offset())

    def host_bytes(self):
        """The cache's bytes as a 1-D numpy uint8 array (a view on the CPU, a copy from CUDA)."""
        flat = self._flat()
        if isinstance(flat, np.ndarray):
            return flat
        return flat.cpu().numpy()

    def slot_offsets(self, slots):
        if isinstance(slots, np.ndarray):
            if slots.dtype.kind not in "iu":
                raise TypeError(f"mlakv.PagedCache: slots must be integers, got {slots.dtype.name}")
            s = slots.astype(np.int64)
        else:
            s = A.index_list_to_numpy(slots, "slots", "mlakv.PagedCache", np.int64)
        if s.size and (s.min() < 0 or s.max() >= self.capacity):
            raise ValueError(f"mlakv.PagedCache: slots must be in [0, {self.capacity})")
        return (s // self.block_size) * self.block_stride_bytes + \
            (s % self.block_size) * self.record_bytes

    def records(self, slots):
        """Raw record bytes of flat slots: numpy uint8 [len(slots), record_bytes] (a copy)."""
        flat = self.host_bytes()
        offs = self.slot_offsets(slots).reshape(-1)
        idx = offs[:, None] + np.arange(self.record_bytes)[None, :]
        return flat[idx]

    def to(self, device):
        """A copy of this cache (same geometry and bytes) on another device."""
        dev = normalize_device(device, "mlakv.PagedCache.to")
        other = PagedCache(self.format, self.num_blocks, self.block_size, dev,
                           self.block_stride_bytes)
        dst = other._flat()[:self.nbytes]
        src = self._flat()
        if isinstance(dst, np.ndarray):
            dst[:] = src if isinstance(src, np.ndarray) else src.cpu().numpy()
        elif isinstance(src, np.ndarray):
            torch = _torch_or_raise("mlakv.PagedCache.to")
            dst.copy_(torch.from_numpy(np.ascontiguousarray(src)))
        else:
            dst.copy_(src)
        return other

    def zero_(self):
        if isinstance(self.data, np.ndarray):
            self.data[...] = 0
        else:
            self.data.zero_()
        return self


def _check_cache(cache, where):
    if not isinstance(cache, PagedCache):
        raise TypeError(f"{where}: cache must be a mlakv.PagedCache, got {type(cache).__name__}")


def _squeeze_unit_middle(arg, ndim_want):
    """[n, 1, d] -> [n, d] (vLLM passes k_pe as [n, 1, 64])."""
    if arg.ndim == ndim_want + 1 and arg.shape[1] == 1:
        return A.Arg(arg.name, arg.obj, arg.kind, arg.device, arg.ptr,
                     (arg.shape[0],) + arg.shape[2:], (arg.strides[0],) + arg.strides[2:],
                     arg.dtype, arg.itemsize)
    return arg


def _norm_strides(arg):
    """Strides with size-1 dimensions replaced by their contiguous value (torch and numpy may
    report anything there)."""
    out = list(arg.strides)
    for i in range(arg.ndim - 1, -1, -1):
        if arg.shape[i] == 1:
            out[i] = 1 if i == arg.ndim - 1 else out[i + 1] * arg.shape[i + 1]
    return tuple(out)


def _index_arg(x, name, where, cache, dtype_name, np_dtype):
    if not cache.is_cuda:
        x = A.as_numpy_index_array(x, name, where, np_dtype)
    a = A.describe(x, name, where)
    A.require_device(a, cache.device, where)
    A.require_dtype(a, (dtype_name,), where)
    return a


# --------------------------------------------------------------------------------------------
# writer / reader
# --------------------------------------------------------------------------------------------

def _desc(cache, latent_scale, where):
    """The cache's C descriptor, with latent_scale (s_l, a float) set when given: checked by
    mlakv_cache_set_latent_scale (finite, > 0; only 1.0 for fp8_ds_mla and the two-level
    format)."""
    if latent_scale is None:
        return cache.descriptor
    d = _lib.CacheC.from_buffer_copy(cache.descriptor)
    _lib.call("mlakv_cache_set_latent_scale", ctypes.byref(d), float(latent_scale))
    return d


def write(kv_c, k_pe, cache, slot_mapping, *, fp8_scale_recipe=None, rejected_count=None,
          latent_scale=None, nvfp4_encoder=None):
    """Quantize n tokens into their slots: kv_c [n, 512], k_pe [n, 64] (or [n, 1, 64]) of one
    dtype, slot_mapping int64 [n] (negative = padding, skipped).

    CPU cache: numpy arrays (float32, float16, bfloat16 via ml_dtypes, or uint16 bf16 bits) or
    CPU torch tensors; a slot >= capacity raises MlakvError and writes nothing.
    CUDA cache: CUDA torch tensors (bfloat16 / float16), launched on torch's current stream;
    out-of-range slots are skipped and counted into `rejected_count` (an int64 [1] tensor on
    the device) when given.
    latent_scale: the layer's static latent scale s_l (static NVFP4 formats; see
    mlakv.calibrate): latents are stored as bf16(x / s_l). nvfp4_encoder: "standard" (default)
    or "accurate" (per-group scale byte search, records readable by every reader).
    """
    where = "mlakv.write"
    if rejected_count is None and fp8_scale_recipe is None and latent_scale is None and \
            nvfp4_encoder is None and getattr(cache, "_tview", None) is not None and \
            A.is_torch(kv_c) and \
            A.is_torch(k_pe) and A.is_torch(slot_mapping):
        if _fast_torch("write", cache, kv_c, k_pe, slot_mapping):
            return
    _check_cache(cache, where)
    kv = _squeeze_unit_middle(A.describe(kv_c, "kv_c", where), 2)
    kp = _squeeze_unit_middle(A.describe(k_pe, "k_pe", where), 2)
    for a in (kv, kp):
        A.require_device(a, cache.device, where)
    sm = _index_arg(slot_mapping, "slot_mapping", where, cache, "int64", np.int64)
    allowed = ("bfloat16", "float16") if cache.is_cuda else \
        ("float32", "bfloat16", "bf16_bits", "float16")
    A.require_dtype(kv, allowed, where)
    if kp.dtype != kv.dtype:
        raise TypeError(f"{where}: k_pe must have the dtype of kv_c ({A._pretty(kv.dtype)}), "
                        f"got {A._pretty(kp.dtype)}")
    A.require_shape(kv, (None, LATENT_DIM), where)
    n = kv.shape[0]
    A.require_shape(kp, (n, ROPE_DIM), where)
    A.require_shape(sm, (n,), where)
    for a in (kv, kp):
        A.require_inner_contiguous(a, where)
        A.require_nonnegative_strides(a, where)
    A.require_contiguous(sm, where)
    kv_stride = kv.strides[0] if n > 1 else LATENT_DIM
    kp_stride = kp.strides[0] if n > 1 else ROPE_DIM
    opts = write_options(fp8_scale_recipe, where)
    if nvfp4_encoder is not None:
        codes = {"standard": 0, "accurate": 1}
        if nvfp4_encoder not in codes:
            raise ValueError(f"{where}: nvfp4_encoder must be 'standard' or 'accurate', got "
                             f"{nvfp4_encoder!r}")
        opts.nvfp4_encoder = codes[nvfp4_encoder]
    desc = _desc(cache, latent_scale, where)
    if not cache.is_cuda:
        if rejected_count is not None:
            raise ValueError(f"{where}: rejected_count is for CUDA caches (the CPU writer "
                             "raises on out-of-range slots)")
        _lib.call("mlakv_write", ctypes.byref(desc), n, kv.ptr, kv_stride, kp.ptr,
                  kp_stride, A.dtype_code(kv), sm.ptr, ctypes.byref(opts))
        return
    rc_ptr = None
    if rejected_count is not None:
        rc = A.describe(rejected_count, "rejected_count", where)
        A.require_device(rc, cache.device, where)
        A.require_dtype(rc, ("int64", "uint64"), where)
        if int(np.prod(rc.shape)) != 1:
            raise ValueError(f"{where}: rejected_count must hold one element, got shape "
                             f"{list(rc.shape)}")
        rc_ptr = ctypes.cast(ctypes.c_void_p(rc.ptr), ctypes.POINTER(ctypes.c_ulonglong))
    torch, guard = _cuda_guard(cache.device, where)
    with guard:
        stream = _current_stream(torch, int(cache.device.split(":")[1]))
        _lib.call("mlakv_cuda_write", ctypes.byref(desc), n, kv.ptr, kv_stride,
                  kp.ptr, kp_stride, A.dtype_code(kv), sm.ptr, ctypes.byref(opts), rc_ptr,
                  stream)


def read(cache, slots, *, latent=True, rope=True, latent_scale=None):
    """De-quantize the records of flat slots (int64 [n]) of a CPU cache:
    returns (latent fp32 [n, 512] or None, rope fp32 [n, 64] or None). latent_scale: the
    layer's s_l (the latent is multiplied by it)."""
    where = "mlakv.read"
    _check_cache(cache, where)
    if cache.is_cuda:
        raise ValueError(f"{where}: cache is on {cache.device}; read a host copy "
                         "(cache.to('cpu'))")
    s = _index_arg(slots, "slots", where, cache, "int64", np.int64)
    if s.ndim != 1:
        raise ValueError(f"{where}: slots must have shape [n], got {list(s.shape)}")
    A.require_contiguous(s, where)
    n = s.shape[0]
    lat = np.full((n, LATENT_DIM), np.nan, dtype=np.float32) if latent else None
    rp = np.full((n, ROPE_DIM), np.nan, dtype=np.float32) if rope else None
    _lib.call("mlakv_read", ctypes.byref(_desc(cache, latent_scale, where)), n, s.ptr,
              lat.ctypes.data if lat is not None else None,
              rp.ctypes.data if rp is not None else None)
    return lat, rp


# --------------------------------------------------------------------------------------------
# sparse decode
# --------------------------------------------------------------------------------------------

def _decode_args(where, q, cache, indices, lengths, sm_scale, sink, mode, num_threads):
    """Check q / indices / lengths / sink and fill a DecodeArgsC (out/lse left unset).
    Returns (args, q Arg, prefix shape of out/lse, keepalive list)."""
    _check_cache(cache, where)
    qa = A.describe(q, "q", where)
    A.require_device(qa, cache.device, where)
    A.require_dtype(qa, ("bfloat16",) if cache.is_cuda else ("float32", "bfloat16", "bf16_bits"),
                    where)
    if qa.ndim not in (3, 4) or qa.shape[-1] != QK_DIM:
        raise ValueError(f"{where}: q must have shape [batch, s_q, heads, {QK_DIM}] or "
                         f"[batch, heads, {QK_DIM}], got {list(qa.shape)}")
    A.require_inner_contiguous(qa, where)
    A.require_nonnegative_strides(qa, where)
    qs = _norm_strides(qa)
    if qa.ndim == 3:
        batch, heads = qa.shape[0], qa.shape[1]
        s_q = 1
        q_sb, q_sh = qs[0], qs[1]
        q_st = q_sh * heads
    else:
        batch, s_q, heads = qa.shape[:3]
        q_sb, q_st, q_sh = qs[:3]
    keep = []
    ia = _index_arg(indices, "indices", where, cache, "int32", np.int32)
    keep.append(ia.obj)
    if qa.ndim == 3:
        if ia.ndim != 2 or ia.shape[0] != batch:
            raise ValueError(f"{where}: indices must have shape [{batch}, topk] for q of shape "
                             f"{list(qa.shape)}, got {list(ia.shape)}")
        topk = ia.shape[1]
    else:
        if ia.ndim != 3 or ia.shape[:2] != (batch, s_q):
            raise ValueError(f"{where}: indices must have shape [{batch}, {s_q}, topk] for q of "
                             f"shape {list(qa.shape)}, got {list(ia.shape)}")
        topk = ia.shape[2]
    A.require_inner_contiguous(ia, where)
    A.require_nonnegative_strides(ia, where)
    ist = _norm_strides(ia)
    args = _lib.fn("mlakv_decode_args_default")(batch, s_q, heads, topk)
    args.q = qa.ptr
    args.q_dtype = A.dtype_code(qa)
    args.q_stride_batch, args.q_stride_token, args.q_stride_head = q_sb, q_st, q_sh
    args.indices = ctypes.cast(ctypes.c_void_p(ia.ptr), ctypes.POINTER(ctypes.c_int32))
    if ia.ndim == 2:
        args.indices_stride_batch, args.indices_stride_token = ist[0], topk
    else:
        args.indices_stride_batch, args.indices_stride_token = ist[0], ist[1]
    if lengths is not None:
        la = _index_arg(lengths, "lengths", where, cache, "int32", np.int32)
        A.require_shape(la, (batch,), where)
        A.require_contiguous(la, where)
        keep.append(la.obj)
        args.lengths = ctypes.cast(ctypes.c_void_p(la.ptr), ctypes.POINTER(ctypes.c_int32))
    if sink is not None:
        if not cache.is_cuda and not (isinstance(sink, np.ndarray) or A.is_torch(sink)):
            sink = np.ascontiguousarray(np.asarray(sink, dtype=np.float32))
        sa = A.describe(sink, "sink", where)
        A.require_device(sa, cache.device, where)
        A.require_dtype(sa, ("float32",), where)
        A.require_shape(sa, (heads,), where)
        A.require_contiguous(sa, where)
        keep.append(sa.obj)
        args.sink = ctypes.cast(ctypes.c_void_p(sa.ptr), ctypes.POINTER(ctypes.c_float))
    if sm_scale is not None:
        args.sm_scale = float(sm_scale)
    if mode is not None:
        if isinstance(mode, str):
            if mode not in _MODES:
                raise ValueError(f"{where}: mode must be 'exact' or 'engine', got {mode!r}")
            mode = _MODES[mode]
        if cache.is_cuda and mode != _MODES["engine"]:
            raise ValueError(f"{where}: mode must be 'engine' on CUDA (the GPU kernels compute "
                             "the engine numerics)")
        args.mode = int(mode)
    args.num_threads = int(num_threads)
    prefix = tuple(qa.shape[:-1])
    return args, qa, prefix, keep


def _out_arg(out, name, where, cache, shape, allowed, default_dtype, like_torch=False):
    if out is None:
        if cache.is_cuda or like_torch:
            torch = _torch_or_raise(where)
            tdt = {"bfloat16": torch.bfloat16, "float32": torch.float32,
                   "bf16_bits": torch.bfloat16}[default_dtype]
            out = torch.empty(shape, dtype=tdt, device=cache.device)
        else:
            out = A.np_empty(shape, default_dtype)
    a = A.describe(out, name, where)
    A.require_device(a, cache.device, where)
    A.require_dtype(a, allowed, where)
    A.require_shape(a, shape, where)
    A.require_contiguous(a, where)
    return out, a


def decode_workspace_size(cache, q, indices, *, lengths=None, sink=None):
    """Bytes of CUDA workspace sparse_decode needs for these shapes
    (mlakv_cuda_decode_workspace_size)."""
    where = "mlakv.decode_workspace_size"
    args, _, _, _keep = _decode_args(where, q, cache, indices, lengths, None, sink, None, 0)
    return _workspace_size(cache, args, where)


def _workspace_size(cache, args, where):
    size = ctypes.c_size_t(0)
    if cache.is_cuda:
        torch, guard = _cuda_guard(cache.device, where)
        with guard:
            _lib.call("mlakv_cuda_decode_workspace_size", ctypes.byref(cache.descriptor),
                      ctypes.byref(args), ctypes.byref(size))
    else:
        _lib.call("mlakv_cuda_decode_workspace_size", ctypes.byref(cache.descriptor),
                  ctypes.byref(args), ctypes.byref(size))
    return int(size.value)


def sparse_decode(q, cache, indices, *, lengths=None, sm_scale=None, sink=None, out=None,
                  lse=None, out_dtype=None, mode=None, num_threads=0, workspace=None,
                  latent_scale=None):
    """Sparse MLA decode over a paged cache. Returns (out, lse).

    q [batch, s_q, heads, 576] or [batch, heads, 576]; indices int32 [batch, s_q, topk] or
    [batch, topk] (flat slots, negative = invalid); lengths int32 [batch] (optional);
    sink fp32 [heads] (optional); sm_scale defaults to 1/sqrt(576).
    out [..., heads, 512] and lse fp32 [..., heads] are allocated unless given (contiguous).
    CPU: q float32 / bfloat16 (ml_dtypes) / uint16 bf16 bits; out float32 or bf16 (default:
    q's dtype); mode 'engine' (default) or 'exact'; num_threads 0 = all cores.
    CUDA: q and out bfloat16 tensors; runs on torch's current stream; `workspace` a uint8
    tensor of at least decode_workspace_size() bytes (allocated when None; pass one in for
    CUDA graph capture).
    """
    where = "mlakv.sparse_decode"
    if out is None and lse is None and out_dtype is None and mode is None and \
            workspace is None and latent_scale is None and \
            getattr(cache, "_tview", None) is not None and \
            A.is_torch(q) and q.dim() == 4 and A.is_torch(indices) and \
            (lengths is None or A.is_torch(lengths)) and (sink is None or A.is_torch(sink)):
        res = _fast_torch("sparse_decode", cache, q, indices, sm_scale, lengths, sink,
                          num_threads)
        if res is not None:
            return res
    args, qa, prefix, keep = _decode_args(where, q, cache, indices, lengths, sm_scale, sink,
                                          mode, num_threads)
    out_shape = prefix + (V_DIM,)
    if cache.is_cuda:
        out_allowed, default = ("bfloat16",), "bfloat16"
    else:
        out_allowed = ("float32", "bfloat16", "bf16_bits")
        default = qa.dtype if out_dtype is None else _dtype_name(out_dtype, where)
        if default not in out_allowed:
            raise TypeError(f"{where}: out_dtype must be float32 or bfloat16, got {default}")
    tq = qa.kind == "torch"  # torch in, torch out
    out, oa = _out_arg(out, "out", where, cache, out_shape, out_allowed, default, tq)
    lse, la = _out_arg(lse, "lse", where, cache, prefix, ("float32",), "float32", tq)
    args.out = oa.ptr
    args.out_dtype = A.dtype_code(oa)
    args.lse = ctypes.cast(ctypes.c_void_p(la.ptr), ctypes.POINTER(ctypes.c_float))
    if not cache.is_cuda:
        if workspace is not None:
            raise ValueError(f"{where}: workspace is for CUDA caches")
        _lib.call("mlakv_sparse_decode", ctypes.byref(_desc(cache, latent_scale, where)),
                  ctypes.byref(args))
        return out, lse
    torch, guard = _cuda_guard(cache.device, where)
    idx = int(cache.device.split(":")[1])
    with guard:
        need = ctypes.c_size_t(0)
        _lib.call("mlakv_cuda_decode_workspace_size", ctypes.byref(cache.descriptor),
                  ctypes.byref(args), ctypes.byref(need))
        need = int(need.value)
        if workspace is None:
            workspace = torch.empty(max(need, 1), dtype=torch.uint8, device=cache.device)
        wa = A.describe(workspace, "workspace", where)
        A.require_device(wa, cache.device, where)
        A.require_contiguous(wa, where)
        wbytes = int(np.prod(wa.shape)) * wa.itemsize
        if wbytes < need:
            raise ValueError(f"{where}: workspace holds {wbytes} bytes, this shape needs {need} "
                             "(mlakv.decode_workspace_size)")
        keep.append(workspace)
        _lib.call("mlakv_cuda_sparse_decode", ctypes.byref(_desc(cache, latent_scale, where)),
                  ctypes.byref(args), wa.ptr if need else None, wbytes,
                  _current_stream(torch, idx))
    return out, lse


def _fast_torch(op, cache, *args):
    """torch tensors on a torch-backed cache: the torch.ops.mlakv kernels (argument structs
    cached per shape, a few microseconds per call). None / False when they refuse the
    arguments: the general path then reports the problem in its own words. C errors raise."""
    from . import torch_ops as T
    fmt = cache.format_info.name
    cuda = cache.is_cuda
    try:
        if op == "write":
            kv_c, k_pe, slot_mapping = args
            (T._write_cuda if cuda else T._write_cpu)(cache._tview, kv_c, k_pe, slot_mapping,
                                                      fmt)
            return True
        q, indices, sm_scale, lengths, sink, num_threads = args
        return (T._decode_cuda if cuda else T._decode_cpu)(q, cache._tview, indices, fmt,
                                                           sm_scale, lengths, sink, None,
                                                           int(num_threads))
    except (TypeError, ValueError):
        return None


def _dtype_name(dt, where):
    if isinstance(dt, str):
        return {"bf16": "bfloat16", "fp32": "float32", "f32": "float32"}.get(dt, dt)
    if A.is_torch(dt) or type(dt).__module__ == "torch":
        return str(dt).replace("torch.", "")
    try:
        return A._np_dtype_name(np.dtype(dt))
    except TypeError as exc:
        raise TypeError(f"{where}: unknown dtype {dt!r}") from exc


def sparse_decode_partial(q, cache, indices, cand_begin, cand_end, *, lengths=None,
                          sm_scale=None, mode=None, num_threads=0, latent_scale=None):
    """CPU split-KV: decode over candidate positions [cand_begin, cand_end) only.
    Returns fp32 (out_partial [..., heads, 512], lse_partial [..., heads]); no sink."""
    where = "mlakv.sparse_decode_partial"
    args, _, prefix, _keep = _decode_args(where, q, cache, indices, lengths, sm_scale, None,
                                          mode, num_threads)
    if cache.is_cuda:
        raise ValueError(f"{where}: CPU caches only")
    out = np.full(prefix + (V_DIM,), np.nan, dtype=np.float32)
    lse = np.full(prefix, np.nan, dtype=np.float32)
    _lib.call("mlakv_sparse_decode_partial", ctypes.byref(_desc(cache, latent_scale, where)),
              ctypes.byref(args),
              int(cand_begin), int(cand_end), out.ctypes.data, lse.ctypes.data)
    return out, lse


def merge_partials(out_parts, lse_parts, sink=None):
    """Merge split-KV partials (CPU, fp32): out_parts [n_parts, rows..., dim],
    lse_parts [n_parts, rows...] -> (out [rows..., dim], lse [rows...])."""
    where = "mlakv.merge_partials"
    op = np.asarray(out_parts)
    lp = np.asarray(lse_parts)
    for name, a in (("out_parts", op), ("lse_parts", lp)):
        if a.dtype != np.float32:
            raise TypeError(f"{where}: {name} must be float32, got {a.dtype}")
    if op.ndim < 2 or lp.shape != op.shape[:-1]:
        raise ValueError(f"{where}: lse_parts must have shape out_parts.shape[:-1] = "
                         f"{list(op.shape[:-1])}, got {list(lp.shape)}")
    n_parts, dim = op.shape[0], op.shape[-1]
    rows_shape = op.shape[1:-1]
    rows = int(math.prod(rows_shape))
    op = np.ascontiguousarray(op)
    lp = np.ascontiguousarray(lp)
    sk = None
    if sink is not None:
        sk = np.ascontiguousarray(np.asarray(sink, dtype=np.float32))
        if sk.shape != tuple(rows_shape) and sk.shape != (rows,):
            raise ValueError(f"{where}: sink must have shape {list(rows_shape)}, got "
                             f"{list(sk.shape)}")
    out = np.full(tuple(rows_shape) + (dim,), np.nan, dtype=np.float32)
    lse = np.full(tuple(rows_shape), np.nan, dtype=np.float32)
    _lib.call("mlakv_merge_partials", n_parts, rows, dim, op.ctypes.data, lp.ctypes.data,
              sk.ctypes.data if sk is not None else None, out.ctypes.data, lse.ctypes.data)
    return out, lse
