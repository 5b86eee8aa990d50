# Stage-removal timings of the v5 decode kernel (MLAKV_V5_DIAG bits, decode_sm90_direct.cuh) and an
# ncu profile of one launch, from the repo root: bash bench/diag_v5.sh  (BIN: .leadbin)
B=.leadbin; export LD_LIBRARY_PATH=$PWD/$B
for d in 0 1 2 3 4 8 12 16 20 28 31; do printf 'diag=%-3s ' $d; MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=1,128,1,64 $B/cuda_decode; done
for d in 0 2; do printf 'ts diag=%-3s ' $d; MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=3,128,1,64 $B/cuda_decode; done
for d in 0 3 12; do printf 'h128 diag=%-3s ' $d; MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=1,128,2,128 $B/cuda_decode; done
which ncu || ls /usr/local/cuda/bin | grep -i ncu
NCU=$(which ncu 2>/dev/null || ls /usr/local/cuda*/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
if [ -n "$NCU" ] && [ -n "${OUT:-}" ]; then
  MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=1,128,1,64 timeout 120 $NCU -k regex:decode90d -s 3 -c 1 --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section SchedulerStats --section WarpStateStats --section SourceCounters $B/cuda_decode > $OUT/ncu_v5.txt 2>&1
  tail -5 $OUT/ncu_v5.txt
fi
