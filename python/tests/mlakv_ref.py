"""Independent numpy references written from docs/FORMATS.md, for the tests: scalar tables,
a record decoder for all four formats, the nvfp4_ds_mla writer recipe, and float64 sparse
attention. Nothing here calls libmlakv."""

import numpy as np


def _e4m3_table():
    """fp64 value of every E4M3 (e4m3fn) byte; 0x7F / 0xFF are NaN."""
    out = np.empty(256, dtype=np.float64)
    for b in range(256):
        sign = -1.0 if b & 0x80 else 1.0
        e = (b >> 3) & 0xF
        m = b & 0x7
        if e == 0xF and m == 0x7:
            out[b] = np.nan
        elif e == 0:
            out[b] = sign * m / 8.0 * 2.0 ** -6
        else:
            out[b] = sign * (1.0 + m / 8.0) * 2.0 ** (e - 7)
    return out


E4M3 = _e4m3_table()
E2M1 = np.array([0, 0.5, 1, 1.5, 2, 3, 4, 6, -0.0, -0.5, -1, -1.5, -2, -3, -4, -6],
                dtype=np.float64)


def _rne_magnitude_codes(mag, table):
    """Round non-negative float64 magnitudes to the nearest entry of an ascending table of
    non-negative values indexed by code, ties to the even code, saturating at the top."""
    mag = np.minimum(mag, table[-1])
    hi = np.searchsorted(table, mag, side="left")          # table[hi] >= mag
    hi = np.minimum(hi, len(table) - 1)
    lo = np.maximum(hi - 1, 0)
    dlo = mag - table[lo]
    dhi = table[hi] - mag
    pick_hi = (dhi < dlo) | ((dhi == dlo) & (hi % 2 == 0))
    code = np.where(pick_hi, hi, lo)
    return np.where(table[hi] == mag, hi, code)


def e4m3_encode(x):
    """float32 array -> E4M3 bytes: RNE incl. subnormals, saturating at 448, NaN -> 0x7F."""
    x = np.asarray(x, dtype=np.float64)
    pos = E4M3[:127]  # codes 0..126 ascending, 126 = 448
    code = _rne_magnitude_codes(np.abs(np.nan_to_num(x, nan=0.0, posinf=448, neginf=-448)), pos)
    code = code | np.where(np.signbit(x), 0x80, 0)
    return np.where(np.isnan(x), 0x7F, code).astype(np.uint8)


def e2m1_encode(x):
    """float32 array -> E2M1 nibbles: RNE, saturating at 6, sign bit kept."""
    x = np.asarray(x, dtype=np.float64)
    code = _rne_magnitude_codes(np.abs(np.nan_to_num(x, nan=0.0)), E2M1[:8])
    return (code | np.where(np.signbit(x) & ~np.isnan(x), 0x8, 0)).astype(np.uint8)


def bf16_bits_to_f32(bits):
    return (np.asarray(bits, dtype=np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """RNE float32 -> bf16 bits (NaN kept NaN)."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    r = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((u >> 16) | 0x40).astype(np.uint16), r)


def _f32(rec, off):
    return rec[:, off:off + 4].copy().view(np.float32)[:, 0]


def decode_records(fmt_name, rec):
    """uint8 [n, record_bytes] -> (latent fp32 [n, 512], rope fp32 [n, 64])."""
    rec = np.ascontiguousarray(rec)
    n = rec.shape[0]
    f32 = np.float32
    if fmt_name == "fp8_ds_mla":
        vals = E4M3[rec[:, :512]].astype(f32)
        scales = rec[:, 512:528].copy().view(f32)  # [n, 4]
        latent = (vals.reshape(n, 4, 128) * scales[:, :, None]).reshape(n, 512)
        rope = bf16_bits_to_f32(rec[:, 528:656].copy().view(np.uint16))
        return latent.astype(f32), rope
    payload = rec[:, :256]
    nib = np.empty((n, 512), dtype=np.uint8)
    nib[:, 0::2] = payload & 0xF
    nib[:, 1::2] = payload >> 4
    d = E4M3[rec[:, 256:288]].astype(f32)  # [n, 32]
    latent = (E2M1[nib].astype(f32).reshape(n, 32, 16) * d[:, :, None]).reshape(n, 512)
    if fmt_name == "nvfp4_ds_mla":
        rope = bf16_bits_to_f32(rec[:, 304:432].copy().view(np.uint16))
        return latent, rope
    rope_scale = _f32(rec, 288)
    rope = E4M3[rec[:, 304:368]].astype(f32) * rope_scale[:, None]
    if fmt_name == "nvfp4_fp8_rope_token_scale":
        latent = latent * _f32(rec, 292)[:, None]
    return latent.astype(f32), rope.astype(f32)


INV6 = np.uint32(0x3E2AAAAB).view(np.float32)


def encode_nvfp4_ds_mla(latent, rope_bf16_bits):
    """The static 432-B recipe of FORMATS.md: latent fp32 [n, 512] (exact values of the
    inputs), rope as bf16 bits [n, 64] -> uint8 [n, 432]."""
    latent = np.asarray(latent, dtype=np.float32)
    n = latent.shape[0]
    g = latent.reshape(n, 32, 16)
    amax = np.max(np.where(np.isnan(g), 0, np.abs(g)), axis=2).astype(np.float32)
    s = (amax * INV6).astype(np.float32)
    sbyte = e4m3_encode(s)
    d = E4M3[sbyte].astype(np.float32)
    with np.errstate(divide="ignore"):
        inv = np.where(d > 0, np.float32(1) / np.where(d > 0, d, 1), 0).astype(np.float32)
    q = (g * inv[:, :, None]).astype(np.float32)
    nib = e2m1_encode(q).reshape(n, 512)
    nib = np.where(np.repeat(d == 0, 16, axis=1), 0, nib).astype(np.uint8)
    rec = np.zeros((n, 432), dtype=np.uint8)
    rec[:, :256] = nib[:, 0::2] | (nib[:, 1::2] << 4)
    rec[:, 256:288] = sbyte
    rec[:, 304:432] = np.ascontiguousarray(rope_bf16_bits, dtype=np.uint16).view(np.uint8)
    return rec


def sparse_attention(q, latent, rope, indices, slot_of_row=None, lengths=None, sink=None,
                     sm_scale=1.0 / np.sqrt(576.0)):
    """float64 sparse MLA decode. q [B, S, H, 576]; latent/rope: de-quantized rows indexed by
    flat slot ([capacity, 512] / [capacity, 64]); indices int [B, S, topk]. Returns
    (out [B, S, H, 512], lse [B, S, H]); an empty row gives out 0, lse -inf."""
    q = np.asarray(q, dtype=np.float64)
    B, S, H, _ = q.shape
    K = np.concatenate([latent, rope], axis=1).astype(np.float64)
    V = latent.astype(np.float64)
    out = np.zeros((B, S, H, 512))
    lse = np.full((B, S, H), -np.inf)
    for b in range(B):
        for t in range(S):
            idx = np.asarray(indices[b, t], dtype=np.int64)
            valid = idx >= 0
            if lengths is not None:
                valid &= np.arange(idx.shape[0]) < lengths[b]
            sel = idx[valid]
            scores = sm_scale * (q[b, t] @ K[sel].T)  # [H, m]
            cols = [scores]
            if sink is not None:
                cols.append(np.asarray(sink, dtype=np.float64)[:, None])
            allsc = np.concatenate(cols, axis=1)
            if allsc.shape[1] == 0:
                continue
            m = np.max(allsc, axis=1, keepdims=True)
            denom = np.sum(np.exp(allsc - m), axis=1, keepdims=True)
            lse[b, t] = (m + np.log(denom))[:, 0]
            p = np.exp(scores - m) / denom
            out[b, t] = p @ V[sel]
    return out, lse
