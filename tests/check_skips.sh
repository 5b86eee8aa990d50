#!/usr/bin/env bash
# What a test run left out, and whether that was allowed (make test-c / test-python /
# sanitize call this on their logs). A skipped suite fails the run unless it is
#  - a CUDA test (ctest test_cuda_*, python/tests/test_gpu.py): these skip only when no GPU
#    (or no torch with CUDA) can run them, and this says so;
#  - a torch test (python/tests/test_torch_cpu.py, test_torch_ops.py) while torch is not
#    installed: torch is optional (`make venv-torch` installs it; MLAKV_REQUIRE_TORCH=1 makes
#    its absence a failure);
#  - a torch-op test whose C entry point the library does not export yet ("libmlakv does not
#    export mlakv_..."): listed and allowed.
# Anything else that skips (numpy / ml_dtypes / pytest / the CLI missing) is a failure: the
# test set-up should have provided it.
# usage: check_skips.sh ctest|pytest LOG
set -u
kind=${1:?usage: check_skips.sh ctest|pytest LOG}
log=${2:?}
[ -f "$log" ] || { echo "check_skips: no log $log"; exit 1; }
bad=0
allowed() { echo "  skipped (allowed): $*"; }
refused() { echo "  skipped (NOT allowed): $*"; bad=1; }

case $kind in
ctest)
    # "  7 - test_codecs_ref (Skipped)" in "The following tests did not run:"
    sed -n 's/^[[:space:]]*[0-9][0-9]* - \([^ ]*\) (Skipped).*/\1/p' "$log" | sort -u >"$log.skips"
    while read -r t; do
        case $t in
        test_cuda_*) allowed "$t (no usable GPU on this machine)" ;;
        *) refused "$t (see its output above)" ;;
        esac
    done <"$log.skips"
    grep -q 'test_cuda_' "$log" || echo "  CUDA tests: not built (library built without CUDA kernels)"
    n=$(wc -l <"$log.skips")
    rm -f "$log.skips"
    summary=$(grep -E '^[0-9]+% tests passed' "$log" | tail -1)
    echo "ctest: ${summary:-no summary line}; $n skipped"
    ;;
pytest)
    # -rs lines: "SKIPPED [3] python/tests/test_gpu.py:19: needs torch with CUDA ..."
    # summed per file and reason
    sed -n 's/^SKIPPED \[\([0-9]*\)\] \([^:]*\):[0-9]*: \(.*\)$/\1|\2|\3/p' "$log" |
        awk -F'|' '{ n[$2 "|" $3] += $1 } END { for (k in n) print n[k] "|" k }' | sort -t'|' -k2 >"$log.skips"
    while IFS='|' read -r count file reason; do
        f=$(basename "$file")
        case $f in
        test_gpu.py | test_torch_ops_gpu.py) allowed "$count in $f: $reason (GPU tests)" ;;
        test_torch_cpu.py | test_torch_ops.py)
            if [ "${MLAKV_REQUIRE_TORCH:-0}" != 1 ] && [[ $reason == *torch* ]]; then
                allowed "$count in $f: $reason (torch is optional: make venv-torch installs it)"
            elif [[ $reason == *"does not export"* ]]; then
                allowed "$count in $f: $reason (the library predates that entry point)"
            else
                refused "$count in $f: $reason"
            fi ;;
        *) refused "$count in $f: $reason" ;;
        esac
    done <"$log.skips"
    rm -f "$log.skips"
    summary=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|error)' "$log" | tail -1)
    echo "pytest: ${summary:-no summary line}"
    ;;
*) echo "check_skips: unknown kind $kind"; exit 2 ;;
esac
if [ $bad -ne 0 ]; then
    echo "$kind: FAILED: a suite that should have run was skipped (set-up missing?)"
    exit 1
fi
exit 0
