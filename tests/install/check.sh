#!/usr/bin/env bash
# Install a built tree into a temporary prefix and build an external program against it, the
# two ways a C user would: CMake's find_package(mlakv CONFIG) and pkg-config. Checks the
# installed files (header, versioned library with its SONAME, package files), the exported
# symbols, runs both programs (write + read + decode round trip), then moves the prefix and
# builds again (both package files are relocatable).
# usage: tests/install/check.sh BUILD_DIR   (make install-check)
set -euo pipefail
BUILD=$(cd "${1:?usage: check.sh BUILD_DIR}" && pwd)
HERE=$(cd "$(dirname "$0")" && pwd)
SRC=$(cd "$HERE/../.." && pwd)
CC=${CC:-cc}
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
t0=$(date +%s%N)
ms() { echo $((($(date +%s%N) - t0) / 1000000)); }
die() { echo "install-check: FAILED: $*" >&2; exit 1; }
command -v pkg-config >/dev/null || die "pkg-config not found (apt-get install pkg-config)"

prefix=$TMP/prefix
cmake --install "$BUILD" --prefix "$prefix" >"$TMP/install.log" || { cat "$TMP/install.log"; die "cmake --install"; }
echo "installed into a temporary prefix ($(ms) ms):"
(cd "$prefix" && find . -type f -o -type l | sort | sed 's/^\.\//  /')

so=$(find "$prefix" -name 'libmlakv.so.*.*.*' -type f | head -1)
[ -n "$so" ] || die "no versioned libmlakv.so.X.Y.Z installed"
libdir=$(dirname "$so")
[ -f "$prefix/include/mlakv.h" ] || die "no include/mlakv.h"
soname=$(readelf -d "$so" | sed -n 's/.*SONAME.*\[\(.*\)\]/\1/p')
[ -n "$soname" ] && [ -e "$libdir/$soname" ] || die "SONAME '$soname' of $so not installed next to it"
[ -e "$libdir/libmlakv.so" ] || die "no libmlakv.so development link"
[ -f "$libdir/cmake/mlakv/mlakvConfig.cmake" ] && [ -f "$libdir/cmake/mlakv/mlakvConfigVersion.cmake" ] ||
    die "no mlakvConfig.cmake / mlakvConfigVersion.cmake"
[ -f "$libdir/pkgconfig/mlakv.pc" ] || die "no mlakv.pc"
echo "SONAME $soname"
[ -f "$prefix/include/mlakv_experimental.h" ] || die "no include/mlakv_experimental.h"
bash "$SRC/tests/test_exports.sh" "${NM:-nm}" "$so" "$prefix/include/mlakv.h" \
    "$prefix/include/mlakv_experimental.h" || die "exported symbols"

build_both() { # PREFIX LABEL
    local p=$1 label=$2
    local b=$TMP/cmake-$label
    cmake -S "$HERE" -B "$b" -DCMAKE_PREFIX_PATH="$p" -DCMAKE_BUILD_TYPE=Release >"$b.log" 2>&1 ||
        { cat "$b.log"; die "find_package build ($label): configure"; }
    grep -m1 'mlakv .* from' "$b.log" | sed 's/^-- /find_package: /'
    cmake --build "$b" >>"$b.log" 2>&1 || { cat "$b.log"; die "find_package build ($label): build"; }
    "$b/roundtrip" || die "find_package program ($label)"

    local pc="PKG_CONFIG_PATH=$(dirname "$(find "$p" -name mlakv.pc)")"
    local flags ldir
    flags=$(env "$pc" pkg-config --cflags --libs mlakv) || die "pkg-config mlakv ($label)"
    ldir=$(env "$pc" pkg-config --variable=libdir mlakv)
    echo "pkg-config: $flags"
    # shellcheck disable=SC2086
    "$CC" -std=c11 -O2 -o "$TMP/roundtrip-pc-$label" "$HERE/roundtrip.c" $flags -lm ||
        die "pkg-config build ($label)"
    LD_LIBRARY_PATH="$ldir" "$TMP/roundtrip-pc-$label" || die "pkg-config program ($label)"
}
build_both "$prefix" installed
mv "$prefix" "$TMP/moved"
echo "prefix moved: building again"
build_both "$TMP/moved" moved
echo "install-check: passed ($(ms) ms)"
