"""Argument checks: Python-side messages name the argument; C failures become MlakvError with
the status name and the library's message; failed calls change nothing."""

import os

import numpy as np
import pytest

import mlakv


@pytest.fixture
def cache():
    return mlakv.PagedCache("nvfp4_ds_mla", 2, 16)


def _tok(n=4, dtype=np.float32):
    return np.zeros((n, 512), dtype=dtype), np.zeros((n, 64), dtype=dtype), \
        np.arange(n, dtype=np.int64)


@pytest.mark.parametrize("bad, pattern, exc", [
    (lambda kv, kp, s: (kv.astype(np.float64), kp, s), r"kv_c must be float32.*got float64",
     TypeError),
    (lambda kv, kp, s: (kv, kp.astype(np.float16), s),
     r"k_pe must have the dtype of kv_c \(float32\), got float16", TypeError),
    (lambda kv, kp, s: (kv[:, :500], kp, s), r"kv_c must have shape \[\*, 512\], got \[4, 500\]",
     ValueError),
    (lambda kv, kp, s: (kv, kp[:3], s), r"k_pe must have shape \[4, 64\], got \[3, 64\]",
     ValueError),
    (lambda kv, kp, s: (kv, kp, s.astype(np.int32)), r"slot_mapping must be int64, got int32",
     TypeError),
    (lambda kv, kp, s: (kv, kp, s[:3]), r"slot_mapping must have shape \[4\], got \[3\]",
     ValueError),
    (lambda kv, kp, s: (kv, kp, np.repeat(s, 2)[::2]), r"slot_mapping must be contiguous",
     ValueError),
    (lambda kv, kp, s: (np.repeat(kv, 2, axis=1)[:, ::2], kp, s),
     r"kv_c must have unit stride in its last dimension", ValueError),
    (lambda kv, kp, s: (kv[::-1], kp, s), r"kv_c has a negative stride", ValueError),
    (lambda kv, kp, s: (kv.tolist(), kp, s), r"kv_c must be a numpy array or a torch tensor",
     TypeError),
])
def test_write_argument_messages(cache, bad, pattern, exc):
    before = cache.data.copy()
    kv, kp, s = bad(*_tok())
    with pytest.raises(exc, match=r"mlakv\.write: " + pattern):
        mlakv.write(kv, kp, cache, s)
    np.testing.assert_array_equal(cache.data, before)


def test_write_rejects_non_cache():
    kv, kp, s = _tok()
    with pytest.raises(TypeError, match="cache must be a mlakv.PagedCache"):
        mlakv.write(kv, kp, object(), s)


def test_write_accepts_slot_list(cache):
    kv, kp, _ = _tok(2)
    kv[:] = 1.0
    mlakv.write(kv, kp, cache, [3, -1])
    assert cache.records([3]).any() and not cache.records([0, 1, 2, 4]).any()


def _dec(batch=2, s_q=1, heads=4, topk=5):
    q = np.zeros((batch, s_q, heads, 576), dtype=np.float32)
    idx = np.zeros((batch, s_q, topk), dtype=np.int32)
    return q, idx


@pytest.mark.parametrize("kwargs, pattern, exc", [
    (dict(q=np.zeros((2, 1, 4, 512), np.float32)),
     r"q must have shape \[batch, s_q, heads, 576\] or \[batch, heads, 576\], got \[2, 1, 4, 512\]",
     ValueError),
    (dict(q=np.zeros((2, 1, 4, 576), np.float16)), r"q must be float32 or bfloat16", TypeError),
    (dict(indices=np.zeros((2, 1, 5), np.int64)), r"indices must be int32, got int64", TypeError),
    (dict(indices=np.zeros((2, 2, 5), np.int32)), r"indices must have shape \[2, 1, topk\]",
     ValueError),
    (dict(lengths=np.zeros(3, np.int32)), r"lengths must have shape \[2\], got \[3\]", ValueError),
    (dict(sink=np.zeros(4, np.float64)), r"sink must be float32, got float64", TypeError),
    (dict(sink=np.zeros(5, np.float32)), r"sink must have shape \[4\], got \[5\]", ValueError),
    (dict(out=np.zeros((2, 1, 4, 576), np.float32)),
     r"out must have shape \[2, 1, 4, 512\], got \[2, 1, 4, 576\]", ValueError),
    (dict(out=np.zeros((2, 1, 4, 1024), np.float32)[..., ::2]), r"out must be contiguous",
     ValueError),
    (dict(out=np.zeros((2, 1, 4, 512), np.float16)), r"out must be float32 or bfloat16",
     TypeError),
    (dict(lse=np.zeros((2, 1, 4), np.float64)), r"lse must be float32, got float64", TypeError),
    (dict(mode="fast"), r"mode must be 'exact' or 'engine'", ValueError),
    (dict(workspace=np.zeros(16, np.uint8)), r"workspace is for CUDA caches", ValueError),
])
def test_decode_argument_messages(cache, kwargs, pattern, exc):
    q, idx = _dec()
    args = dict(q=q, indices=idx)
    args.update(kwargs)
    q, idx = args.pop("q"), args.pop("indices")
    with pytest.raises(exc, match=r"mlakv\.sparse_decode: " + pattern):
        mlakv.sparse_decode(q, cache, idx, **args)


def test_c_errors_become_mlakv_error(cache):
    q, idx = _dec()
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.sparse_decode(q, cache, idx, num_threads=-3)
    assert e.value.status_name.startswith("MLAKV_ERR_")
    assert e.value.function == "mlakv_sparse_decode"
    assert e.value.message and e.value.message in str(e.value)
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.PagedCache("nvfp4_ds_mla", 0, 64)
    assert e.value.status_name == "MLAKV_ERR_GEOMETRY"
    assert "num_blocks" in e.value.message
    with pytest.raises(mlakv.MlakvError) as e:
        mlakv.PagedCache("fp4", 1, 64)
    assert e.value.status_name == "MLAKV_ERR_UNKNOWN_FORMAT"


def test_read_argument_messages(cache):
    with pytest.raises(TypeError, match=r"mlakv\.read: slots must be int64, got int32"):
        mlakv.read(cache, np.arange(3, dtype=np.int32))
    with pytest.raises(ValueError, match=r"mlakv\.read: slots must have shape \[n\]"):
        mlakv.read(cache, np.zeros((2, 2), np.int64))


def test_devices():
    with pytest.raises(ValueError, match="device must be 'cpu' or 'cuda"):
        mlakv.PagedCache("nvfp4_ds_mla", 1, 64, device="tpu")
    try:
        import torch
        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if not has_cuda:
        with pytest.raises((ImportError, ValueError), match="cuda|torch"):
            mlakv.PagedCache("nvfp4_ds_mla", 1, 64, device="cuda")
    if not mlakv.cuda_compiled():
        with pytest.raises(mlakv.MlakvError) as e:
            mlakv.cuda_check_device()
        assert e.value.status_name == "MLAKV_ERR_NO_CUDA"


def test_library_lookup_order(monkeypatch):
    import mlakv._lib as L
    monkeypatch.setenv("MLAKV_LIBRARY", "/nonexistent/libmlakv.so")
    assert L.library_candidates() == ["/nonexistent/libmlakv.so"]
    monkeypatch.delenv("MLAKV_LIBRARY")
    cands = L.library_candidates()
    assert cands[0] == os.path.join(L.repo_root(), "build", "libmlakv.so")
    assert len(cands) == 2 and "mlakv" in cands[1]


@pytest.mark.parametrize("slots, exc, pattern", [
    ([0.5, 1.7], TypeError, r"slot_mapping must hold integers, got float64"),
    ([0.0, 1.0], TypeError, r"slot_mapping must hold integers, got float64"),
    ([0, 1.5], TypeError, r"slot_mapping must hold integers"),
    ([True, False], TypeError, r"slot_mapping must hold integers, got bool"),
    (["0", "1"], TypeError, r"slot_mapping must hold integers"),
    ([2**63, 0], ValueError, r"slot_mapping holds a value outside the int64 range"),
    ([2**64 + 1, 0], ValueError, r"slot_mapping holds a value outside the int64 range"),
])
def test_write_rejects_non_integer_slot_lists(cache, slots, exc, pattern):
    """A float slot list was cast to int64 (0.5, 1.7 -> slots 0, 1) and written."""
    before = cache.data.copy()
    kv, kp, _ = _tok(2)
    kv[:] = 1.0
    with pytest.raises(exc, match=r"mlakv\.write: " + pattern):
        mlakv.write(kv, kp, cache, slots)
    np.testing.assert_array_equal(cache.data, before)


def test_read_and_records_reject_non_integer_slots(cache):
    with pytest.raises(TypeError, match=r"mlakv\.read: slots must hold integers, got float64"):
        mlakv.read(cache, [0.5, 1.7])
    with pytest.raises(TypeError, match=r"slots must hold integers"):
        cache.records([0.5])
    with pytest.raises(TypeError, match=r"slots must be integers, got float64"):
        cache.records(np.array([1.0]))
    assert cache.records([1, 2]).shape == (2, cache.record_bytes)
    assert cache.records([]).shape == (0, cache.record_bytes)


def test_decode_rejects_non_integer_index_lists(cache):
    q = np.zeros((1, 1, 576), np.float32)
    with pytest.raises(TypeError, match=r"indices must hold integers, got float64"):
        mlakv.sparse_decode(q, cache, [[0.5, 1.2]])
    with pytest.raises(ValueError, match=r"indices holds a value outside the int32 range"):
        mlakv.sparse_decode(q, cache, [[2**31, 0]])
    with pytest.raises(TypeError, match=r"lengths must hold integers"):
        mlakv.sparse_decode(q, cache, [[0, 1]], lengths=[1.5])
    out, lse = mlakv.sparse_decode(q, cache, [[0, 1]], lengths=[2])
    assert out.shape == (1, 1, 512)
