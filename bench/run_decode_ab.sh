#!/usr/bin/env bash
# A/B timing of decode kernel choices on chosen shapes, in one device call, from the repo root:
#   bash bench/run_decode_ab.sh BINDIR "MLAKV_BENCH_KERNEL=mma" "-" -- "fmt,b,s_q,heads" ...
# Each setting (comma-separated environment assignments, "-" for none) runs every shape through
# `cuda_decode` with MLAKV_BENCH_SHAPE (fmt: 0 fp8_ds_mla, 1 nvfp4_ds_mla, 2 nvfp4_fp8_rope,
# 3 nvfp4_fp8_rope_token_scale); one line per (shape, setting) on stdout.
set -u
BIN=$(cd "$1" && pwd); shift
export LD_LIBRARY_PATH=$BIN${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
sets=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do sets+=("$1"); shift; done
shift
for shape in "$@"; do
    for s in "${sets[@]}"; do
        envs=()
        [ "$s" != "-" ] && IFS=, read -ra envs <<<"$s"
        printf '%-34s ' "$s"
        env "${envs[@]}" MLAKV_BENCH_SHAPE="$shape" "$BIN/cuda_decode"
    done
done
