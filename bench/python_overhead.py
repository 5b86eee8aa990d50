#!/usr/bin/env python3
"""Host (CPU) cost of one write and one sparse-decode call from Python.

Times, per call, the C entry point called through ctypes with its argument struct already
built (the floor), then the same work through torch.ops.mlakv (the registered operator) and
through the direct API (mlakv.write / mlakv.sparse_decode on a PagedCache, numpy and torch
inputs). The shapes are tiny (one token written, one query row over one candidate) so that
the C work is small; "overhead" is a row's time minus the C call's.

    PYTHONPATH=python python3 bench/python_overhead.py [--device cpu|cuda] [--iters N]

On CUDA the launches are asynchronous: the figures are host time per call (what a CPU-bound
decode step pays), with a synchronization only at the end of each row.
"""

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))

import numpy as np  # noqa: E402

import mlakv  # noqa: E402


def per_call_us(fn, iters, sync=None):
    for _ in range(max(50, iters // 20)):
        fn()
    if sync:
        sync()
    best = float("inf")
    for _ in range(5):  # best of 5 runs: the least disturbed by the rest of the machine
        t0 = time.perf_counter()
        for _ in range(iters):
            fn()
        if sync:
            sync()
        best = min(best, (time.perf_counter() - t0) / iters * 1e6)
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--format", default="nvfp4_ds_mla")
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--no-compiled", action="store_true",
                    help="leave out the compiled kernels (torch_ops.use_compiled_ops)")
    args = ap.parse_args()
    fmt = args.format
    rows = []

    try:
        import torch
        from mlakv import torch_ops
    except ImportError:
        torch = None
    dev = args.device
    cuda = dev.startswith("cuda")
    if cuda and torch is None:
        sys.exit("--device cuda needs torch")
    sync = torch.cuda.synchronize if cuda else None
    rec = mlakv.record_bytes(fmt)
    nb, bs, h = 8, 64, args.heads
    rng = np.random.default_rng(0)

    if torch is not None:
        cache = torch.zeros(nb, bs, rec, dtype=torch.uint8, device=dev)
        kv = torch.randn(1, 576, dtype=torch.bfloat16, device=dev)
        kv_c, k_pe = kv[:, :512], kv[:, 512:]
        slots = torch.tensor([5], dtype=torch.int64, device=dev)
        q = torch.randn(1, 1, h, 576, dtype=torch.bfloat16, device=dev)
        idx = torch.tensor([[[5]]], dtype=torch.int32, device=dev)
        ops = torch.ops.mlakv
        nt = 1  # one CPU thread: no thread start-up in the figures

        # the floor: the C call with its arguments prebuilt
        d = torch_ops.cache_descriptor(cache, fmt)
        f = torch_ops._f()
        opts = torch_ops._write_opts(0)
        code = torch_ops._DTYPE_CODE[torch.bfloat16]
        e = torch_ops._decode_lookup(cache, fmt, 1.0, q, idx, None, False, False, nt, cuda, "bench")
        out = torch.empty(e.out_shape, dtype=e.out_dtype, device=dev)
        lse = torch.empty(e.lse_shape, dtype=torch.float32, device=dev)
        e.p_q.value, e.p_idx.value = q.data_ptr(), idx.data_ptr()
        e.p_out.value, e.p_lse.value = out.data_ptr(), lse.data_ptr()
        e.p_len.value = e.p_sink.value = None
        if cuda:
            stream = torch_ops._stream(cache.device.index)
            ws = torch_ops.reserve_workspace(dev, max(e.ws_need, 1))
            c_write = lambda: f.cuda_write(d.ref, 1, kv_c.data_ptr(), 576, k_pe.data_ptr(), 576,  # noqa: E731
                                           code, slots.data_ptr(), opts, None, stream)
            c_decode = lambda: f.cuda_sparse_decode(d.ref, e.ref, ws.data_ptr(), ws.numel(),  # noqa: E731
                                                    stream)
        else:
            c_write = lambda: f.write(d.ref, 1, kv_c.data_ptr(), 576, k_pe.data_ptr(), 576,  # noqa: E731
                                      code, slots.data_ptr(), opts)
            c_decode = lambda: f.sparse_decode(d.ref, e.ref)  # noqa: E731
        rows.append(("C call (ctypes, args prebuilt)", per_call_us(c_write, args.iters, sync),
                     per_call_us(c_decode, args.iters, sync)))
        wr = ops.write.default
        dc = ops.sparse_decode.default
        rows.append(("torch.ops.mlakv (op)",
                     per_call_us(lambda: wr(cache, kv_c, k_pe, slots, fmt), args.iters, sync),
                     per_call_us(lambda: dc(q, cache, idx, fmt, None, None, None, None, nt),
                                 args.iters, sync)))
        dco = ops.sparse_decode_out.default
        o2, l2 = torch.empty_like(out), torch.empty_like(lse)
        rows.append(("torch.ops.mlakv (op; decode into out=)",
                     per_call_us(lambda: wr(cache, kv_c, k_pe, slots, fmt), args.iters, sync),
                     per_call_us(lambda: dco(q, cache, idx, fmt, o2, l2, None, None, None, None,
                                             nt), args.iters, sync)))
        with torch.inference_mode():  # what serving code runs under: less dispatch work
            rows.append(("torch.ops.mlakv (op, inference_mode)",
                         per_call_us(lambda: wr(cache, kv_c, k_pe, slots, fmt), args.iters, sync),
                         per_call_us(lambda: dc(q, cache, idx, fmt, None, None, None, None, nt),
                                     args.iters, sync)))
        if not args.no_compiled:  # the compiled kernels (built on first use, then cached)
            torch_ops.use_compiled_ops()
            rows.append(("torch.ops.mlakv, compiled kernels",
                         per_call_us(lambda: wr(cache, kv_c, k_pe, slots, fmt), args.iters, sync),
                         per_call_us(lambda: dc(q, cache, idx, fmt, None, None, None, None, nt),
                                     args.iters, sync)))
            rows.append(("torch.ops.mlakv, compiled, out=",
                         per_call_us(lambda: wr(cache, kv_c, k_pe, slots, fmt), args.iters, sync),
                         per_call_us(lambda: dco(q, cache, idx, fmt, o2, l2, None, None, None,
                                                 None, nt), args.iters, sync)))
        pc = mlakv.PagedCache.wrap(cache, fmt, bs)
        rows.append(("mlakv.write / sparse_decode (torch)",
                     per_call_us(lambda: mlakv.write(kv_c, k_pe, pc, slots), args.iters, sync),
                     per_call_us(lambda: mlakv.sparse_decode(q, pc, idx, num_threads=nt),
                                 args.iters, sync)))
    if not cuda:
        pcn = mlakv.PagedCache(fmt, nb, bs)
        kvn = rng.standard_normal((1, 576)).astype(np.float32)
        kcn, kpn = kvn[:, :512], kvn[:, 512:]
        sn = np.array([5], dtype=np.int64)
        qn = rng.standard_normal((1, 1, h, 576)).astype(np.float32)
        idn = np.array([[[5]]], dtype=np.int32)
        rows.append(("mlakv.write / sparse_decode (numpy)",
                     per_call_us(lambda: mlakv.write(kcn, kpn, pcn, sn), args.iters),
                     per_call_us(lambda: mlakv.sparse_decode(qn, pcn, idn, num_threads=1),
                                 args.iters)))

    parts = []
    if torch is not None:
        # the pieces of one decode op call, each timed alone (host us per call)
        probe = torch.library.Library("mlakv_probe", "DEF")
        probe.define("noop(Tensor q, Tensor cache, Tensor idx, str fmt, float? sm=None, "
                     "Tensor? a=None, Tensor? b=None, Tensor? c=None, int n=0) -> ()")
        for key in ("CPU", "CUDA"):
            probe.impl("noop", lambda *a, **k: None, key)
        noop = torch.ops.mlakv_probe.noop.default
        idx0 = cache.device.index if cuda else None
        shape_o, shape_l = (1, 1, h, 512), (1, 1, h)
        parts = [
            ("dispatch of a Python op that does nothing",
             lambda: noop(q, cache, idx, fmt, None, None, None, None, nt)),
            ("torch.empty out + lse", lambda: (torch.empty(shape_o, dtype=torch.bfloat16, device=dev),
                                             torch.empty(shape_l, dtype=torch.float32, device=dev))),
            ("cache_descriptor lookup (write)", lambda: torch_ops.cache_descriptor(cache, fmt)),
            ("decode args lookup", lambda: torch_ops._decode_lookup(cache, fmt, 1.0, q, idx, None,
                                                                    False, False, nt, cuda,
                                                                    "bench")),
            ("set 4 pointers", lambda: (setattr(e.p_q, "value", q.data_ptr()),
                                        setattr(e.p_idx, "value", idx.data_ptr()),
                                        setattr(e.p_out, "value", out.data_ptr()),
                                        setattr(e.p_lse, "value", lse.data_ptr()))),
        ]
        if cuda:
            parts += [("torch.cuda.current_device()", torch.cuda.current_device),
                      ("current stream handle", lambda: torch_ops._stream(idx0)),
                      ("device enter", lambda: torch_ops._device_enter(idx0))]
        parts = [(n, per_call_us(fn, args.iters, sync)) for n, fn in parts]

    print(f"host time per call, {fmt}, device {dev}: write 1 token (bf16; numpy fp32); decode "
          f"1 x 1 x {h} heads over 1 candidate")
    print(f"{'path':40s} {'write us':>9s} {'decode us':>10s} {'write ovh':>10s} {'decode ovh':>11s}")
    base = rows[0] if torch is not None else None
    for name, w, dcu in rows:
        ow = f"{w - base[1]:10.1f}" if base else f"{'-':>10s}"
        od = f"{dcu - base[2]:11.1f}" if base else f"{'-':>11s}"
        print(f"{name:40s} {w:9.1f} {dcu:10.1f} {ow} {od}")
    if parts:
        print("\npieces of a decode op call, each alone (host us per call)")
        for name, t in parts:
            print(f"{name:45s} {t:6.2f}")


if __name__ == "__main__":
    main()
