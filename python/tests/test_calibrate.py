"""Latent scale s_l from Python: calibration, the calibration file (round trip, strict
rejection with nothing written), writer / reader / decode with latent_scale=, and the
accurate encoder option."""

import json
import math
import os
import subprocess

import numpy as np
import pytest

import mlakv
from mlakv.calibrate import calibrate, load_scales, save_scales


def _layer(rng, n, mag):
    x = rng.standard_normal((n, 512)) * np.exp(0.5 * rng.standard_normal(512))
    return (x * (mag / np.abs(x).max())).astype(np.float32)


def test_calibrate_values(rng):
    x = _layer(rng, 64, 0.03)
    m, s = calibrate(x)
    assert m == float(np.abs(x).max())
    assert s == float(np.float32(m) / np.float32(2688.0))
    m16, _ = calibrate(x.astype(np.float16))
    assert m16 == float(np.abs(x.astype(np.float16)).max())
    m576, _ = calibrate(np.concatenate([x, np.full((64, 64), 99.0, np.float32)], axis=1))
    assert m576 == m  # k_pe columns are not part of the latent
    assert calibrate(np.zeros((3, 512), np.float32)) == (0.0, 1.0)
    x[1, 2] = np.nan
    with pytest.raises(mlakv.MlakvError):
        calibrate(x)
    with pytest.raises(ValueError):
        calibrate(np.zeros((3, 100), np.float32))


def test_file_round_trip(rng, tmp_path):
    mags = [float(np.float32(v)) for v in rng.uniform(0.01, 5, size=78)]
    path = tmp_path / "s.json"
    save_scales(str(path), mags)
    doc = json.loads(path.read_text())
    assert doc["format"] == "nvfp4_ds_mla_outer_scale_v1" and doc["num_layers"] == 78
    assert doc["latent_dim"] == 512 and doc["denominator"] == 2688.0
    scales = load_scales(str(path))
    assert scales == [calibrate(np.full((1, 512), m, np.float32))[1] for m in mags]
    assert not os.path.exists(str(path) + ".tmp")
    cli = os.environ.get("MLAKV_CLI")
    if cli:  # the C reader accepts the Python writer's file
        r = subprocess.run([cli, "calibrate", "--check", str(path)], capture_output=True, text=True)
        assert r.returncode == 0 and "78 layers" in r.stdout, r.stderr


@pytest.mark.parametrize("bad", [[-1.0], [math.nan], [math.inf], [], ["x"]])
def test_save_rejects(tmp_path, bad):
    path = tmp_path / "s.json"
    with pytest.raises(ValueError):
        save_scales(str(path), bad)
    assert not path.exists() and not os.path.exists(str(path) + ".tmp")


@pytest.mark.parametrize("edit", [
    lambda d: d.update(format="nvfp4_ds_mla_outer_scale_v2"),
    lambda d: d.update(num_layers=3),
    lambda d: d.update(latent_dim=576),
    lambda d: d.update(denominator=448.0),
    lambda d: d["scales"].__setitem__(0, 0.0),
    lambda d: d["scales"].__setitem__(0, -2.0),
    lambda d: d["scales"].pop(),
    lambda d: d.update(extra=1),
    lambda d: d.pop("max_abs"),
])
def test_load_rejects(tmp_path, edit):
    path = tmp_path / "s.json"
    save_scales(str(path), [0.1, 0.2])
    d = json.loads(path.read_text())
    edit(d)
    path.write_text(json.dumps(d))
    with pytest.raises(ValueError):
        load_scales(str(path))


def test_load_rejects_malformed(tmp_path):
    path = tmp_path / "s.json"
    save_scales(str(path), [0.1, 0.2])
    for text in [path.read_text()[:-3], path.read_text().replace("0.1", "NaN", 1), "[]"]:
        path.write_text(text)
        with pytest.raises(ValueError):
            load_scales(str(path))


@pytest.mark.parametrize("fmt", ["nvfp4_ds_mla", "nvfp4_fp8_rope"])
def test_scaled_write_read_decode(rng, fmt):
    n = 200
    x = _layer(rng, n, 0.03)
    kp = rng.standard_normal((n, 64)).astype(np.float32)
    _, s_l = calibrate(x)
    slots = np.arange(n, dtype=np.int64)
    plain, scaled = mlakv.PagedCache(fmt, 4, 64), mlakv.PagedCache(fmt, 4, 64)
    mlakv.write(x, kp, plain, slots)
    mlakv.write(x, kp, scaled, slots, latent_scale=s_l)
    lp, _ = mlakv.read(plain, slots)
    ls, _ = mlakv.read(scaled, slots, latent_scale=s_l)
    e_plain = np.sum((lp - x) ** 2) / np.sum(x ** 2)
    e_scaled = np.sum((ls - x) ** 2) / np.sum(x ** 2)
    assert e_scaled < 0.3 * e_plain
    # decode: against float64 attention over the scaled de-quantized values
    q = (rng.standard_normal((1, 2, 4, 576)) * 20).astype(np.float32)
    idx = rng.integers(0, n, size=(1, 2, 64)).astype(np.int32)
    out, lse = mlakv.sparse_decode(q, scaled, idx, out_dtype="float32", mode="exact",
                                   latent_scale=s_l)
    _, rp = mlakv.read(scaled, slots)
    for t in range(2):
        k = np.concatenate([ls[idx[0, t]], rp[idx[0, t]]], axis=1).astype(np.float64)
        sc = q[0, t].astype(np.float64) @ k.T / math.sqrt(576)
        p = np.exp(sc - sc.max(axis=1, keepdims=True))
        ref = (p @ ls[idx[0, t]].astype(np.float64)) / p.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(out[0, t], ref, rtol=1e-5, atol=1e-6)
    o1, l1 = mlakv.sparse_decode_partial(q, scaled, idx, 0, 30, mode="exact", latent_scale=s_l)
    o2, l2 = mlakv.sparse_decode_partial(q, scaled, idx, 30, 64, mode="exact", latent_scale=s_l)
    om, _ = mlakv.merge_partials(np.stack([o1, o2]), np.stack([l1, l2]))
    np.testing.assert_allclose(om, out, rtol=1e-5, atol=1e-7)
    with pytest.raises(mlakv.MlakvError):
        mlakv.write(x, kp, scaled, slots, latent_scale=0.0)


def test_scale_rejected_for_other_formats(rng):
    c = mlakv.PagedCache("fp8_ds_mla", 1, 4)
    x = np.zeros((1, 512), np.float32)
    with pytest.raises(mlakv.MlakvError, match="latent_scale"):
        mlakv.write(x, np.zeros((1, 64), np.float32), c, np.zeros(1, np.int64), latent_scale=2.0)


def test_accurate_encoder(rng):
    n = 128
    x = _layer(rng, n, 0.05)
    kp = rng.standard_normal((n, 64)).astype(np.float32)
    slots = np.arange(n, dtype=np.int64)
    a, b = mlakv.PagedCache("nvfp4_ds_mla", 2, 64), mlakv.PagedCache("nvfp4_ds_mla", 2, 64)
    mlakv.write(x, kp, a, slots)
    mlakv.write(x, kp, b, slots, nvfp4_encoder="accurate")
    la, _ = mlakv.read(a, slots)
    lb, _ = mlakv.read(b, slots)
    assert np.sum((lb - x) ** 2) < 0.8 * np.sum((la - x) ** 2)
    with pytest.raises(ValueError):
        mlakv.write(x, kp, b, slots, nvfp4_encoder="best")
