#!/usr/bin/env bash
# The shared library exports exactly the functions the public headers (include/mlakv.h and
# include/mlakv_experimental.h) declare with MLAKV_API: nothing internal leaks (the library is
# built with hidden visibility) and no public function lacks the attribute.
# usage: test_exports.sh NM LIBMLAKV.so HEADER...
set -u
NM=${1:?usage: test_exports.sh NM LIBMLAKV.so HEADER...}
LIB=${2:?}
shift 2
HDR="$*"
declared=$(sed -n 's/^MLAKV_API .*\b\(mlakv_[a-z0-9_]*\)(.*/\1/p' "$@" | sort -u)
exported=$("$NM" -D --defined-only "$LIB" | awk '$2 ~ /^[TDBRVWiu]$/ {print $3}' | sort -u)
if [ -z "$declared" ]; then echo "no MLAKV_API declarations found in $HDR"; exit 1; fi
extra=$(comm -13 <(echo "$declared") <(echo "$exported"))
missing=$(comm -23 <(echo "$declared") <(echo "$exported"))
status=0
if [ -n "$extra" ]; then
    echo "exported but not declared MLAKV_API in $HDR:"; echo "$extra" | sed 's/^/  /'; status=1
fi
if [ -n "$missing" ]; then
    echo "declared MLAKV_API but not exported:"; echo "$missing" | sed 's/^/  /'; status=1
fi
[ $status -eq 0 ] && echo "$(echo "$exported" | wc -l) symbols exported, all declared in the public headers"
exit $status
