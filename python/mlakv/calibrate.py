"""Per-layer latent scale s_l of the static NVFP4 records (nvfp4_ds_mla, nvfp4_fp8_rope).

    from mlakv.calibrate import calibrate, load_scales, save_scales
    max_abs, scale = calibrate(latents)      # one layer's sample latents [..., 512]
    save_scales("scales.json", [max_abs_layer0, max_abs_layer1, ...])
    scales = load_scales("scales.json")      # list of floats, one per layer
    mlakv.write(kv_c, k_pe, cache, slots, latent_scale=scales[layer])
    mlakv.sparse_decode(q, cache, idx, latent_scale=scales[layer])

scale = max |latent| / 2688 (6 * 448), computed by the library (mlakv_latent_max_abs,
mlakv_latent_scale): raised to FLT_MIN when smaller; an all-zero layer gets 1.0. The file is
{"format": "nvfp4_ds_mla_outer_scale_v1", "num_layers": L, "latent_dim": 512,
"denominator": 2688.0, "scales": [...], "max_abs": [...]}, what `mlakv calibrate` writes.
"""
import ctypes
import json
import math
import os

import numpy as np

from . import _lib

FORMAT_TAG = "nvfp4_ds_mla_outer_scale_v1"
DENOMINATOR = 2688.0
_KEYS = {"format", "num_layers", "latent_dim", "denominator", "scales", "max_abs"}


def _as_rows(latents, where):
    a = latents
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().float().cpu().numpy()
    a = np.asarray(a)
    if a.dtype not in (np.float32, np.float16):
        a = a.astype(np.float32)
    if a.ndim < 1 or a.shape[-1] not in (512, 576):
        raise ValueError(f"{where}: latents must have shape [..., 512] (or [..., 576], latent "
                         f"then k_pe), got {list(a.shape)}")
    return np.ascontiguousarray(a.reshape(-1, a.shape[-1]))


def calibrate(latents):
    """(max_abs, scale) of one layer's sample latents (numpy array or torch tensor, float32,
    float16 or anything numpy turns into float32, shape [..., 512] or [..., 576]). NaN or Inf
    samples raise MlakvError."""
    a = _as_rows(latents, "mlakv.calibrate")
    m = ctypes.c_float(0.0)
    dt = 0 if a.dtype == np.float32 else 2  # MLAKV_F32 / MLAKV_F16
    _lib.call("mlakv_latent_max_abs", a.shape[0], a.ctypes.data, a.shape[1], dt, ctypes.byref(m))
    s = ctypes.c_float(0.0)
    _lib.call("mlakv_latent_scale", m.value, ctypes.byref(s))
    return float(m.value), float(s.value)


def _check_list(values, name, positive, where):
    out = []
    for i, v in enumerate(values):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ValueError(f"{where}: {name}[{i}] is {v!r}, not a number")
        v = float(v)
        if not math.isfinite(v) or (v <= 0 if positive else v < 0):
            raise ValueError(f"{where}: {name}[{i}] = {v}: must be finite and "
                             f"{'> 0' if positive else '>= 0'}")
        out.append(v)
    return out


def save_scales(path, max_abs_list):
    """Write the calibration file of len(max_abs_list) layers (scales computed from max_abs as
    calibrate does). Validates everything first; writes a temporary file renamed into place,
    so a failure leaves no file."""
    where = "mlakv.save_scales"
    m = _check_list(list(max_abs_list), "max_abs", False, where)
    if not m:
        raise ValueError(f"{where}: no layers")
    scales = []
    for v in m:
        s = ctypes.c_float(0.0)
        _lib.call("mlakv_latent_scale", v, ctypes.byref(s))
        scales.append(float(s.value))
    # repr of the fp32 values as doubles reads back to the same fp32
    doc = {"format": FORMAT_TAG, "num_layers": len(m), "latent_dim": 512,
           "denominator": DENOMINATOR, "scales": scales,
           "max_abs": [float(np.float32(v)) for v in m]}
    tmp = f"{path}.tmp"
    try:
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load_scales(path):
    """The per-layer scales of a calibration file, as a list of floats. Raises ValueError for
    a malformed file, a wrong format tag, latent_dim or denominator, a count that does not
    match num_layers, unknown or missing keys, and scales that are not finite and > 0."""
    where = "mlakv.load_scales"

    def no_constants(name):
        raise ValueError(f"{where}: {path}: {name} is not valid JSON")

    try:
        with open(path) as f:
            doc = json.load(f, parse_constant=no_constants)
    except json.JSONDecodeError as e:
        raise ValueError(f"{where}: {path}: malformed JSON: {e}") from None
    if not isinstance(doc, dict):
        raise ValueError(f"{where}: {path}: not a JSON object")
    keys = set(doc)
    if keys != _KEYS:
        extra, missing = sorted(keys - _KEYS), sorted(_KEYS - keys)
        raise ValueError(f"{where}: {path}: unknown keys {extra}, missing keys {missing}")
    if doc["format"] != FORMAT_TAG:
        raise ValueError(f"{where}: {path}: format is {doc['format']!r}, want {FORMAT_TAG!r}")
    if doc["latent_dim"] != 512 or isinstance(doc["latent_dim"], bool):
        raise ValueError(f"{where}: {path}: latent_dim is {doc['latent_dim']!r}, want 512")
    if doc["denominator"] != DENOMINATOR or isinstance(doc["denominator"], bool):
        raise ValueError(f"{where}: {path}: denominator is {doc['denominator']!r}, want 2688")
    n = doc["num_layers"]
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"{where}: {path}: num_layers is {n!r}, want a positive integer")
    for name in ("scales", "max_abs"):
        if not isinstance(doc[name], list) or len(doc[name]) != n:
            got = len(doc[name]) if isinstance(doc[name], list) else type(doc[name]).__name__
            raise ValueError(f"{where}: {path}: num_layers is {n} but {name} has {got} entries")
    _check_list(doc["max_abs"], "max_abs", False, where)
    return _check_list(doc["scales"], "scales", True, where)
