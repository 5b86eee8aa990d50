# Per-SASS-instruction ncu profile (stall samples, executed instructions) of one s5 decode launch
# at nvfp4_ds_mla b=64 h=16 (two producer pairs), from the repo root: OUT=dir bash bench/ncu_s5.sh [BIN]
# NCU_CLOCK=none profiles at the GPU's own clock (ncu locks it to base by default)
B=${1:-.leadbin}
export LD_LIBRARY_PATH=$PWD/$B
NCU=$(which ncu)
MLAKV_BENCH_SHAPE=1,64,1,16 timeout 150 $NCU --clock-control ${NCU_CLOCK:-base} -k regex:decode90s -s 3 -c 1 --section WarpStateStats --section SourceCounters --section SchedulerStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables -o $OUT/s5 $B/cuda_decode > $OUT/ncu_log.txt 2>&1
$NCU --import $OUT/s5.ncu-rep --page source --csv --print-source sass > $OUT/s5_sass.csv 2>&1
$NCU --import $OUT/s5.ncu-rep > $OUT/s5_details.txt 2>&1
# shared-memory wavefronts and instructions by opcode, per 64-record tile (b=64 h=16: 128 CTAs x 16 tiles)
python3 bench/ncu_wavefronts.py $OUT/s5_sass.csv --per 2048 > $OUT/s5_wavefronts.txt 2>&1
rm -f $OUT/s5.ncu-rep
ls -la $OUT
