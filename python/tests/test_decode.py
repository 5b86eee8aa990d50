"""sparse_decode on the CPU against a float64 numpy reference (mlakv_ref.sparse_attention) over
the cache's de-quantized values: both numeric modes, masking, lengths, sinks, layouts,
split-KV partials."""

import numpy as np
import pytest

import mlakv
import mlakv_ref as R

FORMATS = [f.name for f in mlakv.formats()]

try:
    import ml_dtypes
    BF16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover
    BF16 = None


def _setup(rng, fmt, batch=None, s_q=None, heads=None, topk=None, nb=None, bs=None):
    nb = nb or int(rng.integers(1, 5))
    bs = bs or int(rng.choice([16, 64]))
    cache = mlakv.PagedCache(fmt, nb, bs)
    cap = cache.capacity
    kv = rng.standard_normal((cap, 512)).astype(np.float32)
    kp = rng.standard_normal((cap, 64)).astype(np.float32)
    mlakv.write(kv, kp, cache, np.arange(cap, dtype=np.int64))
    latent, rope = mlakv.read(cache, np.arange(cap, dtype=np.int64))
    batch = batch or int(rng.integers(1, 4))
    s_q = s_q or int(rng.integers(1, 3))
    heads = heads or int(rng.choice([1, 3, 16]))
    topk = topk or int(rng.integers(1, 2 * cap + 2))
    q = rng.standard_normal((batch, s_q, heads, 576)).astype(np.float32)
    idx = rng.integers(0, cap, size=(batch, s_q, topk)).astype(np.int32)  # duplicates happen
    idx[rng.random(idx.shape) < 0.25] = -1
    return cache, latent, rope, q, idx


def _close(got, ref, rtol, atol_frac, what):
    got = np.asarray(got, dtype=np.float64)
    scale = np.max(np.abs(ref)) if ref.size else 1.0
    err = np.abs(got - ref)
    ok = err <= rtol * np.abs(ref) + atol_frac * scale
    assert ok.all(), f"{what}: max err {err.max():.3g} (scale {scale:.3g}), " \
        f"{(~ok).sum()} of {ok.size} outside tolerance"


@pytest.mark.parametrize("fmt", FORMATS)
def test_exact_mode_matches_float64_reference(rng, fmt):
    cache, latent, rope, q, idx = _setup(rng, fmt)
    batch, _, heads, topk = q.shape[0], q.shape[1], q.shape[2], idx.shape[2]
    lengths = rng.integers(0, topk + 1, size=batch).astype(np.int32) \
        if rng.random() < 0.5 else None
    sink = rng.standard_normal(heads).astype(np.float32) if rng.random() < 0.5 else None
    sm_scale = float(rng.choice([0.13523, 0.0625, 1 / 24]))
    out, lse = mlakv.sparse_decode(q, cache, idx, lengths=lengths, sink=sink, sm_scale=sm_scale,
                                   mode="exact")
    assert out.dtype == np.float32 and out.shape == q.shape[:3] + (512,)
    assert lse.dtype == np.float32 and lse.shape == q.shape[:3]
    ref, ref_lse = R.sparse_attention(q, latent, rope, idx, lengths=lengths, sink=sink,
                                      sm_scale=np.float32(sm_scale))
    _close(out, ref, 1e-5, 1e-6, "out")
    finite = np.isfinite(ref_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    _close(lse[finite], ref_lse[finite], 1e-5, 1e-6, "lse")
    assert np.all(out[~finite] == 0) and np.all(lse[~finite] == -np.inf)


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("qtype", ["bf16_bits", "ml_dtypes", "float32"])
def test_engine_mode_bf16_close_to_reference(rng, fmt, qtype):
    if qtype == "ml_dtypes" and BF16 is None:
        pytest.skip("ml_dtypes not installed")
    cache, latent, rope, q, idx = _setup(rng, fmt, heads=16)
    qbits = R.f32_to_bf16_bits(q)
    qexact = R.bf16_bits_to_f32(qbits)
    qin = {"bf16_bits": qbits, "ml_dtypes": qbits.view(BF16) if BF16 else None,
           "float32": qexact}[qtype]
    out, lse = mlakv.sparse_decode(qin, cache, idx)  # default mode: engine, out dtype of q
    # engine numerics use K and V rounded to bf16 (a no-op for nvfp4 latents and bf16 RoPE); the
    # two-level record's latent stays unrounded: engine mode keeps its token scale out of K and V
    # (e2m1 * e4m3, exact in bf16) and applies it to S and P in fp32 (src/cpu/attention.c)
    kb = R.bf16_bits_to_f32(R.f32_to_bf16_bits(np.concatenate([latent, rope], axis=1)))
    if fmt == "nvfp4_fp8_rope_token_scale":
        kb[:, :512] = latent
    ref, ref_lse = R.sparse_attention(qexact, kb[:, :512], kb[:, 512:], idx)
    if qtype == "bf16_bits":
        assert out.dtype == np.uint16
        outf = R.bf16_bits_to_f32(out)
    elif qtype == "ml_dtypes":
        assert out.dtype == BF16
        outf = out.astype(np.float32)
    else:
        assert out.dtype == np.float32
        outf = out
    # bf16 P and bf16 output: ~2^-8 relative
    _close(outf, ref, 1e-2, 1e-2, "out")
    finite = np.isfinite(ref_lse)
    _close(lse[finite], ref_lse[finite], 1e-3, 1e-3, "lse")


def test_empty_rows_and_sinks(rng):
    cache, latent, rope, q, idx = _setup(rng, "nvfp4_ds_mla", batch=3, s_q=1, heads=4, topk=8)
    idx[0] = -1
    lengths = np.array([8, 0, 5], dtype=np.int32)
    out, lse = mlakv.sparse_decode(q, cache, idx, lengths=lengths, mode="exact")
    assert np.all(out[:2] == 0) and np.all(lse[:2] == -np.inf)
    sink = np.array([0.5, -1.0, 2.0, 0.0], dtype=np.float32)
    out, lse = mlakv.sparse_decode(q, cache, idx, lengths=lengths, sink=sink, mode="exact")
    assert np.all(out[:2] == 0)
    np.testing.assert_allclose(lse[:2, 0], np.broadcast_to(sink, (2, 4)), rtol=1e-6)
    ref, ref_lse = R.sparse_attention(q, latent, rope, idx, lengths=lengths, sink=sink)
    _close(out, ref, 1e-5, 1e-6, "out")


def test_layouts_3d_strided_and_given_outputs(rng):
    cache, latent, rope, q, idx = _setup(rng, "nvfp4_fp8_rope", s_q=1, heads=8)
    batch, heads, topk = q.shape[0], q.shape[2], idx.shape[2]
    base, base_lse = mlakv.sparse_decode(q, cache, idx, mode="exact")
    # [batch, heads, 576] q with [batch, topk] indices
    o3, l3 = mlakv.sparse_decode(q[:, 0], cache, idx[:, 0], mode="exact")
    assert o3.shape == (batch, heads, 512) and l3.shape == (batch, heads)
    np.testing.assert_array_equal(o3, base[:, 0])
    np.testing.assert_array_equal(l3, base_lse[:, 0])
    # q as a slice of a wider buffer (head stride 640), heads taken every other one,
    # indices as a column slice of a wider buffer
    wide = np.full((batch, 1, 2 * heads, 640), np.nan, dtype=np.float32)
    wide[:, :, ::2, :576] = q
    iwide = np.full((batch, 1, topk + 5), 10**6, dtype=np.int32)
    iwide[:, :, 2:2 + topk] = idx
    out = np.full((batch, 1, heads, 512), np.nan, dtype=np.float32)
    lse = np.full((batch, 1, heads), np.nan, dtype=np.float32)
    o, lo = mlakv.sparse_decode(wide[:, :, ::2, :576], cache, iwide[:, :, 2:2 + topk],
                                out=out, lse=lse, mode="exact")
    assert o is out and lo is lse
    np.testing.assert_array_equal(out, base)
    np.testing.assert_array_equal(lse, base_lse)
    # results do not depend on the thread count
    o1, _ = mlakv.sparse_decode(q, cache, idx, mode="engine", num_threads=1)
    o4, _ = mlakv.sparse_decode(q, cache, idx, mode="engine", num_threads=4)
    np.testing.assert_array_equal(o1, o4)


def test_partials_merge_to_full_decode(rng):
    cache, latent, rope, q, idx = _setup(rng, "fp8_ds_mla", topk=48, heads=4)
    full, full_lse = mlakv.sparse_decode(q, cache, idx, mode="exact")
    cuts = sorted(set([0, 48] + list(rng.integers(1, 48, size=3))))
    parts = [mlakv.sparse_decode_partial(q, cache, idx, a, b, mode="exact")
             for a, b in zip(cuts[:-1], cuts[1:])]
    outs = np.stack([p[0] for p in parts])
    lses = np.stack([p[1] for p in parts])
    out, lse = mlakv.merge_partials(outs, lses)
    _close(out, full.astype(np.float64), 1e-5, 1e-6, "merged out")
    fin = np.isfinite(full_lse)
    np.testing.assert_array_equal(np.isfinite(lse), fin)
    _close(lse[fin], full_lse[fin].astype(np.float64), 1e-5, 1e-6, "merged lse")


def test_out_of_range_index_fails_before_writing(rng):
    cache, latent, rope, q, idx = _setup(rng, "nvfp4_ds_mla", batch=2, topk=6)
    idx[1, 0, 3] = cache.capacity
    out = np.full(q.shape[:3] + (512,), np.nan, dtype=np.float32)
    lse = np.full(q.shape[:3], np.nan, dtype=np.float32)
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.sparse_decode(q, cache, idx, out=out, lse=lse)
    assert e.value.status_name == "MLAKV_ERR_SLOT_OUT_OF_RANGE"
    assert str(cache.capacity) in e.value.message
    assert np.isnan(out).all() and np.isnan(lse).all()
    # masked by lengths: never read, no error
    lengths = np.array([6, 3], dtype=np.int32)
    mlakv.sparse_decode(q, cache, idx, lengths=lengths, out=out, lse=lse)
    assert not np.isnan(out).any()
