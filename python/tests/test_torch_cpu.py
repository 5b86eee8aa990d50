"""torch CPU tensors on the CPU path (skipped when torch is not installed): same bytes and
results as numpy, torch outputs for torch inputs, engine-owned torch buffers, and the
example's torch helpers against its numpy ones."""

import importlib.util
import os

import numpy as np
import pytest

import mlakv
import mlakv_ref as R

torch = pytest.importorskip("torch")


def _t(bits):
    return torch.from_numpy(np.ascontiguousarray(bits).view(np.int16)).view(torch.bfloat16)


@pytest.mark.parametrize("fmt", [f.name for f in mlakv.formats()])
def test_torch_cpu_write_and_decode_equal_numpy(rng, fmt):
    n, nb, bs = 70, 3, 32
    bits = R.f32_to_bf16_bits(rng.standard_normal((n, 576)).astype(np.float32))
    slots = rng.permutation(nb * bs)[:n].astype(np.int64)
    a = mlakv.PagedCache(fmt, nb, bs)
    mlakv.write(bits[:, :512], bits[:, 512:], a, slots)
    rec = mlakv.record_bytes(fmt)
    buf = torch.zeros(nb, bs, rec, dtype=torch.uint8)
    b = mlakv.PagedCache.wrap(buf, fmt, bs)
    t = _t(bits)
    mlakv.write(t[:, :512], t[:, 512:].reshape(n, 1, 64), b, torch.from_numpy(slots))
    np.testing.assert_array_equal(buf.numpy().reshape(-1), a.host_bytes())
    q = R.f32_to_bf16_bits(rng.standard_normal((2, 3, 576)).astype(np.float32))
    idx = rng.integers(-1, nb * bs, size=(2, 40)).astype(np.int32)
    on, ln = mlakv.sparse_decode(q, a, idx)
    ot, lt = mlakv.sparse_decode(_t(q), b, torch.from_numpy(idx))
    assert isinstance(ot, torch.Tensor) and ot.dtype == torch.bfloat16
    assert isinstance(lt, torch.Tensor) and lt.dtype == torch.float32
    np.testing.assert_array_equal(ot.view(torch.int16).numpy().view(np.uint16), on)
    np.testing.assert_array_equal(lt.numpy(), ln)


def test_torch_cpu_errors():
    cache = mlakv.PagedCache("nvfp4_ds_mla", 1, 64)
    t = torch.zeros(4, 576, dtype=torch.float64)
    with pytest.raises(TypeError, match=r"mlakv\.write: kv_c must be .*got float64"):
        mlakv.write(t[:, :512], t[:, 512:], cache, torch.arange(4))
    t = torch.zeros(4, 576, dtype=torch.bfloat16)
    with pytest.raises(TypeError, match=r"slot_mapping must be int64, got int32"):
        mlakv.write(t[:, :512], t[:, 512:], cache, torch.arange(4, dtype=torch.int32))
    with pytest.raises(ValueError, match=r"kv_c must have unit stride"):
        w = torch.zeros(4, 1024, dtype=torch.bfloat16)
        mlakv.write(w[:, ::2], t[:, 512:], cache, torch.arange(4))


def test_example_torch_ops_match_numpy_ops(rng):
    path = os.path.join(os.path.dirname(__file__), "..", "examples", "decode_loop.py")
    spec = importlib.util.spec_from_file_location("decode_loop", path)
    ex = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ex)
    k = ex.bits_to_f32(ex.bf16_bits(rng.standard_normal((2, 300, 576)).astype(np.float32)))
    q = ex.bits_to_f32(ex.bf16_bits(rng.standard_normal((2, 4, 576)).astype(np.float32)))
    npo, tho = ex.NumpyOps(k), ex.TorchOps(k, torch.device("cpu"))
    for ctx, topk in ((250, 64), (30, 64)):
        p1, p2 = npo.topk(q, ctx, topk), tho.topk(q, ctx, topk)
        np.testing.assert_array_equal(np.sort(p1, axis=1), np.sort(p2, axis=1))
        r1, r2 = npo.reference(q, p1, 0.1), tho.reference(q, p1, 0.1)
        np.testing.assert_allclose(r1, r2, rtol=1e-4, atol=1e-5)
