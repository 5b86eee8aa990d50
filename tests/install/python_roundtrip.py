"""Round trip through an installed `mlakv` Python package (run from outside the source tree, by
tests/install/pip_check.sh): the bundled library is the one loaded, write + read give the
records' exact values, and CPU sparse decode (exact mode) matches a float64 softmax over the
read-back keys and values. Needs only numpy. Prints one line; exit 1 on any mismatch."""

import os
import sys

import numpy as np

import mlakv

pkg_dir = os.path.dirname(os.path.abspath(mlakv.__file__))
lib = os.path.abspath(mlakv.library_path())
if os.path.dirname(lib) != pkg_dir:
    sys.exit(f"python_roundtrip: loaded {lib}, not the library inside the package {pkg_dir}")

rng = np.random.default_rng(7)
n, heads, topk = 24, 4, 16
fails = []
for fmt in mlakv.formats():
    name = fmt.name if hasattr(fmt, "name") else str(fmt)
    cache = mlakv.PagedCache(name, num_blocks=4, block_size=16)
    kv_c = rng.standard_normal((n, mlakv.LATENT_DIM)).astype(np.float32)
    k_pe = rng.standard_normal((n, mlakv.ROPE_DIM)).astype(np.float32)
    slots = rng.permutation(cache.capacity)[:n].astype(np.int64)
    mlakv.write(kv_c, k_pe, cache, slots)
    lat, rope = mlakv.read(cache, slots)
    for t in range(n):
        ref_lat, ref_rope = mlakv.decode_record(name, mlakv.encode_record(name, kv_c[t], k_pe[t]))
        if not (np.array_equal(lat[t], ref_lat) and np.array_equal(rope[t], ref_rope)):
            fails.append(f"{name}: token {t} read back differs from encode + decode_record")
            break

    q = rng.standard_normal((1, heads, mlakv.QK_DIM)).astype(np.float32)
    pick = rng.choice(n, topk, replace=False)
    indices = slots[pick].astype(np.int32)[None, :]
    out, lse = mlakv.sparse_decode(q, cache, indices, mode="exact", out_dtype="float32")
    k = np.concatenate([lat[pick], rope[pick]], axis=1).astype(np.float64)
    s = (q[0].astype(np.float64) @ k.T) / np.sqrt(mlakv.QK_DIM)
    m = s.max(axis=1, keepdims=True)
    p = np.exp(s - m)
    ref_out = (p / p.sum(axis=1, keepdims=True)) @ lat[pick].astype(np.float64)
    ref_lse = (m[:, 0] + np.log(p.sum(axis=1)))
    err = np.abs(np.asarray(out, np.float64).reshape(heads, -1) - ref_out).max()
    lerr = np.abs(np.asarray(lse, np.float64).reshape(heads) - ref_lse).max()
    if not (err < 1e-5 and lerr < 1e-5):
        fails.append(f"{name}: decode differs from the float64 reference (out {err:.3g}, lse {lerr:.3g})")

if fails:
    sys.exit("python_roundtrip: " + "; ".join(fails))
print(f"mlakv {mlakv.version()} from {lib}: write + read + CPU decode match for "
      f"{len(mlakv.formats())} formats (CUDA kernels {'compiled' if mlakv.cuda_compiled() else 'not compiled'})")
