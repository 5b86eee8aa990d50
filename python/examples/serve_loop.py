#!/usr/bin/env python3
"""A paged serving loop on torch.ops.mlakv: a block pool sized by the capacity planner,
requests admitted while blocks are free and freed when done, chunked prefill (write the
chunk's records, then attend over its prefix through sparse decode with s_q = chunk), and
decode steps where a stand-in indexer picks the top-k slots. On CUDA each decode step is
captured once in a CUDA graph and replayed. Prints tokens/s, pool memory and the longest
context held at once, per record format.

    PYTHONPATH=python python3 python/examples/serve_loop.py [--device cuda] [--budget-mib 64]

The model is a stand-in (random projections): the point is the cache traffic and the calls.
"""

import argparse
import collections
import math
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import torch  # noqa: E402

import mlakv  # noqa: E402
from mlakv import torch_ops  # noqa: E402, F401  (registers torch.ops.mlakv)

ops = torch.ops.mlakv


class Pool:
    """Free list of cache blocks; a request owns a list of blocks (its block table)."""

    def __init__(self, num_blocks):
        self.free = collections.deque(range(num_blocks))

    def take(self, n):
        if len(self.free) < n:
            return None
        return [self.free.popleft() for _ in range(n)]

    def give(self, blocks):
        self.free.extend(blocks)


class Request:
    def __init__(self, rid, prompt, gen):
        self.rid, self.prompt, self.gen = rid, prompt, gen
        self.blocks, self.len, self.out = [], 0, 0


def run(fmt, args, dev):
    bs, h, topk = args.block_size, args.heads, args.topk
    cap = mlakv.plan_capacity(args.model, fmt, args.budget_mib << 20, bs)
    # the planner counts every layer; this loop keeps one layer's cache (the same blocks)
    num_blocks = max(cap.blocks, 1)
    rec = mlakv.record_bytes(fmt)
    cache = torch.zeros(num_blocks, bs, rec, dtype=torch.uint8, device=dev)
    pool = Pool(num_blocks)
    g = torch.Generator(device="cpu").manual_seed(args.seed)
    waiting = collections.deque(
        Request(i, args.prompt + (i * 37) % args.prompt, args.gen) for i in range(args.requests))
    running, done, tokens, max_ctx = [], 0, 0, 0
    sm = 1.0 / math.sqrt(576)
    t0 = time.perf_counter()
    graphs = {}

    def slots_of(r, lo, hi):
        pos = torch.arange(lo, hi)
        bt = torch.tensor(r.blocks, dtype=torch.int64)
        return (bt[pos // bs] * bs + pos % bs).to(dev)

    def kv_rows(n):
        return torch.randn(n, 576, generator=g).to(torch.bfloat16).to(dev)

    while waiting or running:
        # admit: a request needs blocks for its whole prompt + generation
        while waiting and len(running) < args.max_batch:
            r = waiting[0]
            blocks = pool.take(-(-(r.prompt + r.gen) // bs))
            if blocks is None:
                break
            waiting.popleft()
            r.blocks = blocks
            running.append(r)
        # chunked prefill of one request's next chunk
        pre = next((r for r in running if r.len < r.prompt), None)
        if pre is not None:
            lo, hi = pre.len, min(pre.prompt, pre.len + args.chunk)
            slots = slots_of(pre, lo, hi)
            kv = kv_rows(hi - lo)
            ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
            q = kv_rows((hi - lo) * h).view(1, hi - lo, h, 576)
            # causal window per chunk token: the last topk slots up to and including itself
            pos = torch.arange(lo, hi).view(-1, 1) - torch.arange(topk).view(1, -1)
            bt = torch.tensor(pre.blocks, dtype=torch.int64)
            flat = torch.where(pos >= 0, bt[pos.clamp(min=0) // bs] * bs + pos.clamp(min=0) % bs,
                               torch.full_like(pos, -1))
            ops.sparse_decode(q, cache, flat.to(torch.int32).view(1, hi - lo, topk).to(dev),
                              fmt, sm)
            pre.len = hi
            tokens += hi - lo
        # one decode step for every request past its prompt
        dec = [r for r in running if r.len >= r.prompt and r.out < r.gen]
        if dec:
            b = len(dec)
            slots = torch.cat([slots_of(r, r.len, r.len + 1) for r in dec])
            # stand-in indexer: top-k of random scores over each request's context
            idx = torch.full((b, 1, topk), -1, dtype=torch.int32)
            for i, r in enumerate(dec):
                k = min(topk, r.len + 1)
                pick = torch.topk(torch.rand(r.len + 1, generator=g), k).indices
                idx[i, 0, :k] = slots_of(r, 0, r.len + 1).cpu()[pick].to(torch.int32)
            idx = idx.to(dev)
            kv, q = kv_rows(b), kv_rows(b * h).view(b, 1, h, 576)
            if dev.type == "cuda":
                st = graphs.get(b)
                if st is None:  # capture once per batch size, replay with new inputs
                    st = {"kv": kv.clone(), "sl": slots.clone(), "q": q.clone(),
                          "idx": idx.clone(), "g": torch.cuda.CUDAGraph()}
                    torch_ops.reserve_workspace(dev, torch_ops.workspace_bytes(q, cache, idx,
                                                                               fmt))
                    ops.sparse_decode(st["q"], cache, st["idx"], fmt, sm)  # warm-up
                    with torch.cuda.graph(st["g"]):
                        ops.write(cache, st["kv"][:, :512], st["kv"][:, 512:], st["sl"], fmt)
                        st["out"] = ops.sparse_decode(st["q"], cache, st["idx"], fmt, sm)
                    graphs[b] = st
                for k, v in (("kv", kv), ("sl", slots), ("q", q), ("idx", idx)):
                    st[k].copy_(v)
                st["g"].replay()
            else:
                ops.write(cache, kv[:, :512], kv[:, 512:], slots, fmt)
                ops.sparse_decode(q, cache, idx, fmt, sm)
            for r in dec:
                r.len += 1
                r.out += 1
            tokens += b
        max_ctx = max([max_ctx, sum(r.len for r in running)])
        for r in [r for r in running if r.out >= r.gen]:
            pool.give(r.blocks)
            running.remove(r)
            done += 1
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    return {"format": fmt, "tokens_s": tokens / dt, "pool_mib": cache.numel() / 2**20,
            "blocks": num_blocks, "planned_tokens": cap.tokens, "max_resident": max_ctx,
            "done": done}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--model", default="glm-5.2")
    ap.add_argument("--budget-mib", type=int, default=64, help="memory per GPU for the KV pool")
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--topk", type=int, default=256)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=512)
    ap.add_argument("--gen", type=int, default=16)
    ap.add_argument("--chunk", type=int, default=128)
    ap.add_argument("--max-batch", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--formats", default=",".join(f.name for f in mlakv.formats()))
    args = ap.parse_args()
    dev = torch.device(args.device)
    print(f"model {args.model}, KV budget {args.budget_mib} MiB per GPU (all layers), block "
          f"{args.block_size}, {args.heads} heads, topk {args.topk}, {args.requests} requests "
          f"of {args.prompt}+ prompt / {args.gen} generated tokens, device {dev}")
    print(f"{'format':28s} {'tokens/s':>10s} {'pool MiB':>9s} {'blocks':>7s} "
          f"{'planned tokens':>15s} {'max resident':>13s} {'done':>5s}")
    for fmt in args.formats.split(","):
        r = run(fmt, args, dev)
        print(f"{r['format']:28s} {r['tokens_s']:10.0f} {r['pool_mib']:9.2f} {r['blocks']:7d} "
              f"{r['planned_tokens']:15,d} {r['max_resident']:13,d} {r['done']:5d}")


if __name__ == "__main__":
    main()
