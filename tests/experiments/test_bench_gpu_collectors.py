"""``experiments.bench.bench_gpu_collectors`` and ``make gpu-check`` as far as a machine without a GPU runs them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from experiments.bench import bench_gpu_collectors

ROOT = Path(__file__).resolve().parents[2]


def test_without_a_gpu_the_bench_says_what_it_needs(tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "experiments.bench.bench_gpu_collectors", "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert done.returncode != 0 and "needs a CUDA GPU" in done.stderr


def test_the_sampler_rates_run_each_variant_twice_whatever_nvml_answers():
    rows = bench_gpu_collectors.sampler_rates(200.0, 0.05)
    assert [(row["variant"], row["round"]) for row in rows] == [
        ("every field at every tick", 0), ("every field at every tick", 1), ("defaults", 0), ("defaults", 1)]
    assert all(row["reads"] > 0 and row["reads_per_s"] > 0 and row["core_share"] >= 0 for row in rows)


def test_the_gpu_check_script_parses_and_names_modules_that_exist():
    script = ROOT / "scripts" / "gpu_check.sh"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    for module in ("experiments.bench.bench_gpu_collectors", "predictor.cli"):
        assert f"-m {module}" in text
        assert (ROOT / (module.replace(".", "/") + ".py")).exists() or (ROOT / module.replace(".", "/")).is_dir()
