#!/usr/bin/env python3
"""Toy sparse-MLA decode loop over a paged mlakv cache.

Each of `--batch` sequences gets a prefill of random tokens, then `--steps` decode steps; every
step appends one token per sequence to the paged cache (mlakv.write with a block table built
from a shuffled free list) and attends over the top-k candidates a toy indexer picks
(mlakv.sparse_decode). It prints the tokens/s of the mlakv calls and the error of the output
against the same attention computed in fp32 over an unquantized bf16 copy of the cache.

    PYTHONPATH=python python3 python/examples/decode_loop.py                 # CPU, numpy
    PYTHONPATH=python python3 python/examples/decode_loop.py --device cuda   # torch tensors

numpy is required; torch only for --device cuda (auto picks CUDA when torch sees a GPU).
"""

import argparse
import math
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import mlakv  # noqa: E402


def bf16_bits(x):
    """float32 -> bf16 bit patterns (round to nearest even)."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32)
    return ((u + (0x7FFF + ((u >> 16) & 1))) >> 16).astype(np.uint16)  # finite inputs only


def bits_to_f32(b):
    return (np.asarray(b, dtype=np.uint32) << 16).view(np.float32)


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--format", default="nvfp4_ds_mla",
                    help="record format(s), comma-separated (see `mlakv formats`)")
    ap.add_argument("--batch", type=int, default=None, help="sequences (cpu 4, cuda 32)")
    ap.add_argument("--heads", type=int, default=None, help="query heads (cpu 16, cuda 128)")
    ap.add_argument("--prefill", type=int, default=None, help="prompt tokens (cpu 1024, cuda 4096)")
    ap.add_argument("--steps", type=int, default=32, help="decode steps")
    ap.add_argument("--topk", type=int, default=None, help="candidates per query (cpu 256, cuda 2048)")
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--sm-scale", type=float, default=0.13523)
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args()


class Toy:
    """Random tokens and queries: each query head aims at a few earlier tokens (so attention is
    peaked and top-k selection matters), the rest is noise. Host data in numpy."""

    def __init__(self, args, rng):
        self.a = args
        total = args.prefill + args.steps
        scale = np.exp2(rng.uniform(-2, 0, size=(args.batch, total, 1))).astype(np.float32)
        kv = rng.standard_normal((args.batch, total, 576), dtype=np.float32) * scale
        self.k_bits = bf16_bits(kv)                      # what the engine hands the writer
        self.k_f32 = bits_to_f32(self.k_bits)            # the bf16 "unquantized cache"

    def query(self, ctx, rng):
        a = self.a
        tgt = rng.integers(0, ctx, size=(a.batch, a.heads, 4))
        keys = self.k_f32[np.arange(a.batch)[:, None, None], tgt]      # [B, H, 4, 576]
        q = keys.sum(axis=2) * 0.15 + 0.5 * rng.standard_normal((a.batch, a.heads, 576))
        return bf16_bits(q)


class NumpyOps:
    """Indexer and fp32 reference attention over the bf16 keys, in numpy."""

    def __init__(self, k_f32):
        self.k = k_f32                                   # [B, total, 576]

    def topk(self, q_f32, ctx, topk):
        """positions [B, topk] (-1 where ctx < topk) of the largest head-averaged scores."""
        B = q_f32.shape[0]
        score = np.einsum("bd,bcd->bc", q_f32.mean(axis=1), self.k[:, :ctx])
        k = min(topk, ctx)
        top = np.argpartition(-score, k - 1, axis=1)[:, :k] if k < ctx else \
            np.tile(np.arange(ctx), (B, 1))
        pos = np.full((B, topk), -1, dtype=np.int64)
        pos[:, :k] = top
        return pos

    def reference(self, q_f32, pos, sm_scale):
        """q [B, H, 576], pos [B, topk] (-1 invalid) -> fp32 attention [B, H, 512]."""
        B = q_f32.shape[0]
        out = np.zeros((B, q_f32.shape[1], 512), dtype=np.float32)
        for b in range(B):
            K = self.k[b, pos[b][pos[b] >= 0]]
            s = (q_f32[b] @ K.T) * np.float32(sm_scale)
            s -= s.max(axis=1, keepdims=True)
            p = np.exp(s)
            p /= p.sum(axis=1, keepdims=True)
            out[b] = p @ K[:, :512]
        return out


class TorchOps:
    """The same on the GPU, in torch float32."""

    def __init__(self, k_f32, dev):
        import torch
        self.t = torch
        self.k = torch.from_numpy(k_f32).to(dev)
        self.dev = dev

    def topk(self, q_f32, ctx, topk):
        t = self.t
        q = t.from_numpy(q_f32).to(self.dev)
        score = t.einsum("bd,bcd->bc", q.mean(dim=1), self.k[:, :ctx])
        k = min(topk, ctx)
        pos = t.full((q.shape[0], topk), -1, dtype=t.int64, device=self.dev)
        pos[:, :k] = t.topk(score, k, dim=1).indices
        return pos.cpu().numpy()

    def reference(self, q_f32, pos, sm_scale):
        t = self.t
        q = t.from_numpy(q_f32).to(self.dev)
        p_t = t.from_numpy(pos).to(self.dev)
        valid = p_t >= 0
        K = self.k[t.arange(q.shape[0], device=self.dev)[:, None], p_t.clamp(min=0)]
        s = t.einsum("bhd,btd->bht", q, K) * sm_scale
        s = s.masked_fill(~valid[:, None, :], float("-inf"))
        p = t.softmax(s, dim=2)
        return t.einsum("bht,btd->bhd", p, K[..., :512]).cpu().numpy()


def run(args, device, fmt, toy, rng):
    B, bs = args.batch, args.block_size
    total = args.prefill + args.steps
    blocks_per_seq = math.ceil(total / bs)
    num_blocks = B * blocks_per_seq
    cache = mlakv.PagedCache(fmt, num_blocks, bs, device=device)
    block_table = rng.permutation(num_blocks).reshape(B, blocks_per_seq)  # paged, not contiguous
    slot_table = (block_table[:, np.arange(total) // bs] * bs +
                  np.arange(total) % bs).astype(np.int64)                # [B, total] flat slots

    cuda = device != "cpu"
    if cuda:
        import torch
        torch.backends.cuda.matmul.allow_tf32 = False
        dev = torch.device(device)
        ops = TorchOps(toy.k_f32, dev)
        k_dev = torch.from_numpy(toy.k_bits.view(np.int16)).to(dev).view(torch.bfloat16)
        slot_dev = torch.from_numpy(slot_table).to(dev)
        sync = torch.cuda.synchronize
    else:
        ops = NumpyOps(toy.k_f32)
        sync = lambda: None  # noqa: E731

    # prefill: one write of all prompt tokens
    if cuda:
        kv = k_dev[:, :args.prefill].reshape(-1, 576)
        sm = slot_dev[:, :args.prefill].reshape(-1)
    else:
        kv = toy.k_bits[:, :args.prefill].reshape(-1, 576)
        sm = slot_table[:, :args.prefill].reshape(-1)
    sync()
    t0 = time.perf_counter()
    mlakv.write(kv[:, :512], kv[:, 512:], cache, sm)
    sync()
    t_prefill = time.perf_counter() - t0

    t_write = t_decode = 0.0
    errs, coss = [], []
    for step in range(args.steps):
        pos = args.prefill + step
        ctx = pos + 1
        q_bits = toy.query(ctx, rng)
        q_f32 = bits_to_f32(q_bits)
        pos_idx = ops.topk(q_f32, ctx, args.topk)        # toy indexer
        flat = np.where(pos_idx >= 0,
                        np.take_along_axis(slot_table, np.maximum(pos_idx, 0), axis=1),
                        -1).astype(np.int32)
        if cuda:
            q_in = torch.from_numpy(q_bits.view(np.int16)).to(dev).view(torch.bfloat16)
            idx_in = torch.from_numpy(flat).to(dev)
            new, slots_new = k_dev[:, pos], slot_dev[:, pos].contiguous()
        else:
            q_in, idx_in = q_bits, flat
            new, slots_new = toy.k_bits[:, pos], slot_table[:, pos].copy()
        sync()
        t0 = time.perf_counter()
        mlakv.write(new[:, :512], new[:, 512:], cache, slots_new)
        sync()
        t1 = time.perf_counter()
        out, lse = mlakv.sparse_decode(q_in, cache, idx_in, sm_scale=args.sm_scale)
        sync()
        t2 = time.perf_counter()
        out_f32 = out.float().cpu().numpy() if cuda else bits_to_f32(out)
        t_write += t1 - t0
        t_decode += t2 - t1
        ref = ops.reference(q_f32, pos_idx, args.sm_scale)
        diff = np.linalg.norm((out_f32 - ref).reshape(B, -1), axis=1)
        errs.append(np.max(diff / np.linalg.norm(ref.reshape(B, -1), axis=1)))
        cos = np.sum(out_f32 * ref, axis=2) / (
            np.linalg.norm(out_f32, axis=2) * np.linalg.norm(ref, axis=2) + 1e-30)
        coss.append(np.min(cos))

    # steady state: the last step's write + decode repeated back to back (no host sync in
    # between; on CUDA one sync at the end), i.e. what the library sustains per decode step
    reps = 20
    sync()
    t0 = time.perf_counter()
    for _ in range(reps):
        mlakv.write(new[:, :512], new[:, 512:], cache, slots_new)
        mlakv.sparse_decode(q_in, cache, idx_in, sm_scale=args.sm_scale, out=out, lse=lse)
    sync()
    t_rep = (time.perf_counter() - t0) / reps

    tokens = B * args.steps
    info = mlakv.format_info(fmt)
    print(f"mlakv {mlakv.version()} ({mlakv.library_path()})")
    print(f"device {device}, format {info.name} ({info.record_bytes} B/token), batch {B}, "
          f"heads {args.heads}, context {args.prefill}..{total}, topk {args.topk}, "
          f"block size {bs}, {num_blocks} blocks")
    print(f"prefill write: {B * args.prefill} tokens in {t_prefill * 1e3:.2f} ms "
          f"({B * args.prefill / t_prefill:,.0f} tokens/s)")
    print(f"decode loop: {tokens} tokens in {args.steps} steps; mlakv write "
          f"{t_write / args.steps * 1e6:.1f} us/step, sparse_decode "
          f"{t_decode / args.steps * 1e6:.1f} us/step (host-synchronized wall time)")
    print(f"tokens/s (write + decode, synchronized per call): "
          f"{tokens / (t_write + t_decode):,.0f}")
    print(f"tokens/s (write + decode back to back, {reps} reps at context {total}): "
          f"{B / t_rep:,.0f} ({t_rep * 1e6:.1f} us/step)")
    print(f"error vs fp32 attention over the bf16 cache: rel L2 max {max(errs):.4f}, "
          f"mean {np.mean(errs):.4f}; min cosine {min(coss):.5f}")
    return max(errs)


def main():
    args = parse()
    device = args.device
    if device == "auto":
        device = "cpu"
        try:
            import torch
            if torch.cuda.is_available() and mlakv.cuda_compiled():
                device = "cuda"
        except ImportError:
            pass
    if device == "cuda":
        device = "cuda:0"
    gpu = device != "cpu"
    args.batch = args.batch or (32 if gpu else 4)
    args.heads = args.heads or (128 if gpu else 16)
    args.prefill = args.prefill or (4096 if gpu else 1024)
    args.topk = args.topk or (2048 if gpu else 256)
    rng = np.random.default_rng(args.seed)
    toy = Toy(args, rng)
    for fmt in args.format.split(","):
        run(args, device, fmt.strip(), toy, np.random.default_rng([args.seed, 1]))
        print()


if __name__ == "__main__":
    main()
