#!/usr/bin/env python3
"""Where a kernel waits on its load scoreboards, read from the SASS (no GPU needed).

ptxas tracks variable-latency results (global and local loads, shared-memory loads, ...) with six
scoreboards per warp; an instruction that needs a result waits until the whole scoreboard is
clear. When the record loads of two tiles share one scoreboard, using the older tile's registers
waits for the newer tile's loads too. This prints, for one kernel,
each instruction's control bits (stall cycles, the scoreboard it sets on write W# and on read R#,
the scoreboards it waits for w#) or, with --flow, a compressed listing: runs of global loads
(LDG.idx = 32-bit, LDG.rec = wider), shared stores, spills, barriers and every wait on one
scoreboard.

Usage (cuobjdump comes with the CUDA toolkit, or from the PyPI wheel nvidia-cuda-cuobjdump):
  nvcc -O3 -arch=sm_90a -std=c++17 --expt-relaxed-constexpr -cubin -Iinclude -Isrc \
      src/cuda/decode/wide/instantiations/nvfp4_ds_mla.cu -o k.cubin
  cuobjdump -sass k.cubin > k.sass
  bench/lab/sass_scoreboards.py k.sass 4wide6kernelILi1E [--flow [--sb 5] [--from ADDR]]

(mangled names: mlakv::decode::wide::kernel<1> is _ZN5mlakv6decode4wide6kernelILi1EEEv...)

Control bits (Volta and later, 128-bit instructions): bits 105-108 stall, 109 yield, 110-112
write scoreboard, 113-115 read scoreboard, 116-121 wait mask (7 = none).
"""
import argparse
import re


def annotate(path, want):
    """[(address, stall, write_sb, read_sb, wait_mask, text)] of the kernels whose name contains want"""
    lines = open(path).read().split('\n')
    out, on, i = [], False, 0
    while i < len(lines):
        m = re.search(r'Function : (\S+)', lines[i])
        if m:
            on = want in m.group(1)
        m = re.match(r'\s+/\*([0-9a-f]{4,6})\*/\s+(.*?);\s+/\* (0x[0-9a-f]+) \*/', lines[i])
        if m and on and i + 1 < len(lines):
            hi = int(re.search(r'/\* (0x[0-9a-f]+) \*/', lines[i + 1]).group(1), 16)
            c = hi >> 41
            out.append((int(m.group(1), 16), c & 15, (c >> 5) & 7, (c >> 8) & 7, (c >> 11) & 63,
                        m.group(2).strip()))
            i += 2
            continue
        i += 1
    return out


def kind(text):
    if 'LDG' in text:
        return 'LDG.idx' if re.search(r'LDG\.E(\.CONSTANT)? R', text) else 'LDG.rec'
    if 'LDL' in text or 'STL' in text:
        return 'SPILL'
    if 'STS' in text:
        return 'STS'
    if 'BAR.' in text or 'MEMBAR' in text or 'SETMAXREG' in text:
        return text.split(' ', 1)[0] if not text.startswith('@') else text.split(' ', 2)[1]
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('sass')
    ap.add_argument('kernel', help='substring of the mangled kernel name')
    ap.add_argument('--flow', action='store_true')
    ap.add_argument('--sb', type=int, default=5, help='scoreboard whose waits --flow prints')
    ap.add_argument('--from', dest='start', default='0', help='first address (hex) for --flow')
    a = ap.parse_args()
    ins = annotate(a.sass, a.kernel)
    if not a.flow:
        for addr, st, wb, rb, wm, t in ins:
            w = 'w' + ''.join(str(k) for k in range(6) if wm >> k & 1) if wm else ''
            print(f"{addr:05x} st{st:2d} {'W%d' % wb if wb != 7 else '  '} "
                  f"{'R%d' % rb if rb != 7 else '  '} {w:7s} {t}")
        return
    start, prev, n, first = int(a.start, 16), None, 0, 0
    for addr, st, wb, rb, wm, t in ins:
        if addr < start:
            continue
        if wm >> a.sb & 1:
            if prev:
                print(f"{first:05x} {prev} x{n}")
            prev = None
            print(f"{addr:05x} ---- wait sb{a.sb}: {t[:70]}")
        k = kind(t)
        if k == prev:
            n += 1
            continue
        if prev:
            print(f"{first:05x} {prev} x{n}")
        prev, n, first = k, 1, addr
    if prev:
        print(f"{first:05x} {prev} x{n}")


if __name__ == '__main__':
    main()
