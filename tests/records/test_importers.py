"""Importers of the third-party datasets (skipped unless ``$INTERFERENCE_DATA`` holds them)."""

from __future__ import annotations

import pytest

from predictor.cli import main
from predictor.records.importers.gpulet import import_gpulet
from predictor.records.importers.igniter import import_igniter
from predictor.records.logio import read_records


def test_igniter_pairs_become_two_records_each(igniter_config):
    records = list(import_igniter(igniter_config))
    assert len(records) == 2 * 750
    first, second = records[0], records[1]
    # row 0: alexnet (20%) with resnet50 (80%), batch 2 and 2
    assert (first.batch.model, second.batch.model) == ("alexnet", "resnet50")
    assert first.co_runners[0].model == "resnet50" and first.co_runners[0].overlap == 1.0
    assert first.batch.attrs["partition"] + first.co_runners[0].attrs["partition"] == pytest.approx(1.0)
    for record in records:
        assert 0 < record.batch.attrs["l2_util"] <= 1 and 0 < record.batch.attrs["dram_util"] <= 1
        assert record.solo_latency_ms > 0 and record.latency_ms > 0


def test_gpulet_rows_become_records(gpulet_folder):
    records = list(import_gpulet(gpulet_folder))
    assert len(records) == 3675
    first = records[0]
    assert (first.batch.model, first.batch.batch_size, first.batch.attrs["partition"]) == ("vgg19", 1, 0.2)
    assert first.latency_ms == pytest.approx(7.52)
    assert first.co_runners[0].attrs["partition"] == pytest.approx(0.8)
    assert {r.batch.model for r in records} == {"vgg19", "resnet50", "densenet121"}


@pytest.mark.parametrize("fmt", ["igniter", "gpulet"])
def test_import_cli_writes_a_valid_log(tmp_path, fmt, igniter_config, gpulet_folder):
    source = igniter_config if fmt == "igniter" else gpulet_folder
    out = tmp_path / f"{fmt}.jsonl.gz"
    assert main(["import", fmt, str(source), "-o", str(out)]) == 0
    records, report = read_records(out)
    assert report.skipped == 0 and len(records) in (1500, 3675)


def test_import_reports_missing_source(tmp_path, capsys):
    assert main(["import", "gpulet", str(tmp_path), "-o", str(tmp_path / "x.jsonl")]) == 2
    assert "inference.csv" in capsys.readouterr().err
