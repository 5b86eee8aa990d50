"""GPU tests (torch CUDA tensors): the CUDA writer's bytes equal the CPU writer's, CUDA decode
equals a torch float32 reference over the cache's de-quantized values, and write + decode
capture into a CUDA graph that replays on new data. Skipped without torch CUDA or without a
CUDA build of libmlakv."""

import numpy as np
import pytest

import mlakv
import mlakv_ref as R

try:
    import torch
    HAS_CUDA = torch.cuda.is_available() and mlakv.cuda_compiled()
except ImportError:  # CI: numpy only
    torch = None
    HAS_CUDA = False

pytestmark = pytest.mark.skipif(not HAS_CUDA,
                                reason="needs torch with CUDA and libmlakv built with CUDA")

FORMATS = [f.name for f in mlakv.formats()]
DEV = "cuda:0"


@pytest.fixture(autouse=True)
def _no_tf32():
    if torch is not None:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False


def _bits_to_torch(bits, dtype):
    """uint16 numpy bit patterns -> torch bf16/fp16 tensor on the GPU."""
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).to(DEV).view(dtype)


def _poison_pair(rng, fmt, nb, bs):
    """A CPU and a CUDA cache holding the same random bytes."""
    cpu = mlakv.PagedCache(fmt, nb, bs)
    cpu.data[:] = rng.integers(0, 256, size=cpu.data.shape, dtype=np.uint8)
    gpu = cpu.to(DEV)
    return cpu, gpu


def _diff_report(a, b, fmt):
    bad = np.nonzero(a != b)
    if not bad[0].size:
        return ""
    rows, cols = bad
    sample = ", ".join(f"slot-row {r} byte {c}: gpu {a[r, c]:#04x} cpu {b[r, c]:#04x}"
                       for r, c in list(zip(rows, cols))[:6])
    return f"{fmt}: {rows.size} bytes differ in {np.unique(rows).size} records: {sample}"


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_cuda_writer_bytes_equal_cpu_writer(rng, fmt, dtype):
    nb, bs = int(rng.integers(2, 9)), int(rng.choice([1, 16, 64]))
    cpu, gpu = _poison_pair(rng, fmt, nb, bs)
    cap = cpu.capacity
    n = int(rng.integers(1, cap + 1))
    mag = np.exp2(rng.uniform(-14, 6, size=(n, 1)))
    wide = (rng.standard_normal((n, 600)) * mag).astype(np.float32)
    wide[rng.random(wide.shape) < 0.01] = 0.0
    if dtype == "bfloat16":
        bits, tdt = R.f32_to_bf16_bits(wide), torch.bfloat16
    else:
        bits, tdt = np.clip(wide, -60000, 60000).astype(np.float16).view(np.uint16), \
            torch.float16
    slots = rng.permutation(cap)[:n].astype(np.int64)
    slots[rng.random(n) < 0.15] = -1
    # CPU: exact inputs (numpy uint16 bf16 bits or float16); GPU: column slices of [n, 600]
    host = bits if dtype == "bfloat16" else bits.view(np.float16)
    mlakv.write(np.ascontiguousarray(host[:, :512]), np.ascontiguousarray(host[:, 512:576]),
                cpu, slots)
    t = _bits_to_torch(bits, tdt)
    mlakv.write(t[:, :512], t[:, 512:576], gpu, torch.from_numpy(slots).to(DEV))
    torch.cuda.synchronize()
    rec = cpu.record_bytes
    a = gpu.host_bytes().reshape(cap, rec)  # dense blocks: one row per slot
    b = cpu.host_bytes().reshape(cap, rec)
    assert np.array_equal(a, b), _diff_report(a, b, fmt)


def test_cuda_writer_rejects_out_of_range_slots(rng):
    fmt, nb, bs = "nvfp4_ds_mla", 2, 64
    cpu, gpu = _poison_pair(rng, fmt, nb, bs)
    n = 40
    bits = R.f32_to_bf16_bits(rng.standard_normal((n, 576)).astype(np.float32))
    slots = rng.permutation(128)[:n].astype(np.int64)
    bad = rng.permutation(n)[:5]
    slots[bad[:3]] = 128 + rng.integers(0, 1000, 3)
    slots[bad[3:]] = (1 << 62) + rng.integers(0, 1000, 2)
    good = slots < 128
    mlakv.write(bits[good][:, :512], bits[good][:, 512:], cpu, slots[good])
    t = _bits_to_torch(bits, torch.bfloat16)
    counter = torch.zeros(1, dtype=torch.int64, device=DEV)
    mlakv.write(t[:, :512], t[:, 512:], gpu, torch.from_numpy(slots).to(DEV),
                rejected_count=counter)
    mlakv.write(t[:, :512], t[:, 512:], gpu, torch.from_numpy(slots).to(DEV),
                rejected_count=counter)
    assert int(counter.item()) == 10
    np.testing.assert_array_equal(gpu.host_bytes(), cpu.host_bytes())


def _torch_reference(q, K, idx, capacity, lengths=None, sink=None, sm_scale=1 / 24):
    """float32 sparse MLA decode in torch. q [B,S,H,576] fp32, K [capacity, 576] fp32
    (V = K[:, :512]), idx [B,S,T] int64; invalid: < 0, >= capacity, or masked by lengths."""
    B, S, H, _ = q.shape
    T = idx.shape[2]
    valid = (idx >= 0) & (idx < capacity)
    if lengths is not None:
        valid &= torch.arange(T, device=q.device)[None, None, :] < lengths[:, None, None]
    Kg = K[idx.clamp(0, capacity - 1)]                            # [B,S,T,576]
    scores = torch.einsum("bshd,bstd->bsht", q, Kg) * sm_scale
    scores = scores.masked_fill(~valid[:, :, None, :], float("-inf"))
    allsc = scores if sink is None else torch.cat(
        [scores, sink.view(1, 1, H, 1).expand(B, S, H, 1)], dim=3)
    lse = torch.logsumexp(allsc, dim=3)                           # -inf for empty rows
    p = torch.exp(scores - lse[..., None].clamp(min=-1e30))
    p = torch.where(valid[:, :, None, :], p, torch.zeros_like(p))
    out = torch.einsum("bsht,bstd->bshd", p, Kg[..., :512])
    return out, lse


def _decode_case(rng, fmt, B, S, H, T, nb=8, bs=64):
    cpu = mlakv.PagedCache(fmt, nb, bs)
    cap = cpu.capacity
    kv = (rng.standard_normal((cap, 576)) * np.exp2(rng.uniform(-3, 1, (cap, 1))))
    bits = R.f32_to_bf16_bits(kv.astype(np.float32))
    mlakv.write(bits[:, :512], bits[:, 512:], cpu, np.arange(cap, dtype=np.int64))
    gpu = cpu.to(DEV)
    lat, rope = mlakv.read(cpu, np.arange(cap, dtype=np.int64))
    # the kernels' K and V: the de-quantized values rounded to bf16 (exact for the nvfp4
    # latents and bf16 RoPE; a rounding for fp8 latents and fp8 RoPE); the two-level record's
    # latent stays unrounded (engine mode applies its token scale to S and P, not to K)
    K32 = torch.from_numpy(np.concatenate([lat, rope], axis=1)).to(DEV)
    K = K32.bfloat16().float()
    if fmt == "nvfp4_fp8_rope_token_scale":
        K[:, :512] = K32[:, :512]
    qbits = R.f32_to_bf16_bits(rng.standard_normal((B, S, H, 576)).astype(np.float32))
    idx = rng.integers(0, cap, size=(B, S, T)).astype(np.int32)
    idx[rng.random(idx.shape) < 0.2] = -1
    idx[rng.random(idx.shape) < 0.02] = cap + 7   # out of range: treated as invalid on CUDA
    return cpu, gpu, K, qbits, idx


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("shape", [(2, 1, 16, 64), (3, 2, 64, 300), (2, 1, 128, 2048)])
def test_cuda_decode_matches_torch_float32_reference(rng, fmt, shape):
    B, S, H, T = shape
    cpu, gpu, K, qbits, idx = _decode_case(rng, fmt, B, S, H, T)
    q = _bits_to_torch(qbits, torch.bfloat16)
    idx_t = torch.from_numpy(idx).to(DEV)
    lengths = torch.from_numpy(rng.integers(0, T + 1, size=B).astype(np.int32)).to(DEV) \
        if rng.random() < 0.5 else None
    sink = torch.from_numpy(rng.standard_normal(H).astype(np.float32)).to(DEV) \
        if rng.random() < 0.5 else None
    sm_scale = float(rng.choice([0.13523, 0.0625]))
    out = torch.full((B, S, H, 512), float("nan"), dtype=torch.bfloat16, device=DEV)
    lse = torch.full((B, S, H), float("nan"), dtype=torch.float32, device=DEV)
    o, l = mlakv.sparse_decode(q, gpu, idx_t, lengths=lengths, sink=sink, sm_scale=sm_scale,
                               out=out, lse=lse)
    assert o is out and l is lse
    torch.cuda.synchronize()
    ref, ref_lse = _torch_reference(q.float(), K, idx_t.long(), gpu.capacity, lengths, sink,
                                    np.float32(sm_scale))
    scale = ref.abs().max().clamp(min=1e-6)
    err = (out.float() - ref).abs()
    tol = 1e-2 * ref.abs() + 1e-2 * scale
    assert bool((err <= tol).all()), f"out: max err {err.max().item():.3g}, scale " \
        f"{scale.item():.3g}, {(err > tol).sum().item()} outside"
    fin = torch.isfinite(ref_lse)
    assert torch.equal(torch.isfinite(lse), fin)
    assert bool((lse[~fin] == float("-inf")).all()) and bool((out.float()[~fin] == 0).all())
    lerr = (lse[fin] - ref_lse[fin]).abs()
    assert bool((lerr <= 1e-3 + 1e-3 * ref_lse[fin].abs()).all()), \
        f"lse: max err {lerr.max().item():.3g}"
    # and close to the CPU engine-mode oracle (same math spec, different summation order)
    idx_cpu = np.where(idx >= gpu.capacity, -1, idx).astype(np.int32)
    co, cl = mlakv.sparse_decode(qbits, cpu, idx_cpu,
                                 lengths=None if lengths is None else lengths.cpu().numpy(),
                                 sink=None if sink is None else sink.cpu().numpy(),
                                 sm_scale=sm_scale)
    cof = torch.from_numpy(R.bf16_bits_to_f32(co)).to(DEV)
    d = (out.float() - cof).abs()
    assert bool((d <= 1e-2 * cof.abs() + 1e-2 * scale).all()), \
        f"gpu vs cpu engine: max diff {d.max().item():.3g}"


def test_cuda_argument_checks():
    gpu = mlakv.PagedCache("nvfp4_ds_mla", 1, 64, device="cuda")
    kv = np.zeros((2, 512), np.float32)
    with pytest.raises(ValueError, match=r"kv_c is on cpu but the cache is on cuda:0"):
        mlakv.write(kv, np.zeros((2, 64), np.float32), gpu, np.arange(2))
    t = torch.zeros(2, 576, dtype=torch.float32, device=DEV)
    with pytest.raises(TypeError, match=r"kv_c must be bfloat16 or float16, got float32"):
        mlakv.write(t[:, :512], t[:, 512:], gpu, torch.arange(2, device=DEV))
    q = torch.zeros(1, 1, 4, 576, dtype=torch.bfloat16, device=DEV)
    idx = torch.zeros(1, 1, 8, dtype=torch.int32, device=DEV)
    with pytest.raises(ValueError, match="mode must be 'engine' on CUDA"):
        mlakv.sparse_decode(q, gpu, idx, mode="exact")
    need = mlakv.decode_workspace_size(gpu, q, idx)
    if need > 0:
        with pytest.raises(ValueError, match="workspace holds"):
            mlakv.sparse_decode(q, gpu, idx, workspace=torch.empty(need - 1, dtype=torch.uint8,
                                                                    device=DEV))


def test_cuda_graph_capture_write_and_decode(rng):
    fmt, nb, bs = "nvfp4_ds_mla", 16, 64
    B, H, T, n = 4, 64, 512, 4
    gpu = mlakv.PagedCache(fmt, nb, bs, device=DEV)
    cap = gpu.capacity
    # fill the cache eagerly
    init = R.f32_to_bf16_bits(rng.standard_normal((cap, 576)).astype(np.float32))
    ti = _bits_to_torch(init, torch.bfloat16)
    mlakv.write(ti[:, :512], ti[:, 512:], gpu, torch.arange(cap, device=DEV))
    # static buffers
    kv = torch.zeros(n, 576, dtype=torch.bfloat16, device=DEV)
    slot_mapping = torch.zeros(n, dtype=torch.int64, device=DEV)
    q = torch.zeros(B, H, 576, dtype=torch.bfloat16, device=DEV)
    idx = torch.zeros(B, T, dtype=torch.int32, device=DEV)
    out = torch.empty(B, H, 512, dtype=torch.bfloat16, device=DEV)
    lse = torch.empty(B, H, dtype=torch.float32, device=DEV)
    ws = torch.empty(max(mlakv.decode_workspace_size(gpu, q, idx), 1), dtype=torch.uint8,
                     device=DEV)

    def step():
        mlakv.write(kv[:, :512], kv[:, 512:], gpu, slot_mapping)
        mlakv.sparse_decode(q, gpu, idx, out=out, lse=lse, workspace=ws)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()

    host = gpu.to("cpu")
    for _ in range(3):
        new = R.f32_to_bf16_bits(rng.standard_normal((n, 576)).astype(np.float32))
        slots = rng.permutation(cap)[:n].astype(np.int64)
        qb = R.f32_to_bf16_bits(rng.standard_normal((B, H, 576)).astype(np.float32))
        ib = rng.integers(0, cap, size=(B, T)).astype(np.int32)
        ib[:, :n] = slots  # attend over the tokens this replay writes
        kv.copy_(_bits_to_torch(new, torch.bfloat16))
        slot_mapping.copy_(torch.from_numpy(slots))
        q.copy_(_bits_to_torch(qb, torch.bfloat16))
        idx.copy_(torch.from_numpy(ib))
        graph.replay()
        torch.cuda.synchronize()
        # writer effect equals the CPU writer on the same data
        mlakv.write(new[:, :512], new[:, 512:], host, slots)
        np.testing.assert_array_equal(gpu.host_bytes(), host.host_bytes())
        # decode equals an eager call on the same inputs (deterministic kernels)
        eo, el = mlakv.sparse_decode(q, gpu, idx)
        torch.cuda.synchronize()
        assert torch.equal(out, eo) and torch.equal(lse, el)
        # and the torch fp32 reference over the freshly written records
        lat, rope = mlakv.read(host, np.arange(cap, dtype=np.int64))
        K = torch.from_numpy(np.concatenate([lat, rope], axis=1)).to(DEV).bfloat16().float()
        ref, _ = _torch_reference(q.float()[:, None], K, idx.long()[:, None], cap)
        scale = ref.abs().max()
        assert bool(((out.float() - ref[:, 0]).abs() <=
                     1e-2 * ref[:, 0].abs() + 1e-2 * scale).all())
