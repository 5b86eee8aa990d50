# Per-SASS-instruction ncu profile (stall samples, executed instructions) of one v5 decode launch
# at nvfp4_ds_mla b=128 h=64, from the repo root: OUT=dir bash bench/ncu_v5.sh [BIN]
B=${1:-.leadbin}
export LD_LIBRARY_PATH=$PWD/$B
NCU=$(which ncu)
MLAKV_CUDA_DECODE_SM90=v5 MLAKV_BENCH_SHAPE=1,128,1,64 timeout 150 $NCU -k regex:decode90d -s 3 -c 1 --section WarpStateStats --section SourceCounters --section SchedulerStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables -o $OUT/v5 $B/cuda_decode > $OUT/ncu_log.txt 2>&1
$NCU --import $OUT/v5.ncu-rep --page source --csv --print-source sass > $OUT/v5_sass.csv 2>&1
$NCU --import $OUT/v5.ncu-rep > $OUT/v5_details.txt 2>&1
# shared-memory wavefronts and instructions by opcode, per 64-record tile (b=128 h=64: 128 CTAs x 32 tiles)
python3 bench/ncu_wavefronts.py $OUT/v5_sass.csv --per 4096 > $OUT/v5_wavefronts.txt 2>&1
rm -f $OUT/v5.ncu-rep
ls -la $OUT
