# v5 decode kernel (sm90/decode_sm90_direct.cuh), one device call from the repo root:
#   bash bench/diag_v5.sh [BIN]
# the test with v5 forced, A/B timings against v3, and
# stage-removal timings when BIN/diag holds a library built with -DMLAKV_V5_DIAG_KERNELS=1
# (MLAKV_V5_DIAG values 3 4 8 12 19 23 27 28 29 30 31 32 64 128 320 640 1024 2048 4096 12288
# 20480 36864 53248 65536 65538 131072 262144 524288 1048576 2097152, the bits in the kernel
# header; 4 / 8 / 12 and 4096 .. 53248 are NOTES D15's, 65536 .. 2097152 (record loads at other
# addresses) D17's; s5's two-pair values 4 8 12 16 130 131 156 160 at b=64 h=16).
B=${1:-.leadbin}
export LD_LIBRARY_PATH=$PWD/$B
printf 'test v5: '; MLAKV_CUDA_DECODE_SM90=v5 timeout 120 $B/test_cuda_decode 2>&1 | tail -1
run() { printf '%-30s ' "$1"; env $2 MLAKV_BENCH_SHAPE=$3 timeout 30 $B/cuda_decode; }
for shape in 1,128,1,64 1,128,2,128 1,64,1,64 1,1,1,64 2,128,1,64 3,128,1,64 3,128,2,128; do
  run "v3" "MLAKV_CUDA_DECODE_SM90=v3" $shape
  run "v5" "MLAKV_CUDA_DECODE_SM90=v5" $shape
done
if [ -f $B/diag/libmlakv.so ]; then
  export LD_LIBRARY_PATH=$PWD/$B/diag
  for d in 0 3 4 8 12 19 23 27 28 29 30 31 32 64 128 320 640 1024 2048 4096 12288 20480 36864 53248 \
           65536 65538 131072 262144 524288 1048576 2097152; do
    run "diag=$d" "MLAKV_V5_DIAG=$d MLAKV_CUDA_DECODE_SM90=v5" 1,128,1,64
  done
  for d in 0 4 8 12 16 130 131 156 160; do
    run "s5 diag=$d" "MLAKV_V5_DIAG=$d" 1,64,1,16
  done
  export LD_LIBRARY_PATH=$PWD/$B
fi
MLAKV_TEST_SMALL=1 MLAKV_CUDA_DECODE_SM90=v5 timeout 100 compute-sanitizer --tool memcheck $B/test_cuda_decode 2>&1 | tail -1
