#!/usr/bin/env bash
# Small-head (<= 32 heads) CUDA decode variants on the device, in one go (< 150 s):
#   1. test_cuda_decode once per variant, small-head case set only (MLAKV_TEST_SMALL_HEADS=1,
#      MLAKV_CUDA_DECODE_SMALL=<variant>), the variants' processes side by side;
#   2. compute-sanitizer memcheck and racecheck on a reduced small-head set for each variant in
#      $SAN_VARIANTS (default: the first of $VARIANTS), at the same time as 1;
#   3. bench cuda_decode --small-variants alone on the GPU (every variant on the same inputs);
#   4. a summary table, printed last: variant, test result, memcheck, time (us) per shape.
# Usage (repo root): bench/run_decode_small_variants.sh BIN_DIR
#   BIN_DIR holds test_cuda_decode, cuda_decode (or bench/cuda_decode) and libmlakv.so.
#   $OUT (default /tmp/decode_small_variants) gets 3 files: logs.tgz (every log, refreshed after
#   each step), bench_small_variants.md and summary.txt. VARIANTS="base nk16" picks the set
#   (default and all: "base qreg nk16 nk16q tps2"; the one-launch variants fused / fusedco were
#   measured and removed: bench/NOTES_decode.md S2).
set -u
if [ $# -lt 1 ] || [ ! -d "$1" ]; then
    echo "usage: $0 BIN_DIR (with test_cuda_decode, cuda_decode, libmlakv.so)" >&2
    exit 2
fi
BIN=$(cd "$1" && pwd)
OUT=${OUT:-/tmp/decode_small_variants}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
RES=$OUT                 # what is kept
OUT=$(mktemp -d)         # the logs, packed into $RES/logs.tgz
pack() { tar -C "$OUT" -czf "$RES/logs.tgz" . 2>/dev/null; }
export LD_LIBRARY_PATH="$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
VARIANTS=${VARIANTS:-"base qreg nk16 nk16q tps2"}
SAN_VARIANTS=${SAN_VARIANTS:-${VARIANTS%% *}}
TEST="$BIN/test_cuda_decode"
BENCH="$BIN/cuda_decode"
[ -x "$BENCH" ] || BENCH="$BIN/bench/cuda_decode"
SAN=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
T0=$(date +%s)
echo "bin: $BIN  out: $OUT  variants: $VARIANTS  sanitizers on:$SAN_VARIANTS"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null | head -1

# 1 + 2: tests per variant and the memcheck run, concurrently (CPU references dominate)
pids=""
for v in $VARIANTS; do
    ( start=$(date +%s)
      MLAKV_TEST_SMALL_HEADS=1 MLAKV_CUDA_DECODE_SMALL=$v timeout 85 "$TEST" > "$OUT/test_$v.log" 2>&1
      echo "rc=$? seconds=$(( $(date +%s) - start ))" >> "$OUT/test_$v.log" ) &
    pids="$pids $!"
done
for v in $SAN_VARIANTS; do
    for tool in memcheck racecheck; do
        ( start=$(date +%s)
          MLAKV_TEST_SMALL=1 MLAKV_TEST_SMALL_HEADS=1 MLAKV_TEST_CASES=16 MLAKV_CUDA_DECODE_SMALL=$v \
              timeout 120 "$SAN" --tool $tool --error-exitcode 3 "$TEST" > "$OUT/${tool}_$v.log" 2>&1
          echo "rc=$? seconds=$(( $(date +%s) - start ))" >> "$OUT/${tool}_$v.log" ) &
        pids="$pids $!"
    done
done
for p in $pids; do wait "$p"; done
echo "tests + sanitizers: $(( $(date +%s) - T0 )) s"
pack

# 3: benchmark, alone on the GPU
MLAKV_BENCH_VARIANTS=$(echo $VARIANTS | tr ' ' ',') timeout 70 "$BENCH" --small-variants \
    "$RES/bench_small_variants.md" > "$OUT/bench.log" 2> "$OUT/bench.err"
echo "bench rc=$?: $(( $(date +%s) - T0 )) s"
pack

# 4: summary (also in $RES/summary.txt)
{
echo
echo "== test logs (last lines) =="
for v in $VARIANTS; do
    echo "-- $v: $(grep -E 'passed|failed|FAIL' "$OUT/test_$v.log" | tail -1) ($(tail -1 "$OUT/test_$v.log"))"
    grep -E 'FAIL|error' "$OUT/test_$v.log" | head -5
done
for v in $SAN_VARIANTS; do
    for tool in memcheck racecheck; do
        log="$OUT/${tool}_$v.log"
        echo "-- $tool $v: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)" \
             "$(grep -E 'passed' "$log" | tail -1) ($(tail -1 "$log"))"
    done
done
[ -s "$OUT/bench.err" ] && grep -v '^|' "$OUT/bench.err" | head -5
echo
echo "== summary (time in us per shape; n4 nvfp4_ds_mla, f8 fp8_ds_mla, rp nvfp4_fp8_rope, ts token_scale) =="
hdr=$(grep -E '^\| variant \| [a-z0-9]+ b' "$OUT/bench.log" | tail -1)
echo "| variant | test | checks ${hdr#| variant }"
for v in $VARIANTS; do
    log="$OUT/test_$v.log"
    rc=$(tail -1 "$log" | sed -E 's/^rc=([0-9]+).*/\1/')
    if [ "$rc" = "0" ]; then st=pass; elif [ "$rc" = "124" ]; then st=TIMEOUT; elif [ "$rc" = "77" ]; then st=SKIP-no-gpu; else st="FAIL($rc)"; fi
    checks=$(grep -oE '[0-9]+ passed, [0-9]+ failed' "$log" | tail -1 | sed -E 's/ passed, /\//; s/ failed//')
    row=$(awk -F'|' -v v="$v" '{a=$2; b=$3; gsub(/ /,"",a); gsub(/ /,"",b); if (a==v && b ~ /^[0-9.]+$/) print}' \
          "$OUT/bench.log" | tail -1)
    echo "| $v | $st | ${checks:-?} ${row#| $v }"
done
echo "total: $(( $(date +%s) - T0 )) s"
} 2>&1 | tee "$RES/summary.txt"
pack
