#!/usr/bin/env bash
# One device call for the whole GPU suite, from the repo root, over prebuilt programs:
#   bash bench/run_gpu_suite.sh BINDIR
# BINDIR holds libmlakv.so, mlakv (CLI), test_cuda_write, test_cuda_decode, test_cuda_gather,
# cuda_write, cuda_gather and cuda_decode (built with -DMLAKV_CUDA_ARCHS=90a; static cudart). Logs go to $OUT/gpu-suite.tgz
# (one archive), a summary is printed last.
# MLAKV_SUITE_SKIP='name|name|...' leaves steps out (pytest_gpu runs every Python test,
# pytest_gpu_files only the GPU files: skip one of the two).
# Steps: GPU tests (decode full, then each decode kernel forced; writer quick; gathers), compute-sanitizer memcheck +
# racecheck on small case sets, Python GPU tests, the benchmarks (and the writer's 64-token step, `cuda_write --step`).
set -u
BIN=$(cd "$1" && pwd)
OUT=${OUT:-out-gpu-suite}
LOG=$(mktemp -d)
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
summary=()
step() { # name, command...
    local name=$1; shift
    # MLAKV_SUITE_SKIP: an extended regex of step names not to run (a shorter call)
    if [[ -n ${MLAKV_SUITE_SKIP:-} && $name =~ ^(${MLAKV_SUITE_SKIP})$ ]]; then return; fi
    local t0=$(date +%s)
    timeout 300 "$@" >"$LOG/$name.log" 2>&1 # a hang costs 5 minutes, not the device budget
    local rc=$?
    local tail=$(grep -E "passed|failed|ERROR SUMMARY|RACECHECK SUMMARY" "$LOG/$name.log" | tail -1)
    summary+=("$(printf '%-22s rc=%-3s %4ss  %s' "$name" "$rc" $(( $(date +%s) - t0 )) "$tail")")
    # keep what has been measured so far under $OUT, in case a later step runs out of time
    printf '%s\n' "${summary[@]}" >"$OUT/summary.txt"
    tar -C "$LOG" -czf "$OUT/gpu-suite.tgz" .
}
mkdir -p "$OUT"
{ date -u; nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv,noheader
  git rev-parse HEAD 2>/dev/null; git status --short 2>/dev/null | head; } >"$LOG/env.txt" 2>&1

# most important first: a step cut off by the time limit loses only what follows it
step test_cuda_decode "$BIN/test_cuda_decode"
# every decode kernel forced on the cases it runs (the dispatch table picks per shape)
step test_decode_mma env MLAKV_TEST_KERNEL=mma "$BIN/test_cuda_decode"
step test_decode_wide env MLAKV_TEST_KERNEL=wide "$BIN/test_cuda_decode"
step test_decode_fp8_wgmma env MLAKV_TEST_KERNEL=fp8_wgmma "$BIN/test_cuda_decode"
step test_decode_narrow env MLAKV_TEST_SMALL_HEADS=1 MLAKV_TEST_KERNEL=narrow "$BIN/test_cuda_decode"
step test_decode_narrow_pairs env MLAKV_TEST_SMALL_HEADS=1 MLAKV_TEST_KERNEL=narrow MLAKV_TEST_NARROW_PAIRS=2 "$BIN/test_cuda_decode"
step pytest_gpu env MLAKV_LIBRARY="$BIN/libmlakv.so" MLAKV_CLI="$BIN/mlakv" python3 -m pytest -q -rs python/tests
# only the files that use the GPU (the rest is what CI runs)
step pytest_gpu_files env MLAKV_LIBRARY="$BIN/libmlakv.so" MLAKV_CLI="$BIN/mlakv" python3 -m pytest -q -rs python/tests/test_gpu.py python/tests/test_torch_ops_gpu.py python/tests/test_errors.py
step bench_cuda_decode "$BIN/cuda_decode"
step bench_cuda_decode_prefill "$BIN/cuda_decode" --prefill
step bench_python_overhead env MLAKV_LIBRARY="$BIN/libmlakv.so" PYTHONPATH=python python3 bench/python_overhead.py --device cuda
step example_serve_loop env MLAKV_LIBRARY="$BIN/libmlakv.so" PYTHONPATH=python python3 python/examples/serve_loop.py --device cuda --budget-mib 4096 --requests 64 --prompt 4096 --gen 64 --topk 2048
step bench_cuda_write "$BIN/cuda_write"
step bench_cuda_write_step "$BIN/cuda_write" --step
step test_cuda_gather "$BIN/test_cuda_gather"
step test_cuda_dcp "$BIN/test_cuda_dcp"
step test_cuda_dcp_nccl "$BIN/test_cuda_dcp_nccl"
step bench_cuda_gather "$BIN/cuda_gather"
step bench_cuda_dcp "$BIN/cuda_dcp"
step bench_cuda_write_accurate "$BIN/cuda_write" --big --accurate
step bench_cuda_write_scaled "$BIN/cuda_write" --big --accurate --latent-scale 0.0001
step test_cuda_write env MLAKV_CUDA_WRITE_QUICK=1 "$BIN/test_cuda_write"
step memcheck_write compute-sanitizer --tool memcheck --error-exitcode 9 env MLAKV_CUDA_WRITE_QUICK=1 MLAKV_CUDA_WRITE_MAX_N=20001 "$BIN/test_cuda_write"
step racecheck_write compute-sanitizer --tool racecheck --error-exitcode 9 env MLAKV_CUDA_WRITE_QUICK=1 MLAKV_CUDA_WRITE_MAX_N=257 "$BIN/test_cuda_write"
step memcheck_gather compute-sanitizer --tool memcheck --error-exitcode 9 env MLAKV_CUDA_GATHER_QUICK=1 MLAKV_CUDA_GATHER_MAX_N=5000 "$BIN/test_cuda_gather"
step memcheck_dcp compute-sanitizer --tool memcheck --error-exitcode 9 "$BIN/test_cuda_dcp"
step racecheck_gather compute-sanitizer --tool racecheck --error-exitcode 9 env MLAKV_CUDA_GATHER_QUICK=1 MLAKV_CUDA_GATHER_MAX_N=1000 "$BIN/test_cuda_gather"
for k in mma wide fp8_wgmma narrow; do
    step memcheck_decode_$k compute-sanitizer --tool memcheck --error-exitcode 9 env MLAKV_TEST_SMALL=1 MLAKV_TEST_KERNEL=$k "$BIN/test_cuda_decode"
    step racecheck_decode_$k compute-sanitizer --tool racecheck --error-exitcode 9 env MLAKV_TEST_SMALL=1 MLAKV_TEST_CASES=6 MLAKV_TEST_KERNEL=$k "$BIN/test_cuda_decode"
done
step memcheck_decode_narrow_pairs compute-sanitizer --tool memcheck --error-exitcode 9 env MLAKV_TEST_SMALL=1 MLAKV_TEST_SMALL_HEADS=1 MLAKV_TEST_KERNEL=narrow MLAKV_TEST_NARROW_PAIRS=2 "$BIN/test_cuda_decode"
step racecheck_decode_narrow_pairs compute-sanitizer --tool racecheck --error-exitcode 9 env MLAKV_TEST_SMALL=1 MLAKV_TEST_SMALL_HEADS=1 MLAKV_TEST_CASES=6 MLAKV_TEST_KERNEL=narrow MLAKV_TEST_NARROW_PAIRS=2 "$BIN/test_cuda_decode"

printf '%s\n' "${summary[@]}"
