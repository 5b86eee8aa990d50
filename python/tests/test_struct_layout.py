"""The ctypes mirrors of the C structs (python/mlakv/_lib.py) have the layout of
include/mlakv.h: a C program compiled against the header prints sizeof and offsetof of every
field the Python side names, and sizeof and alignment of each struct; any difference (a field
added, removed, moved or retyped on either side) fails."""

import ctypes
import os
import shutil
import subprocess

import pytest

from mlakv import _lib

ROOT = _lib.repo_root()
STRUCTS = {  # C typedef -> ctypes mirror
    "mlakv_format_info": _lib.FormatInfoC,
    "mlakv_write_options": _lib.WriteOptionsC,
    "mlakv_cache": _lib.CacheC,
    "mlakv_decode_args": _lib.DecodeArgsC,
    "mlakv_model_info": _lib.ModelInfoC,
    "mlakv_capacity": _lib.CapacityC,
}


def _c_layout(tmp_path):
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.fail("no C compiler (cc / gcc / $CC) to check the struct layouts with")
    lines = ["#include <stddef.h>", "#include <stdio.h>", '#include "mlakv.h"',
             "int main(void) {"]
    for cname, py in STRUCTS.items():
        lines.append(f'  printf("{cname} sizeof %zu align %zu\\n", sizeof({cname}), '
                     f'_Alignof({cname}));')
        for field, _ in py._fields_:
            lines.append(f'  printf("{cname}.{field} %zu %zu\\n", offsetof({cname}, {field}), '
                         f'sizeof((({cname} *)0)->{field}));')
    lines += ["  return 0;", "}"]
    src = tmp_path / "layout.c"
    src.write_text("\n".join(lines) + "\n")
    exe = tmp_path / "layout"
    res = subprocess.run([cc, "-std=c11", "-I", os.path.join(ROOT, "include"), str(src), "-o",
                          str(exe)], capture_output=True, text=True)
    assert res.returncode == 0, "a field named in _lib.py is missing from mlakv.h:\n" + \
        res.stderr
    out = subprocess.run([str(exe)], capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines())


def test_ctypes_structs_match_header(tmp_path):
    c = _c_layout(tmp_path)
    bad = []
    for cname, py in STRUCTS.items():
        want = f"sizeof {ctypes.sizeof(py)} align {ctypes.alignment(py)}"
        if c[cname] != want:
            bad.append(f"{cname}: C {c[cname]}, ctypes {want} (a field added or removed?)")
        for field, ftype in py._fields_:
            got = f"{getattr(py, field).offset} {ctypes.sizeof(ftype)}"
            if c[f"{cname}.{field}"] != got:
                bad.append(f"{cname}.{field}: C offset/size {c[cname + '.' + field]}, ctypes "
                           f"{got}")
    assert not bad, "ctypes mirrors differ from include/mlakv.h:\n" + "\n".join(bad)
