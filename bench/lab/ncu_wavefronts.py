#!/usr/bin/env python3
"""Shared-memory traffic and instruction mix of one kernel, by SASS opcode, from an ncu source
page exported as CSV (`ncu --import R.ncu-rep --page source --csv --print-source sass`, plain or gzipped).

    python3 bench/lab/ncu_wavefronts.py kernel_sass.csv[.gz] [--per N]

Prints, per opcode: L1 shared-memory wavefronts (the L1/TEX data pipe, the unit the wide- and
narrow-head kernels run nearest to its limit), the part ncu calls excessive, executed warp
instructions and stall samples; --per N divides the counts by N (the launch's 64-record tiles,
e.g. 2048 for the narrow-head kernel at b=64 h=16: 128 CTAs x 16 tiles)."""
import argparse
import collections
import csv
import gzip
import io
import re
import sys

COLS = {
    "wf": "L1 Wavefronts Shared",
    "exc": "L1 Wavefronts Shared Excessive",
    "ideal": "L1 Wavefronts Shared Ideal",
    "instr": "Instructions Executed",
    "samples": "# Samples",
}


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def read_rows(path):
    raw = open(path, "rb").read()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    lines = io.StringIO(raw.decode("utf-8", "replace"))
    reader = csv.reader(lines)
    header = None
    for row in reader:  # the kernel-name line(s) come first, then the column header
        if "Source" in row and COLS["instr"] in row:
            header = row
            break
    if header is None:
        sys.exit(f"{path}: no ncu source-page header (export with --page source --csv --print-source sass)")
    missing = [c for c in COLS.values() if c not in header]
    if missing:
        sys.exit(f"{path}: columns missing: {', '.join(missing)} (profile with --section SourceCounters)")
    ix = {k: header.index(c) for k, c in COLS.items()}
    src = header.index("Source")
    for row in reader:
        if len(row) == len(header):
            yield row[src].strip(), {k: number(row[i]) for k, i in ix.items()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("csv")
    ap.add_argument("--per", type=float, default=1.0, help="divide counts by this (tiles)")
    ap.add_argument("--top", type=int, default=20, help="opcodes to list")
    a = ap.parse_args()
    agg = collections.defaultdict(lambda: collections.Counter())
    for source, v in read_rows(a.csv):
        m = re.match(r"(@!?U?P\w+\s+)?([A-Z0-9]+)", source)
        agg[m.group(2) if m else source].update(v)
    tot = collections.Counter()
    for v in agg.values():
        tot.update(v)
    if not tot["instr"]:
        sys.exit(f"{a.csv}: no executed instructions")
    p = a.per
    print(f"shared wavefronts {tot['wf'] / p:,.0f} (ideal {tot['ideal'] / p:,.0f}, excessive "
          f"{tot['exc'] / p:,.0f}), warp instructions {tot['instr'] / p:,.0f}"
          + (f", per {p:g}" if p != 1 else ""))
    print(f"{'opcode':<10} {'wavefronts':>12} {'share':>6} {'excessive':>11} {'instructions':>13} {'samples':>8}")
    order = sorted(agg.items(), key=lambda kv: (-kv[1]["wf"], -kv[1]["instr"]))
    for op, v in order[: a.top]:
        share = 100.0 * v["wf"] / tot["wf"] if tot["wf"] else 0.0
        print(f"{op:<10} {v['wf'] / p:>12,.0f} {share:>5.1f}% {v['exc'] / p:>11,.0f} "
              f"{v['instr'] / p:>13,.0f} {v['samples']:>8,.0f}")


if __name__ == "__main__":
    main()
