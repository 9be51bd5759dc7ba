"""Fixtures: paths to the third-party data and the embedded dataset.

The third-party data lives outside the repository: set ``INTERFERENCE_DATA``
to the folder holding ``igniter-v100/`` and ``gpulet-ampere/``; the tests that
need it skip when it is unset or absent.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from hypothesis import settings

from predictor.records.importers.sources import find_source

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATASET = ROOT / "predictor" / "data" / "cpu-default.jsonl.gz"

sys.path.insert(0, str(Path(__file__).parent))

# CI (HYPOTHESIS_PROFILE=ci, set by .ci/run) draws the same examples on every run: a landing is judged
# on the change, not on which examples a run happened to draw. Runs elsewhere go on exploring anew
# (and keep what fails in .hypothesis/, to replay it first next time).
settings.register_profile("ci", derandomize=True, database=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def _third_party(name: str) -> Path:
    path, reason = find_source(name)
    if path is None:
        pytest.skip(reason)
    return path


@pytest.fixture(scope="session")
def igniter_config() -> Path:
    """iGniter's ``gpulet.config`` (V100 pairs); skips when ``$INTERFERENCE_DATA`` does not hold it."""
    return _third_party("igniter")


@pytest.fixture(scope="session")
def gpulet_folder() -> Path:
    """The GPUlet Ampere CSV folder; skips when ``$INTERFERENCE_DATA`` does not hold it."""
    return _third_party("gpulet")


@pytest.fixture(scope="session")
def default_dataset() -> Path:
    """The embedded CPU dataset shipped in ``predictor/data``."""
    if not DEFAULT_DATASET.exists():
        pytest.skip(f"embedded dataset not recorded yet at {DEFAULT_DATASET}")
    return DEFAULT_DATASET
