#!/usr/bin/env python3
"""SASS fingerprints of every kernel in a CUDA binary (no GPU needed): one line per (architecture,
kernel) with a hash of its instruction text (addresses and encodings stripped), its instruction
count and its mangled name. Two builds whose dispatched kernels have equal hashes run the same
machine code, so a source change that should not change code is checked without a benchmark.

    python3 bench/lab/sass_fingerprint.py build/libmlakv.so > after.txt   # needs cuobjdump
    diff before.txt after.txt

A change that renames kernels (namespaces, template names) changes every name but no code:
--compare pairs the kernels of two builds by hash instead of by name, per architecture, with
symbol names in the instruction text (call targets, relocations) replaced by a placeholder,
and reports every kernel left without an identical partner (exit status 1 if any). BEFORE and
AFTER are binaries or this script's earlier output.

    python3 bench/lab/sass_fingerprint.py --compare before/libmlakv.so build/libmlakv.so
"""
import collections
import hashlib
import re
import subprocess
import sys

ARCHS = ("sm_80", "sm_90a")

# symbol names inside instruction text: mangled C++ names and cuobjdump's `(name) operands
SYMBOL = re.compile(r"_Z[\w$.]+|`\([^)]*\)")


def fingerprints(binary, normalize=False):
    rows = []
    for arch in ARCHS:
        out = subprocess.run(["cuobjdump", "-sass", "-arch", arch, binary],
                             capture_output=True, text=True).stdout
        name, body = None, []
        for line in out.splitlines() + ["Function : <end>"]:
            m = re.search(r"Function : (\S+)", line)
            if m:
                if name is not None:
                    digest = hashlib.sha1("\n".join(body).encode()).hexdigest()[:16]
                    rows.append((arch, digest, len(body), name))
                name, body = m.group(1), []
                continue
            m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?);?\s*/\*", line)
            if m and name is not None:
                text = m.group(1).strip()
                body.append(SYMBOL.sub("<sym>", text) if normalize else text)
    return sorted(rows, key=lambda r: (r[0], r[3]))


def load(path):
    """Fingerprint rows of a binary (symbol names normalized) or of a saved listing."""
    with open(path, "rb") as f:
        head = f.read(4)
    if head == b"\x7fELF" or path.endswith((".so", ".cubin", ".o", ".a")) or "." not in path:
        return fingerprints(path, normalize=True)
    rows = []
    with open(path) as f:
        for line in f:
            parts = line.split()
            if len(parts) == 4:
                rows.append((parts[0], parts[1], int(parts[2]), parts[3]))
    return rows


def compare(before_path, after_path):
    before, after = load(before_path), load(after_path)
    unmatched = 0
    for arch in sorted({r[0] for r in before} | {r[0] for r in after}):
        pool = collections.defaultdict(list)
        for r in before:
            if r[0] == arch:
                pool[(r[1], r[2])].append(r[3])
        n_after = sum(1 for r in after if r[0] == arch)
        n_before = sum(len(v) for v in pool.values())
        same, extra = 0, []
        for r in after:
            if r[0] != arch:
                continue
            if pool[(r[1], r[2])]:
                pool[(r[1], r[2])].pop()
                same += 1
            else:
                extra.append(r)
        missing = [(k, n) for k, names in pool.items() for n in names]
        print(f"{arch}: {same} of {max(n_before, n_after)} kernels identical "
              f"(before {n_before}, after {n_after})")
        for (digest, count), name in sorted(missing, key=lambda x: x[1]):
            print(f"  only before: {digest} {count} {name}")
        for r in sorted(extra, key=lambda x: x[3]):
            print(f"  only after:  {r[1]} {r[2]} {r[3]}")
        unmatched += len(missing) + len(extra)
    return unmatched


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":
        sys.exit(1 if compare(sys.argv[2], sys.argv[3]) else 0)
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    for row in fingerprints(sys.argv[1]):
        print(*row)
