"""Format table, model presets, capacity planner, scalar codecs and record encode/decode."""

import ctypes
import enum
from dataclasses import dataclass

import numpy as np

from . import _lib
from ._lib import LATENT_DIM, ROPE_DIM


class Format(enum.IntEnum):
    """mlakv_format."""
    FP8_DS_MLA = 0
    NVFP4_DS_MLA = 1
    NVFP4_FP8_ROPE = 2
    NVFP4_FP8_ROPE_TOKEN_SCALE = 3


class Model(enum.IntEnum):
    """mlakv_model."""
    DEEPSEEK_V32 = 0
    GLM_5_2 = 1
    GLM_5 = 2


class Status(enum.IntEnum):
    """mlakv_status."""
    OK = 0
    ERR_NULL_POINTER = 1
    ERR_INVALID_ARGUMENT = 2
    ERR_UNKNOWN_FORMAT = 3
    ERR_GEOMETRY = 4
    ERR_STRIDE = 5
    ERR_OVERFLOW = 6
    ERR_ALIGNMENT = 7
    ERR_DTYPE = 8
    ERR_SLOT_OUT_OF_RANGE = 9
    ERR_BUFFER_TOO_SMALL = 10
    ERR_OUT_OF_MEMORY = 11
    ERR_IO = 12
    ERR_NO_CUDA = 13
    ERR_UNSUPPORTED_DEVICE = 14
    ERR_CUDA = 15


FP8_SCALE_RECIPES = {"vllm": 0, "pow2": 1}


@dataclass(frozen=True)
class FormatInfo:
    """mlakv_format_info; a field a format lacks has offset None and size 0."""
    format: Format
    name: str
    record_bytes: int
    latent_offset: int
    latent_bytes: int
    latent_scale_offset: int
    latent_scale_count: int
    latent_scale_bytes: int
    latent_group_size: int
    token_scale_offset: object
    rope_scale_offset: object
    rope_offset: int
    rope_bytes: int
    bits_per_latent_value: float


@dataclass(frozen=True)
class ModelInfo:
    """mlakv_model_info."""
    model: Model
    name: str
    mla_layers: int
    mtp_layers: int
    indexer_layers: int
    mtp_indexer_layers: int
    indexer_bytes_per_token: int


@dataclass(frozen=True)
class Capacity:
    """mlakv_capacity: what fits in a per-GPU memory budget."""
    bytes_per_token: int
    blocks: int
    tokens_per_gpu: int
    tokens: int


def version():
    """Version string of the loaded library."""
    return _lib.fn("mlakv_version")().decode()


def to_format(fmt, where="mlakv"):
    """Format from a Format, an int or a name ("nvfp4_ds_mla")."""
    if isinstance(fmt, Format):
        return fmt
    if isinstance(fmt, str):
        code = ctypes.c_int(-1)
        _lib.call("mlakv_format_from_name", fmt.encode(), ctypes.byref(code))
        return Format(code.value)
    if isinstance(fmt, (int, np.integer)) and not isinstance(fmt, bool):
        if _lib.fn("mlakv_format_get")(int(fmt)):
            return Format(int(fmt))
        raise _lib.MlakvError(_lib.ERR_UNKNOWN_FORMAT,
                              "MLAKV_ERR_UNKNOWN_FORMAT",
                              f"{where}: format {int(fmt)} is not a known mlakv_format")
    raise TypeError(f"{where}: format must be a mlakv.Format, an int or a name, got "
                    f"{type(fmt).__name__}")


def format_info(fmt):
    """FormatInfo of a format (Format, int or name)."""
    f = to_format(fmt, "mlakv.format_info")
    p = _lib.fn("mlakv_format_get")(int(f))
    c = p.contents

    def opt(v):
        return None if v == _lib.NO_FIELD else int(v)

    return FormatInfo(
        format=f, name=c.name.decode(), record_bytes=c.record_bytes,
        latent_offset=c.latent_offset, latent_bytes=c.latent_bytes,
        latent_scale_offset=c.latent_scale_offset, latent_scale_count=c.latent_scale_count,
        latent_scale_bytes=c.latent_scale_bytes, latent_group_size=c.latent_group_size,
        token_scale_offset=opt(c.token_scale_offset), rope_scale_offset=opt(c.rope_scale_offset),
        rope_offset=c.rope_offset, rope_bytes=c.rope_bytes,
        bits_per_latent_value=c.bits_per_latent_value)


def formats():
    """FormatInfo of every format, in enum order."""
    return [format_info(f) for f in Format]


def record_bytes(fmt):
    return int(_lib.fn("mlakv_record_bytes")(int(to_format(fmt, "mlakv.record_bytes"))))


def to_model(model, where="mlakv"):
    if isinstance(model, Model):
        return model
    if isinstance(model, str):
        code = ctypes.c_int(-1)
        _lib.call("mlakv_model_from_name", model.encode(), ctypes.byref(code))
        return Model(code.value)
    if isinstance(model, (int, np.integer)) and not isinstance(model, bool):
        if _lib.fn("mlakv_model_get")(int(model)):
            return Model(int(model))
        raise _lib.MlakvError(_lib.ERR_INVALID_ARGUMENT,
                              "MLAKV_ERR_INVALID_ARGUMENT",
                              f"{where}: model {int(model)} is not a known mlakv_model")
    raise TypeError(f"{where}: model must be a mlakv.Model, an int or a name, got "
                    f"{type(model).__name__}")


def model_info(model):
    m = to_model(model, "mlakv.model_info")
    c = _lib.fn("mlakv_model_get")(int(m)).contents
    return ModelInfo(model=m, name=c.name.decode(), mla_layers=c.mla_layers,
                     mtp_layers=c.mtp_layers, indexer_layers=c.indexer_layers,
                     mtp_indexer_layers=c.mtp_indexer_layers,
                     indexer_bytes_per_token=c.indexer_bytes_per_token)


def models():
    return [model_info(m) for m in Model]


def plan_capacity(model, fmt, budget_bytes, block_size=64, dcp=1, include_mtp=False):
    """KV capacity of `budget_bytes` per GPU (mlakv_plan_capacity)."""
    where = "mlakv.plan_capacity"
    m = to_model(model, where)
    f = to_format(fmt, where)
    budget = int(budget_bytes)
    if budget < 0 or budget >= 1 << 64:
        raise ValueError(f"{where}: budget_bytes must be in [0, 2^64), got {budget}")
    res = _lib.CapacityC()
    _lib.call("mlakv_plan_capacity", int(m), int(f), budget, int(block_size), int(dcp),
              1 if include_mtp else 0, ctypes.byref(res))
    return Capacity(res.bytes_per_token, res.blocks, res.tokens_per_gpu, res.tokens)


def cache_bytes(fmt, num_blocks, block_size, block_stride_bytes=0):
    """Bytes a cache of this geometry spans (mlakv_cache_bytes)."""
    out = ctypes.c_size_t(0)
    _lib.call("mlakv_cache_bytes", int(to_format(fmt, "mlakv.cache_bytes")), int(num_blocks),
              int(block_size), int(block_stride_bytes), ctypes.byref(out))
    return int(out.value)


def write_options(fp8_scale_recipe=None, where="mlakv"):
    """WriteOptionsC from a recipe name ("vllm", "pow2") or code; None = library default."""
    opts = _lib.fn("mlakv_write_options_default")()
    if fp8_scale_recipe is not None:
        if isinstance(fp8_scale_recipe, str):
            if fp8_scale_recipe not in FP8_SCALE_RECIPES:
                raise ValueError(f"{where}: fp8_scale_recipe must be one of "
                                 f"{sorted(FP8_SCALE_RECIPES)}, got {fp8_scale_recipe!r}")
            opts.fp8_scale_recipe = FP8_SCALE_RECIPES[fp8_scale_recipe]
        else:
            opts.fp8_scale_recipe = int(fp8_scale_recipe)
    return opts


def _f32_vector(x, n, name, where):
    a = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if a.shape != (n,):
        raise ValueError(f"{where}: {name} must have shape [{n}], got {list(a.shape)}")
    return a


def encode_record(fmt, latent, rope, fp8_scale_recipe=None):
    """One token -> its record bytes (numpy uint8 [record_bytes])."""
    where = "mlakv.encode_record"
    f = to_format(fmt, where)
    lat = _f32_vector(latent, LATENT_DIM, "latent", where)
    rp = _f32_vector(rope, ROPE_DIM, "rope", where)
    out = np.zeros(record_bytes(f), dtype=np.uint8)
    opts = write_options(fp8_scale_recipe, where)
    _lib.call("mlakv_encode_record", int(f), lat.ctypes.data, rp.ctypes.data, out.ctypes.data,
              ctypes.byref(opts))
    return out


def decode_record(fmt, record):
    """Record bytes -> (latent fp32 [512], rope fp32 [64])."""
    where = "mlakv.decode_record"
    f = to_format(fmt, where)
    rec = np.ascontiguousarray(np.frombuffer(bytes(record), dtype=np.uint8)
                               if isinstance(record, (bytes, bytearray)) else record)
    if rec.dtype != np.uint8 or rec.shape != (record_bytes(f),):
        raise ValueError(f"{where}: record must be uint8 [{record_bytes(f)}], got "
                         f"{rec.dtype} {list(rec.shape)}")
    lat = np.empty(LATENT_DIM, dtype=np.float32)
    rp = np.empty(ROPE_DIM, dtype=np.float32)
    _lib.call("mlakv_decode_record", int(f), rec.ctypes.data, lat.ctypes.data, rp.ctypes.data)
    return lat, rp


# Scalar codecs (the oracle of every fast path), one value at a time.
def e4m3_encode(x):
    return int(_lib.fn("mlakv_e4m3_encode")(float(x)))


def e4m3_decode(byte):
    return float(_lib.fn("mlakv_e4m3_decode")(int(byte) & 0xFF))


def e2m1_encode(x):
    return int(_lib.fn("mlakv_e2m1_encode")(float(x)))


def e2m1_decode(nibble):
    return float(_lib.fn("mlakv_e2m1_decode")(int(nibble) & 0xFF))


def bf16_to_f32(bits):
    return float(_lib.fn("mlakv_bf16_to_f32")(int(bits) & 0xFFFF))


def f32_to_bf16(x):
    return int(_lib.fn("mlakv_f32_to_bf16")(float(x)))


def f16_to_f32(bits):
    return float(_lib.fn("mlakv_f16_to_f32")(int(bits) & 0xFFFF))


def f32_to_f16(x):
    return int(_lib.fn("mlakv_f32_to_f16")(float(x)))


def cuda_compiled():
    """True if the library was built with CUDA kernels."""
    return bool(_lib.fn("mlakv_cuda_compiled")())


def cuda_check_device():
    """Raise MlakvError unless the current CUDA device can run this build's kernels."""
    _lib.call("mlakv_cuda_check_device")
