"""ctypes view of libmlakv: finding the shared object, the C structs and the prototypes.

Nothing in here knows about numpy or torch; the rest of the package builds on `lib()`,
`check()` and the Structure classes below. The layouts mirror include/mlakv.h field by field
(C enums are `int` on every ABI the library targets).
"""

import ctypes
import ctypes.util
import os
import threading
from ctypes import (POINTER, Structure, c_char_p, c_double, c_float, c_int, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint16, c_uint64, c_ulonglong, c_void_p)

LATENT_DIM = 512
ROPE_DIM = 64
QK_DIM = 576
V_DIM = 512
NO_FIELD = ctypes.c_size_t(-1).value

# mlakv_status codes raised from Python-side lookups (names come from mlakv_status_name).
ERR_INVALID_ARGUMENT, ERR_UNKNOWN_FORMAT = 2, 3

# mlakv_dtype
DT_F32, DT_BF16, DT_F16 = 0, 1, 2
DTYPE_NAMES = {DT_F32: "float32", DT_BF16: "bfloat16", DT_F16: "float16"}


class MlakvError(RuntimeError):
    """A C entry point returned a status other than MLAKV_OK.

    Attributes: `status` (int code), `status_name` ("MLAKV_ERR_STRIDE"), `message` (the text
    of mlakv_last_error() right after the failing call) and `function` (the C function).
    """

    def __init__(self, status, status_name, message, function=""):
        self.status = int(status)
        self.status_name = status_name
        self.message = message
        self.function = function
        text = f"{status_name}: {message}" if message else status_name
        super().__init__(text)


class FormatInfoC(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("record_bytes", c_size_t),
        ("latent_offset", c_size_t),
        ("latent_bytes", c_size_t),
        ("latent_scale_offset", c_size_t),
        ("latent_scale_count", c_size_t),
        ("latent_scale_bytes", c_size_t),
        ("latent_group_size", c_size_t),
        ("token_scale_offset", c_size_t),
        ("rope_scale_offset", c_size_t),
        ("rope_offset", c_size_t),
        ("rope_bytes", c_size_t),
        ("bits_per_latent_value", c_double),
    ]


class WriteOptionsC(Structure):
    _fields_ = [("fp8_scale_recipe", c_int), ("nvfp4_encoder", c_int)]


class CacheC(Structure):
    """struct mlakv_cache: the descriptor every cache entry point takes."""
    _fields_ = [
        ("base", c_void_p),
        ("format", c_int),
        ("num_blocks", c_int64),
        ("block_size", c_int64),
        ("block_stride_bytes", c_int64),
        ("latent_scale", c_float),
    ]


class DecodeArgsC(Structure):
    _fields_ = [
        ("batch", c_int64),
        ("s_q", c_int64),
        ("heads", c_int64),
        ("topk", c_int64),
        ("q", c_void_p),
        ("q_dtype", c_int),
        ("q_stride_batch", c_int64),
        ("q_stride_token", c_int64),
        ("q_stride_head", c_int64),
        ("indices", POINTER(c_int32)),
        ("indices_stride_batch", c_int64),
        ("indices_stride_token", c_int64),
        ("lengths", POINTER(c_int32)),
        ("sm_scale", c_float),
        ("sink", POINTER(c_float)),
        ("out", c_void_p),
        ("out_dtype", c_int),
        ("lse", POINTER(c_float)),
        ("mode", c_int),
        ("num_threads", c_int),
        ("invalid_index_count", c_void_p),
    ]


class ModelInfoC(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("mla_layers", c_int),
        ("mtp_layers", c_int),
        ("indexer_layers", c_int),
        ("mtp_indexer_layers", c_int),
        ("indexer_bytes_per_token", c_int),
    ]


class CapacityC(Structure):
    _fields_ = [
        ("bytes_per_token", c_int64),
        ("blocks", c_int64),
        ("tokens_per_gpu", c_int64),
        ("tokens", c_int64),
    ]


_st = c_int  # mlakv_status
_PROTOTYPES = {
    "mlakv_status_name": (c_char_p, [c_int]),
    "mlakv_last_error": (c_char_p, []),
    "mlakv_version": (c_char_p, []),
    "mlakv_format_get": (POINTER(FormatInfoC), [c_int]),
    "mlakv_record_bytes": (c_size_t, [c_int]),
    "mlakv_format_from_name": (_st, [c_char_p, POINTER(c_int)]),
    "mlakv_e4m3_encode": (c_uint8, [c_float]),
    "mlakv_e4m3_decode": (c_float, [c_uint8]),
    "mlakv_e2m1_encode": (c_uint8, [c_float]),
    "mlakv_e2m1_decode": (c_float, [c_uint8]),
    "mlakv_bf16_to_f32": (c_float, [c_uint16]),
    "mlakv_f32_to_bf16": (c_uint16, [c_float]),
    "mlakv_f16_to_f32": (c_float, [c_uint16]),
    "mlakv_f32_to_f16": (c_uint16, [c_float]),
    "mlakv_dtype_bytes": (c_size_t, [c_int]),
    "mlakv_write_options_default": (WriteOptionsC, []),
    "mlakv_encode_record": (_st, [c_int, c_void_p, c_void_p, c_void_p, POINTER(WriteOptionsC)]),
    "mlakv_decode_record": (_st, [c_int, c_void_p, c_void_p, c_void_p]),
    "mlakv_cache_init": (_st, [POINTER(CacheC), c_void_p, c_int, c_int64, c_int64, c_int64]),
    "mlakv_cache_bytes": (_st, [c_int, c_int64, c_int64, c_int64, POINTER(c_size_t)]),
    "mlakv_cache_validate": (_st, [POINTER(CacheC)]),
    "mlakv_cache_capacity": (c_int64, [POINTER(CacheC)]),
    "mlakv_cache_set_latent_scale": (_st, [POINTER(CacheC), c_float]),
    "mlakv_latent_max_abs": (_st, [c_int64, c_void_p, c_int64, c_int, POINTER(c_float)]),
    "mlakv_latent_scale": (_st, [c_float, POINTER(c_float)]),
    "mlakv_write": (_st, [POINTER(CacheC), c_int64, c_void_p, c_int64, c_void_p, c_int64, c_int,
                          c_void_p, POINTER(WriteOptionsC)]),
    "mlakv_read": (_st, [POINTER(CacheC), c_int64, c_void_p, c_void_p, c_void_p]),
    "mlakv_decode_args_default": (DecodeArgsC, [c_int64, c_int64, c_int64, c_int64]),
    "mlakv_sparse_decode": (_st, [POINTER(CacheC), POINTER(DecodeArgsC)]),
    "mlakv_sparse_decode_partial": (_st, [POINTER(CacheC), POINTER(DecodeArgsC), c_int64,
                                          c_int64, c_void_p, c_void_p]),
    "mlakv_merge_partials": (_st, [c_int64, c_int64, c_int64, c_void_p, c_void_p, c_void_p,
                                   c_void_p, c_void_p]),
    "mlakv_model_get": (POINTER(ModelInfoC), [c_int]),
    "mlakv_model_from_name": (_st, [c_char_p, POINTER(c_int)]),
    "mlakv_plan_capacity": (_st, [c_int, c_int, c_uint64, c_int64, c_int, c_int,
                                  POINTER(CapacityC)]),
    "mlakv_cuda_compiled": (c_int, []),
    "mlakv_cuda_check_device": (_st, []),
    "mlakv_cuda_write": (_st, [POINTER(CacheC), c_int64, c_void_p, c_int64, c_void_p, c_int64,
                               c_int, c_void_p, POINTER(WriteOptionsC), POINTER(c_ulonglong),
                               c_void_p]),
    "mlakv_cuda_decode_workspace_size": (_st, [POINTER(CacheC), POINTER(DecodeArgsC),
                                               POINTER(c_size_t)]),
    "mlakv_cuda_sparse_decode": (_st, [POINTER(CacheC), POINTER(DecodeArgsC), c_void_p, c_size_t,
                                       c_void_p]),
    "mlakv_dcp_local_indices": (_st, [POINTER(CacheC), c_int, c_int, c_int64, c_int64, c_int64,
                                      c_void_p, c_int64, c_int64, c_void_p, c_int64, c_void_p,
                                      c_void_p]),
    "mlakv_cuda_dcp_local_indices": (_st, [POINTER(CacheC), c_int, c_int, c_int64, c_int64,
                                           c_int64, c_void_p, c_int64, c_int64, c_void_p, c_int64,
                                           c_void_p, c_void_p, c_void_p, c_void_p]),
    "mlakv_cuda_merge_partials": (_st, [c_int64, c_int64, c_int64, c_int64, c_void_p, c_int,
                                        c_void_p, c_void_p, c_void_p, c_int, c_void_p, c_void_p]),
    "mlakv_gather_bf16": (_st, [POINTER(CacheC), c_int64, c_void_p, c_void_p, c_int64]),
    "mlakv_gather_upconvert": (_st, [POINTER(CacheC), c_int64, c_void_p, c_int64, c_void_p,
                                     c_void_p, c_void_p, c_void_p, c_int64, c_int64]),
    "mlakv_cuda_gather_bf16": (_st, [POINTER(CacheC), c_int64, c_void_p, c_void_p, c_int64,
                                     c_void_p, c_void_p]),
    "mlakv_cuda_gather_upconvert": (_st, [POINTER(CacheC), c_int64, c_void_p, c_int64, c_void_p,
                                          c_void_p, c_void_p, c_void_p, c_int64, c_int64,
                                          c_void_p, c_void_p]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def repo_root():
    """The source tree this package sits in (python/mlakv/ -> repository root)."""
    return os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def bundled_library():
    """The library installed inside the package by `pip install .` (absent in a source tree)."""
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "libmlakv.so")


def library_candidates():
    """Where the shared object is looked for, in order: $MLAKV_LIBRARY, the one inside the
    installed package (`pip install .`), the repository's build/ directory (the README's
    `make`), then the system loader's search path."""
    env = os.environ.get("MLAKV_LIBRARY")
    if env:
        return [env]
    out = []
    if os.path.exists(bundled_library()):
        out.append(bundled_library())
    out.append(os.path.join(repo_root(), "build", "libmlakv.so"))
    found = ctypes.util.find_library("mlakv")
    out.append(found if found else "libmlakv.so")
    return out


def _load():
    errors = []
    cands = library_candidates()
    for path in cands:
        if os.sep in path and not os.path.exists(path):
            errors.append(f"{path}: no such file")
            continue
        try:
            handle = ctypes.CDLL(path)
        except OSError as exc:
            errors.append(f"{path}: {exc}")
            continue
        for name, (restype, argtypes) in _PROTOTYPES.items():
            fn = getattr(handle, name, None)
            if fn is None:  # an older library: the wrapper reports it when called
                continue
            fn.restype = restype
            fn.argtypes = argtypes
        return handle, path
    hint = ("install the package with `pip install .`, or build it with `make` at the "
            "repository root, or point MLAKV_LIBRARY at libmlakv.so")
    raise OSError("mlakv: cannot load libmlakv (" + "; ".join(errors) + "); " + hint)


def lib():
    """The loaded library (loaded on first use)."""
    global _lib, _lib_path
    if _lib is None:
        with _lock:
            if _lib is None:
                _lib, _lib_path = _load()
    return _lib


def library_path():
    """Path of the shared object in use."""
    lib()
    return _lib_path


def has(name):
    """Whether the loaded library exports `name` (functions newer than the library may not)."""
    return getattr(lib(), name, None) is not None


def fn(name):
    """The C function `name`, with its prototype set."""
    f = getattr(lib(), name, None)
    if f is None:
        raise OSError(f"mlakv: {library_path()} has no symbol {name} (library older than the "
                      "Python package?)")
    return f


def status_name(status):
    raw = fn("mlakv_status_name")(int(status))
    return raw.decode() if raw else "unknown status"


def last_error():
    raw = fn("mlakv_last_error")()
    return raw.decode(errors="replace") if raw else ""


def check(status, function=""):
    """Raise MlakvError for a non-zero mlakv_status (reads mlakv_last_error at once, on the
    same thread as the failing call)."""
    if status != 0:
        raise MlakvError(status, status_name(status), last_error(), function)
    return status


def call(name, *args):
    """Call a status-returning C function and raise MlakvError on failure."""
    return check(fn(name)(*args), name)
