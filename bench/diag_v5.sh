# Stage-removal timings of the v5 decode kernel (MLAKV_V5_DIAG bits, decode_sm90_direct.cuh) and an
# ncu profile of one launch (per-SASS stall samples), from the repo root: bash bench/diag_v5.sh [BIN]
B=${1:-.leadbin}; export LD_LIBRARY_PATH=$PWD/$B
run() { printf '%-24s ' "$1"; env $2 MLAKV_BENCH_SHAPE=$3 $B/cuda_decode; }
run "v3" "MLAKV_CUDA_DECODE_SM90=v3" 1,128,1,64
for d in 0 3 19 23 27 15 31 28 29 30; do run "v5 diag=$d" "MLAKV_CUDA_DECODE_SM90=v5 MLAKV_V5_DIAG=$d" 1,128,1,64; done
NCU=$(which ncu 2>/dev/null)
if [ -n "$NCU" ] && [ -n "${OUT:-}" ]; then
  MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=1,128,1,64 timeout 150 $NCU -k regex:decode90d -s 3 -c 1 --section WarpStateStats --section SourceCounters -o $OUT/v5 $B/cuda_decode > /dev/null 2>&1
  $NCU --import $OUT/v5.ncu-rep --page source --csv --print-source sass > $OUT/v5_sass.csv 2>&1
  ls -la $OUT; head -c 600 $OUT/v5_sass.csv
fi
