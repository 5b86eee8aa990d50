"""torch.ops.mlakv on CUDA (skipped without torch CUDA or a CUDA build of libmlakv): opcheck,
the CUDA ops against the CPU ops (bytes of the writer; decode within bf16 rounding),
torch.compile(fullgraph=True), and write + decode captured in a CUDA graph that replays on new
data. Fresh random inputs each run (MLAKV_SEED replays); outputs poisoned before each call."""

import pytest

import mlakv

try:
    import torch
    HAS_CUDA = torch.cuda.is_available() and mlakv.cuda_compiled()
except ImportError:
    torch = None
    HAS_CUDA = False

pytestmark = pytest.mark.skipif(not HAS_CUDA,
                                reason="needs torch with CUDA and libmlakv built with CUDA")

FORMATS = [f.name for f in mlakv.formats()]
DEV = "cuda:0"


def _t():
    from mlakv import torch_ops
    return torch_ops


def _need(*symbols):
    missing = [s for s in symbols if s in _t().missing_symbols()]
    if missing:
        pytest.skip(f"libmlakv does not export {', '.join(missing)} yet")


def _inputs(rng, fmt, nb=16, bs=64, n=300, b=3, s_q=2, h=16, topk=128, pad=64):
    ops = _t().ops
    rec = mlakv.record_bytes(fmt)
    back = torch.randint(0, 256, (nb, bs * rec + pad), dtype=torch.uint8, device=DEV)
    cache = back[:, :bs * rec].view(nb, bs, rec)
    x = torch.randn(nb * bs, 576, device=DEV).to(torch.bfloat16)
    ops.write(cache, x[:, :512], x[:, 512:], torch.arange(nb * bs, device=DEV), fmt)
    g = torch.Generator().manual_seed(int(rng.integers(1 << 31)))
    kv = torch.randn(n + 5, 576, generator=g).to(torch.bfloat16).to(DEV)
    slots = torch.randperm(nb * bs, generator=g)[:n].to(DEV)
    slots[7] = -1
    q = torch.randn(b, s_q, h, 576, generator=g).to(torch.bfloat16).to(DEV)
    idx = torch.randint(-1, nb * bs, (b, s_q, topk), generator=g, dtype=torch.int32).to(DEV)
    return cache, kv, slots, q, idx


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_opcheck(rng, fmt):
    ops = _t().ops
    cache, kv, slots, q, idx = _inputs(rng, fmt)
    torch.library.opcheck(ops.write, (cache, kv[:, :512], kv[:, 512:], slots, fmt))
    lengths = torch.tensor([100, 128, 5], dtype=torch.int32, device=DEV)
    torch.library.opcheck(ops.sparse_decode, (q, cache, idx, fmt),
                          {"sm_scale": 0.05, "lengths": lengths,
                           "sink": torch.randn(16, device=DEV)})
    torch.library.opcheck(ops.encode_records, (kv[:4, :512], kv[:4, 512:], fmt))


def test_cuda_opcheck_gathers(rng):
    ops = _t().ops
    _need("mlakv_cuda_gather_bf16", "mlakv_cuda_gather_upconvert")
    cache, _, _, _, _ = _inputs(rng, "fp8_ds_mla")
    s = torch.tensor([0, -1, 5, 1000], dtype=torch.int32, device=DEV)
    torch.library.opcheck(ops.gather_bf16, (cache, s, "fp8_ds_mla"))
    bt = torch.tensor([[1, 0, 3], [2, 3, 0]], dtype=torch.int32, device=DEV)
    lens = torch.tensor([130, 7], dtype=torch.int32, device=DEV)
    starts = torch.tensor([0, 130], dtype=torch.int32, device=DEV)
    dst = torch.zeros(140, 576, dtype=torch.bfloat16, device=DEV)
    torch.library.opcheck(ops.gather_upconvert, (cache, dst, bt, lens, starts, None,
                                                 "fp8_ds_mla"))


def test_cuda_decode_out_and_mixed_devices(rng):
    """sparse_decode_out on CUDA equals sparse_decode (opcheck too); an index tensor on the
    host after a cached call of the same shapes is refused, not passed to the kernel."""
    ops = _t().ops
    fmt = "nvfp4_ds_mla"
    cache, kv, slots, q, idx = _inputs(rng, fmt)
    want, want_lse = ops.sparse_decode(q, cache, idx, fmt)
    out = torch.full_like(want, float("nan"))
    lse = torch.full_like(want_lse, float("nan"))
    torch.library.opcheck(ops.sparse_decode_out, (q, cache, idx, fmt, out, lse))
    ops.sparse_decode_out(q, cache, idx, fmt, out, lse)
    assert torch.equal(out, want) and torch.equal(lse, want_lse)
    with pytest.raises(ValueError):
        ops.sparse_decode_out(q, cache, idx, fmt, out.cpu(), lse)
    with pytest.raises((ValueError, RuntimeError)):
        ops.sparse_decode(q, cache, idx.cpu(), fmt)


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_ops_match_cpu_ops(rng, fmt):
    ops = _t().ops
    cache, kv, slots, q, idx = _inputs(rng, fmt)
    host = cache.cpu()
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
    ops.write(host, kv[:, :512].cpu(), kv[:, 512:].cpu(), slots.cpu(), fmt)
    assert torch.equal(cache.cpu(), host), "CUDA writer bytes differ from the CPU writer"
    lengths = torch.tensor([100, 128, 5], dtype=torch.int32, device=DEV)
    sink = torch.randn(16, device=DEV)
    out, lse = ops.sparse_decode(q, cache, idx, fmt, 0.05, lengths, sink)
    o2, l2 = ops.sparse_decode(q.cpu(), host, idx.cpu(), fmt, 0.05, lengths.cpu(), sink.cpu())
    torch.testing.assert_close(out.cpu().float(), o2.float(), rtol=0.02, atol=0.02)
    torch.testing.assert_close(lse.cpu(), l2, rtol=1e-3, atol=1e-3)
    if not _t().missing_symbols():
        s = torch.tensor([0, -1, 5, 777], dtype=torch.int32)
        assert torch.equal(ops.gather_bf16(cache, s.to(DEV), fmt).cpu(),
                           ops.gather_bf16(host, s, fmt))


def test_cuda_compile_fullgraph(rng):
    ops = _t().ops
    fmt = "nvfp4_ds_mla"
    cache, kv, slots, q, idx = _inputs(rng, fmt)
    ref = cache.clone()

    @torch.compile(fullgraph=True)
    def step(cache, kv, slots, q, idx):
        torch.ops.mlakv.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
        out, lse = torch.ops.mlakv.sparse_decode(q * 0.5, cache, idx, fmt)
        return out.float() + 1.0, lse

    out, lse = step(cache, kv, slots, q, idx)
    ops.write(ref, kv[:, :512], kv[:, 512:], slots, fmt)
    o2, l2 = ops.sparse_decode(q * 0.5, ref, idx, fmt)
    assert torch.equal(cache, ref)
    assert torch.equal(out, o2.float() + 1.0) and torch.equal(lse, l2)


@pytest.mark.parametrize("fmt", FORMATS)
def test_cuda_graph_replay(rng, fmt):
    T = _t()
    ops = T.ops
    cache, kv, slots, q, idx = _inputs(rng, fmt)
    ref = cache.clone()
    T.reserve_workspace(DEV, T.workspace_bytes(q, cache, idx, fmt))
    s_kv, s_slots, s_q, s_idx = kv.clone(), slots.clone(), q.clone(), idx.clone()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm-up: argument structs built outside the capture
        ops.write(cache, s_kv[:, :512], s_kv[:, 512:], s_slots, fmt)
        ops.sparse_decode(s_q, cache, s_idx, fmt)
    torch.cuda.current_stream().wait_stream(stream)
    ops.write(ref, kv[:, :512], kv[:, 512:], slots, fmt)  # what the warm-up wrote
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ops.write(cache, s_kv[:, :512], s_kv[:, 512:], s_slots, fmt)
        g_out, g_lse = ops.sparse_decode(s_q, cache, s_idx, fmt)
    for _ in range(3):  # new data each replay
        kv2 = torch.randn_like(kv, dtype=torch.float32).to(torch.bfloat16)
        sl2 = torch.randperm(cache.shape[0] * cache.shape[1], device=DEV)[:slots.shape[0]]
        q2 = torch.randn_like(q, dtype=torch.float32).to(torch.bfloat16)
        i2 = torch.randint_like(idx, -1, cache.shape[0] * cache.shape[1])
        s_kv.copy_(kv2)
        s_slots.copy_(sl2)
        s_q.copy_(q2)
        s_idx.copy_(i2)
        g_out.fill_(float("nan"))
        g_lse.fill_(float("nan"))
        graph.replay()
        ops.write(ref, kv2[:, :512], kv2[:, 512:], sl2, fmt)
        o2, l2 = ops.sparse_decode(q2, ref, i2, fmt)
        torch.cuda.synchronize()
        assert torch.equal(cache, ref)
        assert torch.equal(g_out, o2) and torch.equal(g_lse, l2)


def test_dcp_ops_cuda_match_cpu(rng):
    """dcp_local_indices and merge_partials on CUDA give the CPU ops' results (indices exactly;
    the merge to fp32 rounding, bf16 parts to one bf16 ulp); opcheck on CUDA tensors."""
    import numpy as np
    ops = _t().ops
    fmt, batch, topk, nb, bs = "nvfp4_ds_mla", 3, 500, 40, 64
    cache = torch.zeros(nb, bs, mlakv.record_bytes(fmt), dtype=torch.uint8)
    bt = torch.from_numpy(rng.permutation(nb).astype(np.int32)[:batch * 10].reshape(batch, 10))
    pos = torch.from_numpy(rng.integers(-1, 3 * 10 * bs, size=(batch, 2, topk)).astype(np.int32))
    for rank in range(3):
        want = ops.dcp_local_indices(pos, bt, cache, fmt, rank, 3)
        got = ops.dcp_local_indices(pos.to(DEV), bt.to(DEV), cache.to(DEV), fmt, rank, 3)
        assert torch.equal(got[0].cpu(), want[0]) and torch.equal(got[1].cpu(), want[1])
    parts = torch.randn(4, batch, 2, 8, 512)
    lse = torch.randn(4, batch, 2, 8) * 3
    lse[2, 0] = float("-inf")
    sink = torch.randn(8)
    want_o, want_l = ops.merge_partials(parts, lse, sink)
    got_o, got_l = ops.merge_partials(parts.to(DEV), lse.to(DEV), sink.to(DEV))
    torch.testing.assert_close(got_o.cpu(), want_o, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got_l.cpu(), want_l, rtol=1e-5, atol=1e-5)
    pb = parts.to(torch.bfloat16)
    want_b, _ = ops.merge_partials(pb, lse, None)
    got_b, _ = ops.merge_partials(pb.to(DEV), lse.to(DEV), None)
    torch.testing.assert_close(got_b.cpu().float(), want_b.float(), rtol=2 ** -7, atol=1e-3)
    torch.library.opcheck(ops.merge_partials, (parts.to(DEV), lse.to(DEV), sink.to(DEV)))
    torch.library.opcheck(ops.dcp_local_indices, (pos.to(DEV), bt.to(DEV), cache.to(DEV), fmt,
                                                  1, 3))
