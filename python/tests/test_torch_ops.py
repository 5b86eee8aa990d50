"""torch.ops.mlakv on CPU tensors (skipped without torch): opcheck of every operator, the ops'
bytes and results against the direct API, padded and FlashMLA-shaped caches, errors,
write + decode under torch.compile(fullgraph=True), and the vLLM / FlashMLA compatibility
layers. The gather operators skip, naming the symbol, while the library does not export it."""

import numpy as np
import pytest

import mlakv
import mlakv_ref as R

torch = pytest.importorskip("torch")
T = pytest.importorskip("mlakv.torch_ops")
from mlakv.compat import flashmla as FM  # noqa: E402
from mlakv.compat import vllm as VL  # noqa: E402

ops = torch.ops.mlakv
FORMATS = [f.name for f in mlakv.formats()]


def _need(*symbols):
    missing = [s for s in symbols if s in T.missing_symbols()]
    if missing:
        pytest.skip(f"libmlakv does not export {', '.join(missing)} yet")


def _bf16(rng, *shape):
    return torch.from_numpy(rng.standard_normal(shape).astype(np.float32)).to(torch.bfloat16)


def _padded_cache(fmt, nb, bs, pad=40):
    """An engine cache [nb, bs, rec] whose blocks are `pad` bytes apart more than dense: random
    bytes in the padding, a record of random values in every slot; returns (view, backing)."""
    rec = mlakv.record_bytes(fmt)
    back = torch.randint(0, 256, (nb, bs * rec + pad), dtype=torch.uint8)
    view = back[:, :bs * rec].view(nb, bs, rec)
    assert view.stride(0) == bs * rec + pad
    x = torch.randn(nb * bs, 576).to(torch.bfloat16)
    ops.write(view, x[:, :512], x[:, 512:], torch.arange(nb * bs), fmt)
    return view, back


def _step_inputs(rng, fmt, nb=4, bs=16, n=24, b=2, s_q=2, h=4, topk=20):
    cache, _ = _padded_cache(fmt, nb, bs)
    kv = _bf16(rng, n + 3, 576)  # 3 padding rows past slot_mapping, as vLLM passes them
    slots = torch.from_numpy(rng.permutation(nb * bs)[:n].astype(np.int64))
    slots[3] = -1
    q = _bf16(rng, b, s_q, h, 576)
    idx = torch.from_numpy(rng.integers(-1, nb * bs, size=(b, s_q, topk)).astype(np.int32))
    return cache, kv, slots, q, idx


# --------------------------------------------------------------------------------------------
# opcheck (schema, fake kernel, autograd registration, AOT dispatch)
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_opcheck_write_and_decode(rng, fmt):
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    torch.library.opcheck(ops.write, (cache, kv[:, :512], kv[:, 512:], slots, fmt))
    lengths = torch.tensor([15, 20], dtype=torch.int32)
    sink = torch.randn(4)
    torch.library.opcheck(ops.sparse_decode, (q, cache, idx, fmt),
                          {"sm_scale": 0.05, "lengths": lengths, "sink": sink})
    torch.library.opcheck(ops.sparse_decode, (q.float(), cache, idx, fmt))


@pytest.mark.parametrize("fmt", FORMATS)
def test_opcheck_records(rng, fmt):
    x = _bf16(rng, 5, 576)
    torch.library.opcheck(ops.encode_records, (x[:, :512].float(), x[:, 512:].float(), fmt))
    rec = ops.encode_records(x[:, :512], x[:, 512:], fmt)
    torch.library.opcheck(ops.decode_records, (rec, fmt))


def test_opcheck_gather_bf16(rng):
    _need("mlakv_gather_bf16")
    cache, kv, slots, _, _ = _step_inputs(rng, "nvfp4_ds_mla")
    s = torch.tensor([0, -1, 5, 63], dtype=torch.int32)
    torch.library.opcheck(ops.gather_bf16, (cache, s, "nvfp4_ds_mla"))


def test_opcheck_gather_upconvert(rng):
    _need("mlakv_gather_upconvert")
    cache, _, _, _, _ = _step_inputs(rng, "fp8_ds_mla")
    bt = torch.tensor([[1, 0, 3], [2, 3, 0]], dtype=torch.int32)
    seq_lens = torch.tensor([20, 7], dtype=torch.int32)
    starts = torch.tensor([0, 20], dtype=torch.int32)
    dst = torch.zeros(30, 576, dtype=torch.bfloat16)
    torch.library.opcheck(ops.gather_upconvert, (cache, dst, bt, seq_lens, starts, None,
                                                 "fp8_ds_mla"))


def _dcp_layout(rng, world, batch, bs, length, fmt):
    """Per-rank engine caches [nb, bs, rec] holding the striped records of a whole-context cache
    (token p of row b on rank p % world at local position p // world), block tables, and the
    whole-context cache with slot b * length + p."""
    rec = mlakv.record_bytes(fmt)
    per_row = -(-(-(-length // world)) // bs)
    nb = batch * per_row
    x = _bf16(rng, batch * length, 576)
    whole = torch.zeros(batch * length, 1, rec, dtype=torch.uint8)
    ops.write(whole, x[:, :512], x[:, 512:], torch.arange(batch * length), fmt)
    caches, tables = [], []
    for w in range(world):
        perm = torch.from_numpy(rng.permutation(nb).astype(np.int32))
        bt = perm.reshape(batch, per_row)
        c = torch.zeros(nb, bs, rec, dtype=torch.uint8)
        flat = c.view(nb * bs, rec)
        for b in range(batch):
            for lp in range((length - w + world - 1) // world):
                p = lp * world + w
                flat[int(bt[b, lp // bs]) * bs + lp % bs] = whole[b * length + p, 0]
        caches.append(c)
        tables.append(bt.contiguous())
    return whole, caches, tables


def test_opcheck_dcp_ops(rng):
    fmt = "nvfp4_ds_mla"
    _, caches, tables = _dcp_layout(rng, 2, 2, 16, 100, fmt)
    pos = torch.from_numpy(rng.integers(-1, 100, size=(2, 1, 40)).astype(np.int32))
    torch.library.opcheck(ops.dcp_local_indices, (pos, tables[1], caches[1], fmt, 1, 2))
    parts = torch.randn(3, 2, 1, 4, 512)
    lse = torch.randn(3, 2, 1, 4)
    lse[1, 0, 0, 2] = float("-inf")
    torch.library.opcheck(ops.merge_partials, (parts, lse, torch.randn(4)))
    torch.library.opcheck(ops.merge_partials, (parts.to(torch.bfloat16), lse, None))


@pytest.mark.parametrize("world", [1, 2, 3])
def test_dcp_simulated_ranks_match_one_decode(rng, world):
    """Each rank maps the global positions to its slots, decodes its stripe without the sink;
    merge_partials with the sink gives the decode of the whole context."""
    fmt, batch, length, topk, heads = "nvfp4_ds_mla", 2, 300, 64, 4
    whole, caches, tables = _dcp_layout(rng, world, batch, 16, length, fmt)
    pos = torch.from_numpy(rng.integers(-1, length, size=(batch, 1, topk)).astype(np.int32))
    gidx = torch.where(pos < 0, pos, pos + torch.arange(batch, dtype=torch.int32).view(-1, 1, 1)
                       * length)
    q = torch.randn(batch, 1, heads, 576)
    sink = torch.randn(heads)
    want, want_lse = ops.sparse_decode(q, whole, gidx, fmt, None, None, sink)
    outs, lses = [], []
    for w in range(world):
        idx, lengths = ops.dcp_local_indices(pos, tables[w], caches[w], fmt, w, world)
        local = (pos >= 0) & (pos % world == w)
        assert torch.equal(lengths, local.sum(dim=2).amax(dim=1).to(torch.int32))
        o, l = ops.sparse_decode(q, caches[w], idx, fmt, None, lengths, None)
        outs.append(o)
        lses.append(l)
    out, lse = ops.merge_partials(torch.stack(outs), torch.stack(lses), sink)
    # engine mode rounds P to bf16 against each rank's own running max: rows agree to bf16 level
    diff = (out - want).reshape(-1, 512).norm(dim=1) / want.reshape(-1, 512).norm(dim=1)
    assert float(diff.max()) < 1e-2, float(diff.max())
    np.testing.assert_allclose(lse.numpy(), want_lse.numpy(), rtol=1e-5, atol=1e-4)


# --------------------------------------------------------------------------------------------
# results against the direct API and the reference
# --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_write_matches_direct_api_padded_cache(rng, fmt):
    cache, kv, slots, _, _ = _step_inputs(rng, fmt)
    nb, bs, rec = cache.shape
    before = cache.clone()
    ops.write(cache, kv[:, :512], kv[:, 512:].reshape(-1, 1, 64), slots, fmt)
    ref = mlakv.PagedCache(fmt, nb, bs)
    ref.host_bytes()[:] = np.concatenate([before[i].reshape(-1).numpy() for i in range(nb)])
    n = slots.shape[0]
    mlakv.write(kv[:n, :512], kv[:n, 512:], ref, slots)  # skips slot -1 too
    got = np.concatenate([cache[i].reshape(-1).numpy() for i in range(nb)])
    np.testing.assert_array_equal(got, ref.host_bytes())


@pytest.mark.parametrize("fmt", ["nvfp4_ds_mla", "nvfp4_fp8_rope"])
def test_latent_scale_and_encoder_match_direct_api(rng, fmt):
    """The ops' latent_scale (write, decode, gathers) and nvfp4_encoder give the direct API's
    bytes and results; a wrong scale changes the output."""
    s_l = 0.0123
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    nb, bs, rec = cache.shape
    before = cache.clone()
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt, 0, s_l, 1)
    ref = mlakv.PagedCache(fmt, nb, bs)
    ref.host_bytes()[:] = np.concatenate([before[i].reshape(-1).numpy() for i in range(nb)])
    n = slots.shape[0]
    mlakv.write(kv[:n, :512], kv[:n, 512:], ref, slots, latent_scale=s_l, nvfp4_encoder="accurate")
    got = np.concatenate([cache[i].reshape(-1).numpy() for i in range(nb)])
    np.testing.assert_array_equal(got, ref.host_bytes())
    out, lse = ops.sparse_decode(q, cache, idx, fmt, None, None, None, None, 0, s_l)
    pc = mlakv.PagedCache.wrap(cache, fmt, cache.shape[1])
    o2, l2 = mlakv.sparse_decode(q, pc, idx, latent_scale=s_l)
    assert torch.equal(out, o2) and torch.equal(lse, l2)
    o3, _ = ops.sparse_decode(q, cache, idx, fmt)
    assert not torch.equal(out, o3)
    cap = nb * bs
    rows = ops.gather_bf16(cache, torch.arange(cap, dtype=torch.int32), fmt, s_l)
    lat, rope = mlakv.read(pc, np.arange(cap, dtype=np.int64), latent_scale=s_l)
    want = torch.from_numpy(np.concatenate([lat, rope], axis=1)).to(torch.bfloat16)
    assert torch.equal(rows, want)


@pytest.mark.parametrize("fmt", FORMATS)
def test_decode_matches_direct_api_and_reference(rng, fmt):
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    lengths = torch.tensor([11, 20], dtype=torch.int32)
    sink = torch.randn(4)
    out, lse = ops.sparse_decode(q, cache, idx, fmt, 0.06, lengths, sink)
    assert out.dtype == torch.bfloat16 and out.shape == (2, 2, 4, 512)
    assert lse.dtype == torch.float32 and lse.shape == (2, 2, 4)
    pc = mlakv.PagedCache.wrap(cache, fmt, cache.shape[1])
    o2, l2 = mlakv.sparse_decode(q, pc, idx, lengths=lengths, sink=sink, sm_scale=0.06)
    assert torch.equal(out, o2) and torch.equal(lse, l2)
    # float64 reference over the de-quantized records
    cap = cache.shape[0] * cache.shape[1]
    lat, rope = mlakv.read(pc, np.arange(cap, dtype=np.int64))
    ro, rl = R.sparse_attention(q.float().numpy(), lat, rope, idx.numpy(), lengths=lengths.numpy(),
                                sink=sink.numpy(), sm_scale=0.06)
    np.testing.assert_allclose(out.float().numpy(), ro, rtol=0.03, atol=0.03)
    np.testing.assert_allclose(lse.numpy(), rl, rtol=1e-3, atol=1e-3)


def test_decode_reuses_args_with_new_pointers(rng):
    fmt = "nvfp4_ds_mla"
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    outs = [ops.sparse_decode(q * s, cache, idx, fmt) for s in (1.0, 2.0, 1.0)]
    assert torch.equal(outs[0][0], outs[2][0]) and not torch.equal(outs[0][1], outs[1][1])
    # the same shape on another cache tensor
    c2 = cache.clone()
    c2.zero_()
    o, lse = ops.sparse_decode(q, c2, idx, fmt)
    assert torch.all(o == 0)


@pytest.mark.parametrize("fmt", ["nvfp4_ds_mla", "fp8_ds_mla"])
def test_decode_out_matches_decode(rng, fmt):
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    lengths = torch.tensor([7, 20], dtype=torch.int32)
    sink = torch.randn(4)
    want, want_lse = ops.sparse_decode(q, cache, idx, fmt, 0.06, lengths, sink)
    out = torch.full_like(want, float("nan"))
    lse = torch.full_like(want_lse, float("nan"))
    torch.library.opcheck(ops.sparse_decode_out, (q, cache, idx, fmt, out, lse),
                          {"sm_scale": 0.06, "lengths": lengths, "sink": sink})
    ops.sparse_decode_out(q, cache, idx, fmt, out, lse, 0.06, lengths, sink)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    # wrong shape, dtype or layout: ValueError, nothing written
    before = out.clone()
    for bad_out, bad_lse in ((out[:1], lse), (out.float(), lse), (out, lse.double()),
                             (out.transpose(0, 1), lse), (out, lse[:, :1])):
        with pytest.raises(ValueError):
            ops.sparse_decode_out(q * 2, cache, idx, fmt, bad_out, bad_lse, 0.06, lengths, sink)
    assert torch.equal(out, before)


@pytest.mark.parametrize("fmt", FORMATS)
def test_records_round_trip(rng, fmt):
    x = _bf16(rng, 6, 576)
    rec = ops.encode_records(x[:, :512], x[:, 512:], fmt)
    assert rec.dtype == torch.uint8 and rec.shape == (6, mlakv.record_bytes(fmt))
    for i in range(6):
        want = mlakv.encode_record(fmt, x[i, :512].float().numpy(), x[i, 512:].float().numpy())
        np.testing.assert_array_equal(rec[i].numpy(), want)
    lat, rope = ops.decode_records(rec, fmt)
    l2, r2 = mlakv.decode_record(fmt, rec[2].numpy())
    np.testing.assert_array_equal(lat[2].numpy(), l2)
    np.testing.assert_array_equal(rope[2].numpy(), r2)


def test_gather_bf16_matches_read(rng):
    _need("mlakv_gather_bf16")
    for fmt in FORMATS:
        cache, kv, slots, _, _ = _step_inputs(rng, fmt)
        s = torch.tensor([0, -1, 5, 63, 17], dtype=torch.int32)
        out = ops.gather_bf16(cache, s, fmt)
        pc = mlakv.PagedCache.wrap(cache, fmt, cache.shape[1])
        lat, rope = mlakv.read(pc, np.array([0, 0, 5, 63, 17], dtype=np.int64))
        want = torch.from_numpy(np.concatenate([lat, rope], axis=1)).to(torch.bfloat16)
        want[1] = 0
        assert torch.equal(out, want), fmt


def test_gather_upconvert_vllm_layout(rng):
    _need("mlakv_gather_upconvert")
    fmt = "fp8_ds_mla"
    cache, kv, slots, _, _ = _step_inputs(rng, fmt)
    bs = cache.shape[1]
    bt = torch.tensor([[1, 0, 3, 2], [2, 3, 0, 1], [0, 0, 0, 0]], dtype=torch.int32)
    seq_lens = torch.tensor([20, 7, 5], dtype=torch.int32)
    starts = torch.tensor([0, 20, 27], dtype=torch.int32)
    dst = torch.full((30, 576), 7.0, dtype=torch.bfloat16)
    VL.cp_gather_and_upconvert_fp8_kv_cache(cache, dst, bt, seq_lens, starts, 2)
    pc = mlakv.PagedCache.wrap(cache, fmt, bs)
    for b, (n, s0) in enumerate(((20, 0), (7, 20))):
        flat = [int(bt[b, p // bs]) * bs + p % bs for p in range(n)]
        lat, rope = mlakv.read(pc, np.array(flat, dtype=np.int64))
        want = torch.from_numpy(np.concatenate([lat, rope], axis=1)).to(torch.bfloat16)
        assert torch.equal(dst[s0:s0 + n], want)
    assert torch.all(dst[27:] == 7.0)  # rows past the gathered ones untouched


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------

def test_errors_change_nothing(rng):
    fmt = "nvfp4_ds_mla"
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    before = cache.clone()
    bad = slots.clone()
    bad[5] = cache.shape[0] * cache.shape[1]
    with pytest.raises(mlakv.MlakvError, match="SLOT_OUT_OF_RANGE"):
        ops.write(cache, kv[:, :512], kv[:, 512:], bad, fmt)
    assert torch.equal(cache, before)
    with pytest.raises(ValueError, match=r"unknown record format 'fp4'.*fp8_ds_mla"):
        ops.write(cache, kv[:, :512], kv[:, 512:], slots, "fp4")
    with pytest.raises(ValueError, match=r"kv_cache must have shape \[num_blocks, block_size, "
                                         r"656\]"):
        ops.write(cache, kv[:, :512], kv[:, 512:], slots, "fp8_ds_mla")
    with pytest.raises(TypeError, match="slot_mapping must be int64"):
        ops.write(cache, kv[:, :512], kv[:, 512:], slots.to(torch.int32), fmt)
    with pytest.raises(ValueError, match="kv_c must be"):
        ops.write(cache, kv[:4, :512], kv[:, 512:], slots, fmt)
    with pytest.raises(ValueError, match="indices must be int32"):
        ops.sparse_decode(q, cache, idx.to(torch.int64), fmt)
    with pytest.raises(TypeError, match="q must be"):
        ops.sparse_decode(q.half(), cache, idx, fmt)
    with pytest.raises(ValueError, match="lengths must be int32"):
        ops.sparse_decode(q, cache, idx, fmt, None, torch.ones(3, dtype=torch.int32))
    assert torch.equal(cache, before)


# --------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------

def test_compile_fullgraph_write_and_decode_cpu(rng):
    fmt = "nvfp4_fp8_rope_token_scale"
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ref_cache = cache.clone()

    @torch.compile(fullgraph=True)
    def step(cache, kv, slots, q, idx):
        torch.ops.mlakv.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
        out, lse = torch.ops.mlakv.sparse_decode(q * 0.5, cache, idx, fmt)
        return out.float() * 2.0, lse

    out, lse = step(cache, kv, slots, q, idx)
    ops.write(ref_cache, kv[:, :512], kv[:, 512:], slots, fmt)
    o2, l2 = ops.sparse_decode(q * 0.5, ref_cache, idx, fmt)
    assert torch.equal(cache, ref_cache)
    assert torch.equal(out, o2.float() * 2.0) and torch.equal(lse, l2)


# --------------------------------------------------------------------------------------------
# vLLM and FlashMLA call shapes
# --------------------------------------------------------------------------------------------

def test_vllm_concat_and_cache_mla(rng):
    for fmt in FORMATS:
        cache, kv, slots, _, _ = _step_inputs(rng, fmt)
        c2 = cache.clone()
        VL.concat_and_cache_mla(kv[:, :512], kv[:, 512:].unsqueeze(1), cache, slots, fmt,
                                torch.tensor(1.0))
        ops.write(c2, kv[:, :512], kv[:, 512:], slots, fmt)
        assert torch.equal(cache, c2)
    with pytest.raises(ValueError, match="unknown record format 'auto'"):
        VL.concat_and_cache_mla(kv[:, :512], kv[:, 512:], cache, slots, "auto", None)


@pytest.mark.parametrize("fmt", ["fp8_ds_mla", "nvfp4_ds_mla", "nvfp4_fp8_rope"])
def test_flashmla_with_kvcache(rng, fmt):
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    k_cache = cache.unsqueeze(2)  # FlashMLA's [num_blocks, page_block_size, 1, bytes]
    if fmt == "fp8_ds_mla":
        k_cache = k_cache.view(torch.float8_e4m3fn)
    kw = {"kv_format": fmt} if fmt == "nvfp4_fp8_rope" else {}
    meta, none = FM.get_mla_metadata()
    assert none is None
    idx[1, 0, :] = -1  # a row with nothing to attend to
    sink = torch.randn(4)
    tl = torch.tensor([20, 9], dtype=torch.int32)
    out, lse = FM.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, None,
                                         is_fp8_kvcache=True, indices=idx, attn_sink=sink,
                                         topk_length=tl, **kw)
    o0, l0 = ops.sparse_decode(q, cache, idx, fmt, None, tl)
    assert lse.shape == (2, 4, 2)  # [b, h_q, s_q]
    want_lse = torch.where(l0 == float("-inf"), torch.full_like(l0, float("inf")), l0)
    assert torch.equal(lse, want_lse.transpose(1, 2))
    w = torch.sigmoid(l0 - sink.view(1, 1, 4)).unsqueeze(-1)
    torch.testing.assert_close(out.float(), o0.float() * w, rtol=0.01, atol=0.01)
    assert torch.all(out[1, 0] == 0) and torch.all(lse[1, :, 0] == float("inf"))
    out2, _ = FM.flash_mla_with_kvcache(q, k_cache, None, None, 512, meta, None,
                                        is_fp8_kvcache=True, indices=idx, attn_sink=sink,
                                        topk_length=tl, **kw)
    assert torch.equal(out, out2)
    with pytest.raises(ValueError, match="inconsistent"):
        FM.flash_mla_with_kvcache(q[:1], k_cache, None, None, 512, meta, None, True, False, True,
                                  idx[:1], **kw)


def test_flashmla_sparse_fwd_prefill(rng):
    fmt = "nvfp4_ds_mla"
    cache, kv, slots, q, idx = _step_inputs(rng, fmt)
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    s_q, h = 5, 4
    qp = _bf16(rng, s_q, h, 576)
    ip = torch.from_numpy(rng.integers(-1, 64, size=(s_q, 1, 20)).astype(np.int32))
    tl = torch.tensor([20, 3, 0, 7, 20], dtype=torch.int32)
    out, max_logits, lse = FM.flash_mla_sparse_fwd(qp, cache, ip, 0.05, topk_length=tl)
    assert out.shape == (s_q, h, 512) and lse.shape == (s_q, h) and max_logits.shape == (s_q, h)
    for t in range(s_q):
        o1, l1 = ops.sparse_decode(qp[t:t + 1].unsqueeze(0), cache, ip[t:t + 1].view(1, 1, 20),
                                   fmt, 0.05, tl[t:t + 1])
        assert torch.equal(out[t], o1[0, 0])
        want = l1[0, 0]
        want = torch.where(want == float("-inf"), torch.full_like(want, float("inf")), want)
        assert torch.equal(lse[t], want)
    assert torch.all(lse[2] == float("inf")) and torch.all(out[2] == 0)
    with pytest.raises(NotImplementedError, match="record cache"):
        FM.flash_mla_sparse_fwd(qp, _bf16(rng, 64, 1, 576), ip, 0.05)


def test_serve_loop_example_cpu():
    import os
    import re
    import subprocess
    import sys
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                        "serve_loop.py")
    env = dict(os.environ)
    env.setdefault("MLAKV_LIBRARY", mlakv.library_path())
    res = subprocess.run([sys.executable, path, "--budget-mib", "64", "--requests", "5",
                          "--prompt", "200", "--gen", "6", "--chunk", "96", "--topk", "48",
                          "--heads", "4"], capture_output=True, text=True, timeout=600, env=env)
    assert res.returncode == 0, res.stderr
    rows = {m.group(1): [int(x.replace(",", "")) for x in m.group(2, 3, 4)]
            for m in re.finditer(r"^(\S+)\s+[0-9]+\s+[0-9.]+\s+[0-9]+\s+([0-9,]+)\s+([0-9,]+)"
                                 r"\s+([0-9]+)$", res.stdout, re.M)}
    assert set(rows) == set(FORMATS), res.stdout
    for fmt, (planned, resident, done) in rows.items():
        assert done == 5 and 0 < resident <= planned, (fmt, res.stdout)
    assert rows["nvfp4_ds_mla"][0] > rows["fp8_ds_mla"][0]
