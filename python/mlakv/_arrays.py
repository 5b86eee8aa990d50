"""Adapters from numpy arrays and torch tensors to (pointer, shape, element strides, dtype).

torch is never imported here: a tensor can only reach us if the caller imported torch, so
`sys.modules` is enough to recognise one. numpy is required (the CPU path allocates outputs).
"""

import sys

import numpy as np

from . import _lib

try:  # optional: numpy bfloat16 arrays
    import ml_dtypes as _ml_dtypes
    NP_BF16 = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    NP_BF16 = None


def torch_module():
    return sys.modules.get("torch")


def is_torch(x):
    t = torch_module()
    return t is not None and isinstance(x, t.Tensor)


class Arg:
    """One array argument, described for the C call."""

    __slots__ = ("name", "obj", "kind", "device", "ptr", "shape", "strides", "dtype", "itemsize")

    def __init__(self, name, obj, kind, device, ptr, shape, strides, dtype, itemsize):
        self.name = name          # argument name, for messages
        self.obj = obj            # the array / tensor itself
        self.kind = kind          # "numpy" or "torch"
        self.device = device      # "cpu" or "cuda:N"
        self.ptr = ptr            # address of element [0, ..., 0]
        self.shape = shape        # tuple of ints
        self.strides = strides    # tuple of ints, in elements
        self.dtype = dtype        # "float32", "bfloat16", "bf16_bits", "float16", "int64", ...
        self.itemsize = itemsize

    @property
    def ndim(self):
        return len(self.shape)

    def is_contiguous(self):
        expect = 1
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size != 1 and stride != expect:
                return False
            expect *= size
        return True


_NP_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(np.float64): "float64",
    np.dtype(np.uint16): "bf16_bits",
    np.dtype(np.int64): "int64",
    np.dtype(np.int32): "int32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.uint8): "uint8",
}


if NP_BF16 is not None:
    _NP_NAMES[NP_BF16] = "bfloat16"


def _np_dtype_name(dt):
    name = _NP_NAMES.get(dt)
    return name if name is not None else str(dt)


_TORCH_NAMES = {}


def _torch_dtype_name(t, dt):
    if not _TORCH_NAMES:
        _TORCH_NAMES.update({t.float32: "float32", t.float16: "float16",
                             t.bfloat16: "bfloat16", t.float64: "float64", t.int64: "int64",
                             t.int32: "int32", t.uint8: "uint8"})
        if hasattr(t, "uint64"):
            _TORCH_NAMES[t.uint64] = "uint64"
    name = _TORCH_NAMES.get(dt)
    return name if name is not None else str(dt).replace("torch.", "")


def describe(x, name, where):
    """Describe `x` (numpy array or torch tensor) as an Arg; TypeError for anything else."""
    if isinstance(x, np.ndarray):
        itemsize = x.dtype.itemsize
        strides = []
        for s in x.strides:
            if s % itemsize:
                raise ValueError(f"{where}: {name} has a stride of {s} bytes, not a multiple of "
                                 f"its {itemsize}-byte element")
            strides.append(s // itemsize)
        return Arg(name, x, "numpy", "cpu", x.ctypes.data, tuple(x.shape), tuple(strides),
                   _np_dtype_name(x.dtype), itemsize)
    if is_torch(x):
        t = torch_module()
        dev = x.device
        device = "cpu" if dev.type == "cpu" else (
            f"{dev.type}:{dev.index if dev.index is not None else t.cuda.current_device()}")
        return Arg(name, x, "torch", device, x.data_ptr(), tuple(x.shape), tuple(x.stride()),
                   _torch_dtype_name(t, x.dtype), x.element_size())
    raise TypeError(f"{where}: {name} must be a numpy array or a torch tensor, got "
                    f"{type(x).__name__}")


def require_dtype(arg, allowed, where):
    if arg.dtype not in allowed:
        names = " or ".join(_pretty(a) for a in allowed)
        raise TypeError(f"{where}: {arg.name} must be {names}, got {_pretty(arg.dtype)}")


def _pretty(d):
    return "uint16 (bf16 bits)" if d == "bf16_bits" else d


def require_shape(arg, expect, where):
    """expect: tuple of ints or None (any size) per dimension."""
    ok = arg.ndim == len(expect) and all(e is None or e == s for e, s in zip(expect, arg.shape))
    if not ok:
        want = "[" + ", ".join("*" if e is None else str(e) for e in expect) + "]"
        raise ValueError(f"{where}: {arg.name} must have shape {want}, got "
                         f"{list(arg.shape)}")


def require_contiguous(arg, where):
    if not arg.is_contiguous():
        raise ValueError(f"{where}: {arg.name} must be contiguous, got strides "
                         f"{list(arg.strides)} (elements) for shape {list(arg.shape)}")


def require_inner_contiguous(arg, where):
    if arg.ndim and arg.shape[-1] > 1 and arg.strides[-1] != 1:
        raise ValueError(f"{where}: {arg.name} must have unit stride in its last dimension, "
                         f"got stride {arg.strides[-1]}")


def require_nonnegative_strides(arg, where):
    for i, (size, s) in enumerate(zip(arg.shape, arg.strides)):
        if s < 0 and size > 1:
            raise ValueError(f"{where}: {arg.name} has a negative stride in dimension {i}")


def require_device(arg, device, where):
    if arg.device != device:
        raise ValueError(f"{where}: {arg.name} is on {arg.device} but the cache is on {device}")


def dtype_code(arg):
    """mlakv_dtype of a floating argument."""
    return {"float32": _lib.DT_F32, "bfloat16": _lib.DT_BF16, "bf16_bits": _lib.DT_BF16,
            "float16": _lib.DT_F16}[arg.dtype]


def np_empty(shape, dtype_name):
    """numpy output of a given Arg dtype name."""
    if dtype_name == "bfloat16":
        return np.empty(shape, dtype=NP_BF16)
    if dtype_name == "bf16_bits":
        return np.empty(shape, dtype=np.uint16)
    return np.empty(shape, dtype=np.dtype(dtype_name))


def index_list_to_numpy(x, name, where, dtype):
    """A list/tuple/range of integers as a contiguous numpy array of `dtype`. Anything that is
    not an integer (floats, even integral ones like 2.0; bools; strings) is a TypeError and a
    value outside the range of `dtype` a ValueError: a cast would silently truncate or wrap
    (0.5 and 1.7 would become slots 0 and 1)."""
    dtype = np.dtype(dtype)
    try:  # the nesting only: every element stays the Python / numpy object it was
        raw = np.array(x, dtype=object)
    except (ValueError, TypeError) as e:  # ragged nesting and the like
        raise TypeError(f"{where}: {name} must be a list of ints ({e})") from None
    info = np.iinfo(dtype)
    for v in raw.reshape(-1):
        if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
            kind = np.asarray(v).dtype.name if isinstance(v, (float, np.generic)) else \
                type(v).__name__
            raise TypeError(f"{where}: {name} must hold integers, got {kind} values (a "
                            f"non-integer slot or index is never rounded)")
        if not info.min <= int(v) <= info.max:
            raise ValueError(f"{where}: {name} holds a value outside the {dtype.name} range")
    return np.ascontiguousarray(raw.astype(dtype))


def as_numpy_index_array(x, name, where, dtype):
    """Convert a list/tuple/range of ints to a numpy array of `dtype` (index_list_to_numpy);
    arrays are left alone (their dtype is checked by the caller)."""
    if isinstance(x, np.ndarray) or is_torch(x):
        return x
    if isinstance(x, (list, tuple, range)):
        return index_list_to_numpy(x, name, where, dtype)
    raise TypeError(f"{where}: {name} must be a numpy array, a torch tensor or a list of ints, "
                    f"got {type(x).__name__}")
