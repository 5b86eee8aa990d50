"""pytest setup: import mlakv from this source tree, fresh random seed per run (MLAKV_SEED
replays one), printed in the header and on failure."""

import os
import sys
import time
import zlib

import numpy as np
import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(_HERE))  # python/ -> `import mlakv`
sys.path.insert(0, _HERE)                   # mlakv_ref

SEED = int(os.environ.get("MLAKV_SEED", str(time.time_ns() % (1 << 31))))


def pytest_report_header(config):
    import mlakv
    try:
        lib = mlakv.library_path()
    except OSError as exc:
        lib = f"NOT LOADED ({exc})"
    return [f"mlakv seed: MLAKV_SEED={SEED}", f"mlakv library: {lib}"]


@pytest.fixture
def rng(request):
    # One stream per test, derived from the run seed and the test name: replayable alone.
    return np.random.default_rng([SEED, zlib.crc32(request.node.nodeid.encode())])


def pytest_runtest_makereport(item, call):
    if call.when == "call" and call.excinfo is not None and \
            not call.excinfo.errisinstance(pytest.skip.Exception):
        print(f"\n[mlakv] failed with MLAKV_SEED={SEED}", file=sys.stderr)
