"""The example runs on the CPU (small sizes) and reports tokens/s and a sane error vs bf16."""

import os
import re
import subprocess
import sys

import mlakv

EXAMPLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                       "decode_loop.py")


def test_decode_loop_example_cpu():
    env = dict(os.environ)
    env.setdefault("MLAKV_LIBRARY", mlakv.library_path())
    res = subprocess.run([sys.executable, EXAMPLE, "--device", "cpu", "--batch", "2",
                          "--heads", "4", "--prefill", "200", "--steps", "3", "--topk", "64",
                          "--block-size", "16", "--format", "nvfp4_ds_mla,fp8_ds_mla"],
                         capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stderr
    errs = [float(x) for x in re.findall(r"rel L2 max ([0-9.]+)", res.stdout)]
    rates = re.findall(r"tokens/s \(write \+ decode, synchronized per call\): ([0-9,]+)",
                       res.stdout)
    assert len(errs) == 2 and len(rates) == 2, res.stdout
    # 4-bit latents: a few percent to ~20 % relative error; fp8: a few percent at most
    assert 0 < errs[0] < 0.3 and 0 < errs[1] < 0.08 and errs[1] < errs[0], res.stdout
