"""The compiled kernels of torch.ops.mlakv.write / sparse_decode / sparse_decode_out
(torch_ops.use_compiled_ops; skipped without torch). Built here: a missing C++ compiler or
ninja fails the test, not skips it. In subprocesses, so that the rest of the suite keeps
testing the Python kernels: the compiled kernels take valid calls and equal the Python kernels
bit for bit, hand bad calls on to them (same exceptions), and the torch-op test files pass with
the compiled kernels in place (the CUDA file too where a GPU runs it)."""

import os
import subprocess
import sys

import pytest

pytest.importorskip("torch")
pytest.importorskip("mlakv.torch_ops")

HERE = os.path.dirname(os.path.abspath(__file__))

CHECK = r'''
import numpy as np, torch
from mlakv import torch_ops as T
ops = torch.ops.mlakv
T.use_compiled_ops()
py = {n: getattr(T, n) for n in ("_write_cpu", "_decode_cpu", "_decode_out_cpu")}
calls = {n: 0 for n in py}
def counting(n):
    def f(*a, **k):
        calls[n] += 1
        return py[n](*a, **k)
    return f
for n in py:
    setattr(T, n, counting(n))
g = torch.Generator().manual_seed(int.from_bytes(np.random.bytes(4), "little"))
def same(a, b):  # bit for bit (unwritten slots hold random bytes: NaN outputs compare too)
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(a.view(torch.uint8), b.view(torch.uint8))
for fmt in ("fp8_ds_mla", "nvfp4_ds_mla", "nvfp4_fp8_rope", "nvfp4_fp8_rope_token_scale"):
    rec = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 432}.get(fmt, 368)
    back = torch.randint(0, 256, (6, 16 * rec + 24), dtype=torch.uint8, generator=g)
    cache = back[:, :16 * rec].view(6, 16, rec)
    ref_back = back.clone()
    ref = ref_back[:, :16 * rec].view(6, 16, rec)
    kv = torch.randn(40, 576, generator=g).to(torch.bfloat16)
    slots = torch.randperm(96, generator=g)[:37]
    slots[5] = -1
    ls = 0.5 if fmt in ("nvfp4_ds_mla", "nvfp4_fp8_rope") else 1.0  # formats with a latent scale
    ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt, 0, ls)
    py["_write_cpu"](ref, kv[:, :512], kv[:, 512:], slots, fmt, 0, ls)
    assert torch.equal(back, ref_back), fmt
    q = torch.randn(2, 3, 5, 576, generator=g).to(torch.bfloat16)
    idx = torch.randint(-1, 96, (2, 3, 33), generator=g, dtype=torch.int32)
    lengths = torch.tensor([30, 7], dtype=torch.int32)
    sink = torch.randn(5, generator=g)
    for args in ((0.07, lengths, sink), (None, None, None)):
        o, l = ops.sparse_decode(q, cache, idx, fmt, *args, latent_scale=ls)
        o2, l2 = py["_decode_cpu"](q, cache, idx, fmt, *args, latent_scale=ls)
        assert same(o, o2) and same(l, l2), fmt
        o3, l3 = torch.full_like(o, float("nan")), torch.full_like(l, float("nan"))
        ops.sparse_decode_out(q, cache, idx, fmt, o3, l3, *args, latent_scale=ls)
        assert same(o3, o2) and same(l3, l2), fmt
assert calls == {n: 0 for n in py}, calls
# bad calls reach the Python kernels and raise their exceptions
for bad in (lambda: ops.sparse_decode(q.float().double(), cache, idx, fmt),
            lambda: ops.sparse_decode(q, cache, idx.long(), fmt),
            lambda: ops.write(cache, kv[:, :512], kv[:, 512:], slots.int(), fmt),
            lambda: ops.sparse_decode_out(q, cache, idx, fmt, o3[:1], l3)):
    try:
        bad()
    except (TypeError, ValueError):
        pass
    else:
        raise AssertionError("a bad call passed")
assert calls == {"_write_cpu": 1, "_decode_cpu": 2, "_decode_out_cpu": 1}, calls
# a C status other than OK: the Python kernel raises MlakvError (slot out of range)
import mlakv
try:
    ops.write(cache, kv[:1, :512], kv[:1, 512:], torch.tensor([96]), fmt)
except mlakv.MlakvError:
    pass
else:
    raise AssertionError("slot 96 of 96 accepted")
print("compiled ops: checks passed")
'''


def _run(args, env_extra=None):
    import mlakv  # the same package (and library, through MLAKV_LIBRARY) as this process
    env = dict(os.environ)
    parent = os.path.dirname(os.path.dirname(os.path.abspath(mlakv.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (parent, env.get("PYTHONPATH")) if p)
    env.update(env_extra or {})
    return subprocess.run(args, cwd=HERE, env=env, capture_output=True, text=True,
                          timeout=900)


def test_compiled_kernels_equal_python_kernels_and_hand_on_bad_calls():
    r = _run([sys.executable, "-c", CHECK])
    assert r.returncode == 0, r.stdout[-4000:] + r.stderr[-4000:]
    assert "checks passed" in r.stdout


def test_torch_op_tests_pass_with_compiled_kernels():
    files = ["test_torch_ops.py", "test_torch_ops_gpu.py"]
    r = _run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *files],
             {"MLAKV_TORCH_COMPILED_OPS": "1"})
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-4000:]
