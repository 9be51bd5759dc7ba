"""Shared fixtures: paths to the shared third-party data and the embedded dataset."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"
DEFAULT_DATASET = ROOT / "predictor" / "data" / "cpu-default.jsonl.gz"

sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="session")
def igniter_config() -> Path:
    path = SHARED_DATA / "igniter-v100" / "gpulet.config"
    if not path.exists():
        pytest.skip(f"shared iGniter data not found at {path}")
    return path


@pytest.fixture(scope="session")
def gpulet_folder() -> Path:
    path = SHARED_DATA / "gpulet-ampere"
    if not (path / "interference.csv").exists():
        pytest.skip(f"shared GPUlet Ampere data not found at {path}")
    return path


@pytest.fixture(scope="session")
def default_dataset() -> Path:
    if not DEFAULT_DATASET.exists():
        pytest.skip(f"embedded dataset not recorded yet at {DEFAULT_DATASET}")
    return DEFAULT_DATASET
