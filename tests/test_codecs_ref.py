#!/usr/bin/env python3
"""libmlakv scalar codecs against an independent implementation (ml_dtypes / numpy).

E4M3 (float8_e4m3fn) and E2M1 (float4_e2m1fn) encoders, with mlakv's saturation applied before
ml_dtypes' conversion (ml_dtypes itself does not saturate) and mlakv's documented NaN results
(E4M3: 0x7F, E2M1: +0). Inputs: every E4M3 and E2M1 value and every rounding boundary (midpoint
between neighbours) with their fp32 nextafter neighbours, specials (+-0, +-Inf, NaNs,
subnormals, FLT_MAX) and >= 10 million random fp32 values. Also the E4M3/E2M1 decode tables and
bf16/fp16 <-> fp32 against ml_dtypes / numpy (every 16-bit pattern decoded; encoders over the
same inputs plus random bf16/fp16 ties and their neighbours).

usage: test_codecs_ref.py CODEC_BATCH_PROGRAM   (exit 0 pass, 1 fail, 77 skipped)
The random inputs come from a seed printed at start (MLAKV_SEED replays it).
"""
import os
import subprocess
import sys
import time

try:
    import numpy as np
    import ml_dtypes as md
except ImportError as e:  # CI installs them; a bare machine skips
    print(f"test_codecs_ref: skipped ({e}); pip install numpy ml_dtypes")
    sys.exit(1 if os.environ.get("MLAKV_REQUIRE_PYTHON") == "1" else 77)

F32 = np.float32
np.seterr(all="ignore")
failures = 0
checks = 0


def run(helper, op, arr, out_dtype):
    p = subprocess.run([helper, op], input=np.ascontiguousarray(arr).tobytes(),
                       stdout=subprocess.PIPE, check=True)
    out = np.frombuffer(p.stdout, dtype=out_dtype)
    if out.size != arr.size:
        raise SystemExit(f"codec_batch {op}: {out.size} outputs for {arr.size} inputs")
    return out


def report(name, x, got, want, bad, fmt_in=lambda v: f"{v!r}"):
    """Count one check over an array; print the first mismatches."""
    global failures, checks
    checks += 1
    n = int(np.count_nonzero(bad))
    if n:
        failures += 1
        idx = np.flatnonzero(bad)[:10]
        print(f"FAIL {name}: {n} of {bad.size} differ; first:")
        for i in idx:
            xi = x[i]
            bits = f" (bits {int(np.asarray(xi).view(np.uint32)):08x})" if x.dtype == F32 else ""
            print(f"  in {fmt_in(xi)}{bits}: got {got[i]!r} want {want[i]!r}")
    else:
        print(f"ok   {name}: {bad.size} values")


def ref_e4m3(x):
    r = np.clip(x, F32(-448), F32(448)).astype(md.float8_e4m3fn).view(np.uint8).copy()
    r[np.isnan(x)] = 0x7F
    return r


def ref_e2m1(x):
    r = np.clip(x, F32(-6), F32(6)).astype(md.float4_e2m1fn).view(np.uint8).copy() & 0xF
    r[np.isnan(x)] = 0x0
    return r


def values_and_boundaries(positive_values):
    """Each value and midpoint between neighbours, with fp32 neighbours, both signs."""
    v = np.unique(np.asarray(positive_values, dtype=np.float64))
    mids = (v[:-1] + v[1:]) / 2  # exact in fp32 for these small formats
    pts = np.concatenate([v, mids]).astype(F32)
    assert np.all(pts.astype(np.float64) == np.concatenate([v, mids]))
    up = np.nextafter(pts, F32(np.inf))
    down = np.nextafter(pts, F32(-np.inf))
    allp = np.concatenate([pts, up, down])
    return np.concatenate([allp, -allp])


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    helper = sys.argv[1]
    seed_env = os.environ.get("MLAKV_SEED", "")
    seed = int(seed_env, 0) if seed_env else int.from_bytes(os.urandom(8), "little")
    print(f"test_codecs_ref: seed {seed} (set MLAKV_SEED to replay)")
    rng = np.random.default_rng(seed)
    t0 = time.time()

    # ---- decode tables -----------------------------------------------------------------
    b8 = np.arange(256, dtype=np.uint8)
    got = run(helper, "e4m3_dec", b8, F32)
    want = b8.view(md.float8_e4m3fn).astype(F32)
    report("e4m3 decode (all 256 bytes)", b8, got, want,
           ~((got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))))
    got = run(helper, "e2m1_dec", b8, F32)
    want = (b8 & 0xF).view(md.float4_e2m1fn).astype(F32)
    report("e2m1 decode (all 256 bytes, high nibble ignored)", b8, got, want,
           got.view(np.uint32) != want.view(np.uint32))
    b16 = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    for op, ref in (("bf16_dec", md.bfloat16), ("f16_dec", np.float16)):
        got = run(helper, op, b16, F32)
        want = b16.view(ref).astype(F32)
        nan = np.isnan(want)
        bad = np.where(nan, ~np.isnan(got), got.view(np.uint32) != want.view(np.uint32))
        report(f"{op[:-4]} decode (all 65536 patterns)", b16, got, want, bad)

    # ---- encoder inputs ---------------------------------------------------------------
    e4m3_pos = b8[:0x7F].view(md.float8_e4m3fn).astype(np.float64)  # 0 .. 448
    e4m3_pos = np.append(e4m3_pos, 480.0)  # virtual next value: the 448/480 tie
    e2m1_pos = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, 8], dtype=np.float64)
    exact = [values_and_boundaries(e4m3_pos), values_and_boundaries(e2m1_pos)]
    # E4M3 boundaries scaled into the E2M1 range and the reverse catch mixed cases.
    specials = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, 1e-45, -1e-45,
                         1.1754944e-38, -1.1754944e-38, 3.4028235e38, -3.4028235e38,
                         2.0**-10, 2.0**-11, 2.0**-20, 448.0, 464.0, 464.00003, 480.0, 1e9],
                        dtype=F32)
    nan_payloads = np.array([0x7FC00000, 0xFFC00000, 0x7F800001, 0xFF800001, 0x7FFFFFFF,
                             0x7FA00000], dtype=np.uint32).view(F32)
    # bf16 / fp16 ties: random 16-bit values, the fp32 midpoint to the next one, neighbours.
    hb = rng.integers(0, 1 << 16, 200000, dtype=np.uint32)
    bf_mid = ((hb << 16) | 0x8000).astype(np.uint32).view(F32)
    hf = rng.integers(0, 0x7C00, 200000).astype(np.uint16)
    hf_lo = hf.view(np.float16).astype(np.float64)
    hf_hi = (hf + 1).astype(np.uint16).view(np.float16).astype(np.float64)
    hf_mid = ((hf_lo + hf_hi) / 2).astype(F32)  # exact: fp16 midpoints fit in fp32
    hf_mid *= np.where(rng.random(hf_mid.size) < 0.5, F32(-1), F32(1))
    ties = np.concatenate([bf_mid, hf_mid])
    ties = np.concatenate([ties, np.nextafter(ties, F32(np.inf)), np.nextafter(ties, F32(-np.inf))])

    n_bits, n_e4m3, n_e2m1, n_sub = 4_000_000, 4_000_000, 2_000_000, 500_000
    rand_bits = rng.integers(0, 1 << 32, n_bits, dtype=np.uint64).astype(np.uint32).view(F32)
    sign = lambda n: np.where(rng.random(n) < 0.5, -1.0, 1.0)
    rand_e4m3 = (sign(n_e4m3) * np.exp2(rng.uniform(-13, 10, n_e4m3))).astype(F32)
    rand_e2m1 = (sign(n_e2m1) * np.exp2(rng.uniform(-4, 3.5, n_e2m1))).astype(F32)
    rand_sub = (rng.integers(0, 1 << 23, n_sub, dtype=np.uint32)
                | (rng.integers(0, 2, n_sub, dtype=np.uint32) << 31)).view(F32)
    x = np.concatenate(exact + [specials, nan_payloads, ties, rand_bits, rand_e4m3, rand_e2m1,
                                rand_sub]).astype(F32)
    n_random = n_bits + n_e4m3 + n_e2m1 + n_sub
    print(f"encoder inputs: {x.size} ({n_random} random, "
          f"{int(np.isnan(x).sum())} NaN, {int(np.isinf(x).sum())} Inf, "
          f"{int(((x != 0) & (np.abs(x) < 1.1754944e-38)).sum())} fp32 subnormal)")
    assert n_random >= 10_000_000

    # ---- encoders -----------------------------------------------------------------------
    got = run(helper, "e4m3_enc", x, np.uint8)
    report("e4m3 encode (RNE, saturating, NaN -> 0x7F)", x, got, ref_e4m3(x), got != ref_e4m3(x))
    got = run(helper, "e2m1_enc", x, np.uint8)
    want = ref_e2m1(x)
    report("e2m1 encode (RNE, saturating at 6, NaN -> +0)", x, got, want, got != want)

    for op, ref in (("bf16_enc", md.bfloat16), ("f16_enc", np.float16)):
        got = run(helper, op, x, np.uint16)
        with np.errstate(over="ignore", invalid="ignore"):
            want = x.astype(ref).view(np.uint16)
        nan = np.isnan(x)
        got_nan = np.isnan(got.view(ref).astype(F32))
        # NaN stays NaN with its sign; everything else bit-exact (RNE, overflow to Inf).
        bad = np.where(nan, ~got_nan | ((got >> 15) != (x.view(np.uint32) >> 31)), got != want)
        report(f"{op[:-4]} encode (RNE)", x, got, want, bad)

    print(f"{checks - failures} passed, {failures} failed ({time.time() - t0:.1f} s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
