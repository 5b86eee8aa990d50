"""Format table, model presets, capacity planner: values, errors, and equality with the C CLI."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest

import mlakv

# Record layouts from docs/FORMATS.md (the byte contract), not from the library.
LAYOUT = {
    "fp8_ds_mla": dict(record_bytes=656, latent_bytes=512, latent_scale_offset=512,
                       latent_scale_count=4, rope_offset=528, rope_bytes=128),
    "nvfp4_ds_mla": dict(record_bytes=432, latent_bytes=256, latent_scale_offset=256,
                         latent_scale_count=32, rope_offset=304, rope_bytes=128),
    "nvfp4_fp8_rope": dict(record_bytes=368, latent_bytes=256, latent_scale_offset=256,
                           latent_scale_count=32, rope_offset=304, rope_bytes=64,
                           rope_scale_offset=288),
    "nvfp4_fp8_rope_token_scale": dict(record_bytes=368, latent_bytes=256,
                                       latent_scale_offset=256, latent_scale_count=32,
                                       rope_offset=304, rope_bytes=64, rope_scale_offset=288,
                                       token_scale_offset=292),
}


def test_format_table_matches_the_byte_contract():
    infos = mlakv.formats()
    assert [i.name for i in infos] == list(LAYOUT)
    for info in infos:
        for key, value in LAYOUT[info.name].items():
            assert getattr(info, key) == value, (info.name, key)
        if "token_scale_offset" not in LAYOUT[info.name]:
            assert info.token_scale_offset is None
        if "rope_scale_offset" not in LAYOUT[info.name]:
            assert info.rope_scale_offset is None
        payload_bits = info.latent_bytes * 8 + info.latent_scale_count * \
            info.latent_scale_bytes * 8 + (32 if info.token_scale_offset is not None else 0)
        assert info.bits_per_latent_value == pytest.approx(payload_bits / 512)
        assert mlakv.record_bytes(info.name) == info.record_bytes
        assert mlakv.format_info(int(info.format)) == info
        assert mlakv.format_info(info.format) == info


def test_unknown_format_raises_with_c_message():
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.format_info("nvfp5")
    assert e.value.status_name == "MLAKV_ERR_UNKNOWN_FORMAT"
    assert e.value.status == mlakv.Status.ERR_UNKNOWN_FORMAT
    assert "nvfp5" in e.value.message
    assert "MLAKV_ERR_UNKNOWN_FORMAT" in str(e.value)
    with pytest.raises(mlakv.MlakvError):
        mlakv.format_info(17)
    with pytest.raises(TypeError, match="format"):
        mlakv.format_info(1.5)


def test_status_names_match_library():
    for s in mlakv.Status:
        assert mlakv.status_name(s) == "MLAKV_" + s.name


def _expected_capacity(model, fmt, budget, block_size, dcp, mtp):
    m = mlakv.model_info(model)
    layers = m.mla_layers + (m.mtp_layers if mtp else 0)
    idx = m.indexer_layers + (m.mtp_indexer_layers if mtp else 0)
    bpt = layers * mlakv.record_bytes(fmt) + idx * m.indexer_bytes_per_token
    blocks = budget // (bpt * block_size)
    return bpt, blocks, blocks * block_size, blocks * block_size * dcp


def test_plan_capacity_against_python_arithmetic(rng):
    for _ in range(50):
        model = mlakv.Model(int(rng.integers(0, 3)))
        fmt = mlakv.Format(int(rng.integers(0, 4)))
        budget = int(rng.integers(0, 200 << 30))
        bs = int(rng.choice([1, 16, 64, 128, int(rng.integers(1, 300))]))
        dcp = int(rng.integers(1, 9))
        mtp = bool(rng.integers(0, 2))
        cap = mlakv.plan_capacity(model, fmt, budget, bs, dcp, mtp)
        assert (cap.bytes_per_token, cap.blocks, cap.tokens_per_gpu, cap.tokens) == \
            _expected_capacity(model, fmt, budget, bs, dcp, mtp)


def test_plan_capacity_errors():
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.plan_capacity("glm-5.2", "nvfp4_ds_mla", 1 << 30, block_size=0)
    assert e.value.status_name in ("MLAKV_ERR_GEOMETRY", "MLAKV_ERR_INVALID_ARGUMENT")
    assert e.value.message
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.plan_capacity("llama", "nvfp4_ds_mla", 1 << 30)
    assert e.value.status_name == "MLAKV_ERR_INVALID_ARGUMENT"
    with pytest.raises(ValueError, match="budget_bytes"):
        mlakv.plan_capacity("glm-5", "nvfp4_ds_mla", -1)


def test_models():
    names = [m.name for m in mlakv.models()]
    assert names == ["deepseek-v3.2", "glm-5.2", "glm-5"]
    for m in mlakv.models():
        assert mlakv.model_info(m.name) == m


# ---- equality with the C CLI ---------------------------------------------------------------

def _cli():
    env = os.environ.get("MLAKV_CLI")
    if env:
        return env
    try:
        libdir = os.path.dirname(mlakv.library_path())
    except OSError:
        libdir = ""
    for cand in (os.path.join(libdir, "mlakv"),
                 os.path.join(mlakv._lib.repo_root(), "build", "mlakv"), shutil.which("mlakv")):
        if cand and os.path.isfile(cand) and os.access(cand, os.X_OK):
            return cand
    return None


def _run_cli(*args):
    cli = _cli()
    if cli is None:
        pytest.skip("mlakv CLI not found (build it, or set MLAKV_CLI)")
    res = subprocess.run([cli, *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    return res.stdout


def _num(text):
    return int(text.replace(",", ""))


def test_cli_formats_table_equals_binding():
    out = _run_cli("formats")
    rows = {}
    for line in out.splitlines():
        parts = line.split()
        if parts and parts[0] in LAYOUT:
            rows[parts[0]] = parts
    assert list(rows) == [f.name for f in mlakv.formats()]
    fp8 = mlakv.record_bytes("fp8_ds_mla")
    for info in mlakv.formats():
        parts = rows[info.name]
        assert int(parts[1]) == info.record_bytes
        assert float(parts[2]) == pytest.approx(info.bits_per_latent_value, abs=5e-4)
        assert float(parts[-1].rstrip("x")) == pytest.approx(fp8 / info.record_bytes, abs=5e-4)


def _cli_capacity(model, budget, block_size, dcp, mtp, fmt=None):
    size = budget if isinstance(budget, str) else f"{budget}B"  # the CLI wants a unit
    args = ["capacity", "--model", model, "--budget", size, "--block-size", str(block_size),
            "--dcp", str(dcp)]
    if fmt:
        args += ["--format", fmt]
    if not mtp:
        args.append("--no-mtp")
    rows = {}
    for line in _run_cli(*args).splitlines():
        parts = line.split()
        if parts and parts[0] in LAYOUT:
            rows[parts[0]] = [_num(p) for p in parts[1:5]]
    return rows


def test_cli_capacity_equals_plan_capacity(rng):
    for _ in range(6):
        model = mlakv.models()[int(rng.integers(0, 3))].name
        budget = int(rng.integers(1 << 20, 160 << 30))
        bs = int(rng.choice([1, 32, 64, int(rng.integers(1, 257))]))
        dcp = int(rng.integers(1, 9))
        mtp = bool(rng.integers(0, 2))
        rows = _cli_capacity(model, budget, bs, dcp, mtp)
        assert list(rows) == [f.name for f in mlakv.formats()]
        for fmt, nums in rows.items():
            cap = mlakv.plan_capacity(model, fmt, budget, bs, dcp, mtp)
            assert nums == [cap.bytes_per_token, cap.blocks, cap.tokens_per_gpu, cap.tokens], \
                (model, fmt, budget, bs, dcp, mtp)
    # one format at a time, with a unit suffix the CLI parses
    rows = _cli_capacity("glm-5.2", "80GiB", 64, 1, True, fmt="nvfp4_fp8_rope_token_scale")
    cap = mlakv.plan_capacity("glm-5.2", "nvfp4_fp8_rope_token_scale", 80 << 30, 64, 1, True)
    assert rows == {"nvfp4_fp8_rope_token_scale":
                    [cap.bytes_per_token, cap.blocks, cap.tokens_per_gpu, cap.tokens]}


def test_cache_bytes(rng):
    for f in mlakv.formats():
        nb, bs = int(rng.integers(1, 100)), int(rng.integers(1, 100))
        assert mlakv.cache_bytes(f.name, nb, bs) == nb * bs * f.record_bytes
        stride = bs * f.record_bytes + int(rng.integers(0, 1000))
        assert mlakv.cache_bytes(f.name, nb, bs, stride) == nb * stride
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.cache_bytes("nvfp4_ds_mla", 4, 64, 100)
    assert e.value.status_name == "MLAKV_ERR_STRIDE"
    assert re.search(r"stride", e.value.message)


def test_scalar_codecs_match_reference_tables(rng):
    import mlakv_ref as R
    for b in range(256):
        v = mlakv.e4m3_decode(b)
        assert (np.isnan(v) and np.isnan(R.E4M3[b])) or v == R.E4M3[b]
    for nib in range(16):
        assert mlakv.e2m1_decode(nib) == R.E2M1[nib]
    xs = (rng.standard_normal(300) * np.exp(rng.uniform(-12, 7, 300))).astype(np.float32)
    assert [mlakv.e4m3_encode(x) for x in xs] == list(R.e4m3_encode(xs))
    ys = (rng.standard_normal(300) * 3).astype(np.float32)
    assert [mlakv.e2m1_encode(y) for y in ys] == list(R.e2m1_encode(ys))
    assert [mlakv.f32_to_bf16(x) for x in xs] == list(R.f32_to_bf16_bits(xs))
