#!/usr/bin/env python3
"""SASS fingerprints of every kernel in a CUDA binary (no GPU needed): one line per (architecture,
kernel) with a hash of its instruction text (addresses and encodings stripped), its instruction
count and its mangled name. Two builds whose dispatched kernels have equal hashes run the same
machine code, so a source change that should not change code is checked without a benchmark.

    python3 bench/lab/sass_fingerprint.py build/libmlakv.so > after.txt   # needs cuobjdump
    diff before.txt after.txt
"""
import hashlib
import re
import subprocess
import sys

ARCHS = ("sm_80", "sm_90a")


def fingerprints(binary):
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
                body.append(m.group(1).strip())
    return sorted(rows, key=lambda r: (r[0], r[3]))


if __name__ == "__main__":
    for row in fingerprints(sys.argv[1]):
        print(*row)
