"""The light install: the service without torch, torch in the ``workload`` extra, the embedded
dataset by name (``--warm-start embedded``), and ``make test`` telling why tests were skipped."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from serve_process import start_server

from predictor.cli import build_parser, main
from predictor.cli.datasets import EMBEDDED_DATASET
from predictor.cli.serve import options_from_args
from predictor.rpc.client import InterferenceClient

ROOT = Path(__file__).resolve().parents[2]
BLOCK_TORCH = "import sys; sys.modules['torch'] = None  # `import torch` raises ImportError, as where it is not installed\n"


def _python(code: str, tmp_path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCK_TORCH + code], capture_output=True, text=True,
                          timeout=120, cwd=tmp_path)


def test_torch_is_only_in_the_workload_extra_and_make_setup_installs_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [r for r in project["dependencies"] if Requirement(r).name == "torch"]
    (torch,) = [Requirement(r) for r in project["optional-dependencies"]["workload"] if Requirement(r).name == "torch"]
    assert torch.specifier.contains("2.13.0")
    makefile = (ROOT / "Makefile").read_text()
    assert "TORCH_PIN := torch==2.13.0" in makefile
    setup = makefile.split("$(STAMP):", 1)[1]
    assert setup.index("$(TORCH_PIN)") < setup.index("'.[dev,ray,workload]'")
    for target in ("test:", "test-slow:"):
        recipe = makefile.split(f"\n{target}", 1)[1].split("\n\n", 1)[0]
        assert "pytest" in recipe and " -rs" in recipe, recipe


def test_without_torch_the_service_side_imports_and_the_workload_commands_name_the_extra(tmp_path):
    result = _python(
        "import collectors.workload, predictor.cli.collect, predictor.cli.demo, predictor.rpc.server\n"
        "from predictor.cli import main\n"
        "print('collect', main(['collect', '-o', 'x.jsonl', '--duration', '1']))\n"
        "print('demo', main(['demo', '--short']))\n",
        tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "collect 2" in result.stdout and "demo 2" in result.stdout
    assert result.stderr.count("pip install 'interference-predictor[workload]'") == 2
    assert "predictor collect:" in result.stderr and "predictor demo:" in result.stderr
    assert not (tmp_path / "x.jsonl").exists()


def test_warm_start_embedded_names_the_shipped_dataset(tmp_path, capsys):
    options = options_from_args(build_parser().parse_args(["serve", "--warm-start", "embedded"]))
    assert options.warm_start == str(EMBEDDED_DATASET) and EMBEDDED_DATASET.is_file()
    given = options_from_args(build_parser().parse_args(["serve", "--warm-start", "runs/x.jsonl.gz"]))
    assert given.warm_start == "runs/x.jsonl.gz"
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    assert "predictor serve --warm-start embedded" in capsys.readouterr().out


@pytest.mark.slow  # learns the 8948 records of the embedded dataset first (~20 s on 2 cores)
def test_serve_warm_started_from_the_embedded_dataset_answers_without_torch(tmp_path, capsys):
    served = start_server(tmp_path, "--warm-start", "embedded")
    try:
        with InterferenceClient(served.target) as client:
            client.wait_ready(120)
        maps = Path(f"/proc/{served.proc.pid}/maps")
        if maps.exists():
            assert "torch" not in maps.read_text()  # the service never loads torch
        assert main(["query", "--target", served.target, "deadline", "--device", "cpu0", "--model", "resnet",
                     "--batch-size", "4", "--idle", "--deadline-ms", "40"]) == 0
        out = " ".join(capsys.readouterr().out.split())
        assert "8948 observations" in out and "verdict" in out and "UNKNOWN MODEL" not in out
        assert "cpu-default.jsonl.gz: 8948 records read" in served.wait_for("; SERVING")
    finally:
        served.stop()
