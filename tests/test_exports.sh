#!/usr/bin/env bash
# The shared library exports exactly the functions include/mlakv.h declares with MLAKV_API:
# nothing internal leaks (the library is built with hidden visibility) and no public function
# lacks the attribute.
# usage: test_exports.sh NM LIBMLAKV.so MLAKV.h
set -u
NM=${1:?usage: test_exports.sh NM LIBMLAKV.so MLAKV.h}
LIB=${2:?}
HDR=${3:?}
declared=$(sed -n 's/^MLAKV_API .*\b\(mlakv_[a-z0-9_]*\)(.*/\1/p' "$HDR" | sort -u)
exported=$("$NM" -D --defined-only "$LIB" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort -u)
if [ -z "$declared" ]; then echo "no MLAKV_API declarations found in $HDR"; exit 1; fi
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
status=0
if [ -n "$extra" ]; then
    echo "exported but not declared MLAKV_API in mlakv.h:"; echo "$extra" | sed 's/^/  /'; status=1
fi
if [ -n "$missing" ]; then
    echo "declared MLAKV_API but not exported:"; echo "$missing" | sed 's/^/  /'; status=1
fi
[ $status -eq 0 ] && echo "$(echo "$exported" | wc -l) symbols exported, all declared in mlakv.h"
exit $status
