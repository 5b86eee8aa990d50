"""PagedCache + write + read on the CPU: round trips against independent numpy decoding of the
record bytes, the nvfp4_ds_mla recipe re-implemented in numpy, padding, strides, dtypes."""

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


def _inputs(rng, n, scale=1.0):
    """Token inputs with a spread of magnitudes (per-token scales across 2^-8 .. 2^4)."""
    mag = np.exp2(rng.uniform(-8, 4, size=(n, 1))) * scale
    kv = (rng.standard_normal((n, 512)) * mag).astype(np.float32)
    kp = (rng.standard_normal((n, 64)) * mag).astype(np.float32)
    return kv, kp


def _poisoned_cache(rng, fmt, num_blocks, block_size, stride=0):
    cache = mlakv.PagedCache(fmt, num_blocks, block_size, block_stride_bytes=stride)
    cache.data[:] = rng.integers(0, 256, size=cache.data.shape, dtype=np.uint8)
    return cache


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_matches_numpy_decoder(rng, fmt):
    nb, bs = int(rng.integers(1, 6)), int(rng.choice([1, 7, 64]))
    cache = _poisoned_cache(rng, fmt, nb, bs)
    cap = cache.capacity
    n = int(rng.integers(1, cap + 1))
    slots = rng.permutation(cap)[:n].astype(np.int64)
    kv, kp = _inputs(rng, n)
    mlakv.write(kv, kp, cache, slots)
    rec = cache.records(slots)
    lat_ref, rope_ref = R.decode_records(fmt, rec)
    lat, rope = mlakv.read(cache, slots)
    np.testing.assert_array_equal(lat, lat_ref)
    np.testing.assert_array_equal(rope, rope_ref)
    # quantization error bounds per format
    if fmt == "fp8_ds_mla":
        amax_t = np.abs(kv.reshape(n, 4, 128)).max(axis=2, keepdims=True)
        bound = np.abs(kv.reshape(n, 4, 128)) / 16 + amax_t / 448 * 2.0 ** -9 * 1.01 + 1e-30
        assert np.all(np.abs(lat - kv).reshape(n, 4, 128) <= bound)
    else:
        amax_g = np.abs(kv.reshape(n, 32, 16)).max(axis=2, keepdims=True)
        err = np.abs(lat - kv).reshape(n, 32, 16)
        if fmt == "nvfp4_fp8_rope_token_scale":
            assert np.all(err <= amax_g / 6 * 1.07 + amax_g.max(axis=1, keepdims=True) * 2 ** -9)
        else:
            # scales >= 2^-6 are normal E4M3: error within one E2M1 half-step of the group
            normal = amax_g / 6 >= 2.0 ** -6
            assert np.all((err <= amax_g / 6 * 1.07)[np.broadcast_to(normal, err.shape)])
    if fmt in ("fp8_ds_mla", "nvfp4_ds_mla"):
        np.testing.assert_array_equal(rope, R.bf16_bits_to_f32(R.f32_to_bf16_bits(kp)))
    else:
        amax_r = np.abs(kp).max(axis=1, keepdims=True)
        assert np.all(np.abs(rope - kp) <= np.abs(kp) / 16 + amax_r / 448 * 2.0 ** -9 * 1.01)
    # untouched slots keep their poison bytes
    others = np.setdiff1d(np.arange(cap), slots)
    if others.size:
        before = cache.records(others).copy()
        mlakv.write(kv[:0], kp[:0], cache, slots[:0])
        np.testing.assert_array_equal(cache.records(others), before)


def test_nvfp4_ds_mla_bytes_equal_numpy_recipe(rng):
    n = 97
    cache = _poisoned_cache(rng, "nvfp4_ds_mla", 2, 64)
    kv, kp = _inputs(rng, n)
    kv[0, :16] = 0.0                              # zero group -> scale 0, payload 0
    kv[1, :16] *= 1e-6                            # subnormal / zero scales
    kv[2, 16:32] = rng.choice([-1, 1], 16) * 6.0  # exact grid values
    bits = R.f32_to_bf16_bits(kv)
    exact = R.bf16_bits_to_f32(bits)              # the bf16 inputs' exact values
    slots = rng.permutation(128)[:n].astype(np.int64)
    mlakv.write(bits, R.f32_to_bf16_bits(kp), cache, slots)
    expect = R.encode_nvfp4_ds_mla(exact, R.f32_to_bf16_bits(kp))
    got = cache.records(slots)
    # negative values that round to zero may be stored as 0x8 or 0x0: compare as values
    np.testing.assert_array_equal(got[:, 256:], expect[:, 256:])
    def vals(rec):
        nib = np.stack([rec[:, :256] & 0xF, rec[:, :256] >> 4], axis=2).reshape(n, 512)
        return R.E2M1[nib]
    np.testing.assert_array_equal(vals(got), vals(expect))


@pytest.mark.parametrize("fmt", FORMATS)
def test_input_dtypes_agree(rng, fmt):
    """bf16 as ml_dtypes arrays, as uint16 bits and as exact fp32 give identical bytes; fp16
    likewise against its exact fp32 values."""
    n = 33
    kv, kp = _inputs(rng, n)
    slots = np.arange(n, dtype=np.int64)
    kvb, kpb = R.f32_to_bf16_bits(kv), R.f32_to_bf16_bits(kp)
    variants = [(kvb, kpb), (R.bf16_bits_to_f32(kvb), R.bf16_bits_to_f32(kpb))]
    if BF16 is not None:
        variants.append((kvb.view(BF16), kpb.view(BF16)))
    outs = []
    for a, b in variants:
        c = mlakv.PagedCache(fmt, 1, 64)
        mlakv.write(a, b, c, slots)
        outs.append(c.records(slots))
    for o in outs[1:]:
        np.testing.assert_array_equal(o, outs[0])
    h, hp = kv.astype(np.float16), kp.astype(np.float16)
    c1, c2 = mlakv.PagedCache(fmt, 1, 64), mlakv.PagedCache(fmt, 1, 64)
    mlakv.write(h, hp, c1, slots)
    mlakv.write(h.astype(np.float32), hp.astype(np.float32), c2, slots)
    np.testing.assert_array_equal(c1.records(slots), c2.records(slots))


@pytest.mark.parametrize("fmt", FORMATS)
def test_strided_rows_and_padded_blocks(rng, fmt):
    """kv_c / k_pe as column slices of one [n, 576+pad] buffer, k_pe as [n, 1, 64], padded
    block stride, negative slots skipped: same records as a dense write."""
    n, bs, nb = 50, 16, 5
    rec = mlakv.record_bytes(fmt)
    stride = bs * rec + 16 * int(rng.integers(1, 9))
    wide = rng.standard_normal((n, 600)).astype(np.float32)
    kv, kp = wide[:, :512], wide[:, 512:576]
    slots = rng.permutation(nb * bs)[:n].astype(np.int64)
    slots[rng.random(n) < 0.2] = -1  # padded tokens
    pad = _poisoned_cache(rng, fmt, nb, bs, stride)
    dense = mlakv.PagedCache(fmt, nb, bs)
    mlakv.write(kv, kp.reshape(n, 1, 64), pad, slots)
    mlakv.write(np.ascontiguousarray(kv), np.ascontiguousarray(kp), dense, slots)
    live = slots[slots >= 0]
    np.testing.assert_array_equal(pad.records(live), dense.records(live))
    # the gap bytes between blocks and the skipped slots' records are untouched
    before = _poisoned_cache(np.random.default_rng(0), fmt, nb, bs, stride)
    after = _poisoned_cache(np.random.default_rng(0), fmt, nb, bs, stride)
    mlakv.write(kv, kp, after, slots)
    written = np.zeros(after.nbytes, dtype=bool)
    for off in after.slot_offsets(live):
        written[off:off + rec] = True
    np.testing.assert_array_equal(after.data[~written], before.data[~written])


def test_out_of_range_slot_writes_nothing(rng):
    cache = _poisoned_cache(rng, "nvfp4_fp8_rope", 2, 8)
    before = cache.data.copy()
    kv, kp = _inputs(rng, 4)
    for bad in (16, 1 << 62):
        slots = np.array([0, 3, bad, 5], dtype=np.int64)
        with pytest.raises(mlakv.MlakvError) as e:
            mlakv.write(kv, kp, cache, slots)
        assert e.value.status_name == "MLAKV_ERR_SLOT_OUT_OF_RANGE"
        assert "slot" in e.value.message
        np.testing.assert_array_equal(cache.data, before)
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.read(cache, np.array([1, 16], dtype=np.int64))
    assert e.value.status_name == "MLAKV_ERR_SLOT_OUT_OF_RANGE"


def test_wrap_engine_buffer(rng):
    """A [num_blocks, block_size, record] buffer carved out of a bigger allocation (cross-layer
    layout: block stride > block bytes) is used in place."""
    fmt, nb, bs = "nvfp4_ds_mla", 6, 8
    rec = mlakv.record_bytes(fmt)
    big = np.zeros((nb, 3, bs, rec), dtype=np.uint8)  # 3 layers interleaved per block
    layer1 = big[:, 1]
    cache = mlakv.PagedCache.wrap(layer1, fmt, bs)
    assert cache.block_stride_bytes == 3 * bs * rec and cache.num_blocks == nb
    n = 20
    kv, kp = _inputs(rng, n)
    slots = rng.permutation(nb * bs)[:n].astype(np.int64)
    mlakv.write(kv, kp, cache, slots)
    assert not big[:, 0].any() and not big[:, 2].any()
    ref = mlakv.PagedCache(fmt, nb, bs)
    mlakv.write(kv, kp, ref, slots)
    blocks, offs = slots // bs, slots % bs
    np.testing.assert_array_equal(layer1[blocks, offs], ref.records(slots))
    lat, _ = mlakv.read(cache, slots)
    lat2, _ = mlakv.read(ref, slots)
    np.testing.assert_array_equal(lat, lat2)
    copy = cache.to("cpu")
    np.testing.assert_array_equal(copy.records(slots), ref.records(slots))
    with pytest.raises(ValueError, match="buffer"):
        mlakv.PagedCache.wrap(big[:, 1, :, :100], fmt, bs)


def test_encode_decode_record_match_writer(rng):
    kv, kp = _inputs(rng, 3)
    for fmt in FORMATS:
        cache = mlakv.PagedCache(fmt, 1, 4)
        mlakv.write(kv, kp, cache, np.arange(3))
        for i in range(3):
            rec = mlakv.encode_record(fmt, kv[i], kp[i])
            np.testing.assert_array_equal(rec, cache.records([i])[0])
            lat, rope = mlakv.decode_record(fmt, rec)
            lr, rr = R.decode_records(fmt, rec[None])
            np.testing.assert_array_equal(lat, lr[0])
            np.testing.assert_array_equal(rope, rr[0])


def test_fp8_pow2_recipe_scales_are_powers_of_two(rng):
    kv, kp = _inputs(rng, 10)
    cache = mlakv.PagedCache("fp8_ds_mla", 1, 16)
    mlakv.write(kv, kp, cache, np.arange(10), fp8_scale_recipe="pow2")
    scales = cache.records(np.arange(10))[:, 512:528].copy().view(np.float32)
    m, _ = np.frexp(scales)
    assert np.all(m == 0.5) and np.all(scales >= 2.0 ** -13)
    with pytest.raises(ValueError, match="fp8_scale_recipe"):
        mlakv.write(kv, kp, cache, np.arange(10), fp8_scale_recipe="fast")
