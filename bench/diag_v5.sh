# v5 decode kernel (sm90/decode_sm90_direct.cuh), one device call from the repo root:
#   bash bench/diag_v5.sh [BIN]
# tests with each S chain count, A/B timings against v3, and stage-removal timings from a build
# with -DMLAKV_V5_DIAG_KERNELS=1 in BIN/diag (MLAKV_V5_DIAG bits, see the kernel header).
B=${1:-.leadbin}
export LD_LIBRARY_PATH=$PWD/$B
for sch in 1; do
  printf 'test v5 sch=%s: ' $sch; MLAKV_V5_SCH=$sch MLAKV_CUDA_DECODE_SM90=v5 timeout 120 $B/test_cuda_decode 2>&1 | tail -1
done
run() { printf '%-30s ' "$1"; env $2 MLAKV_BENCH_SHAPE=$3 $B/cuda_decode; }
for shape in 1,128,1,64 1,128,2,128 1,64,1,64 1,1,1,64 2,128,1,64 3,128,1,64 3,128,2,128; do
  run "v3" "MLAKV_CUDA_DECODE_SM90=v3" $shape
  for sch in 1 2; do run "v5 sch=$sch" "MLAKV_V5_SCH=$sch MLAKV_CUDA_DECODE_SM90=v5" $shape; done
done
if [ -f $B/diag/libmlakv.so ]; then
  export LD_LIBRARY_PATH=$PWD/$B/diag
  for d in 3 19 27; do for sch in 1 2; do run "diag=$d sch=$sch" "MLAKV_V5_SCH=$sch MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5" 1,128,1,64; done; done
  for d in 23 28 29 30 31; do run "diag=$d sch=1" "MLAKV_V5_SCH=1 MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5" 1,128,1,64; done
  export LD_LIBRARY_PATH=$PWD/$B
fi
MLAKV_TEST_SMALL=1 MLAKV_CUDA_DECODE_SM90=v5 timeout 100 compute-sanitizer --tool memcheck $B/test_cuda_decode 2>&1 | tail -1
