"""``predictor.service.warm``: the learning path's compiled kernels are loaded before a learner listens."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
from predictor.calibration import shape_kernel
from predictor.regressors import rls_kernel
from predictor.service import ServiceConfig
from predictor.service.warm import warm_ingest

kernels = (rls_kernel._rls_planned, shape_kernel.learn_block)
print('before', [len(k.signatures) for k in kernels])
warm_ingest(ServiceConfig())
print('after', [len(k.signatures) for k in kernels])
"""


def test_warm_ingest_loads_the_kernels_an_ingest_block_runs():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "before [0, 0]" in done.stdout
    after = json.loads(done.stdout.split("after ")[1])
    assert all(n >= 1 for n in after), done.stdout
