"""The garbage collector's policy (predictor.runtime.gc_tuning): set in every server process, restorable, and off on request."""

from __future__ import annotations

import gc
import logging
import re
import subprocess
import sys

import pytest
from serve_process import ROOT, start_server

from predictor.runtime.gc_tuning import (
    DEFAULT_YOUNG_THRESHOLD,
    check_young_threshold,
    collector,
    freeze_startup,
)

COLLECTOR_LINE = r"{role}.*garbage collector: thresholds (\d+),(\d+),(\d+), ([\d,]+) start-up objects frozen"


def test_the_collector_block_freezes_start_up_and_restores_python_s_collector(caplog) -> None:
    before = gc.get_threshold()
    with collector(DEFAULT_YOUNG_THRESHOLD):
        assert gc.get_threshold() == (DEFAULT_YOUNG_THRESHOLD, *before[1:])
        with caplog.at_level(logging.INFO, logger="test.gc"):
            frozen = freeze_startup(DEFAULT_YOUNG_THRESHOLD, logging.getLogger("test.gc"))
        assert frozen > 0  # this test process's modules, at least
        assert f"{frozen:,} start-up objects frozen" in caplog.text
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_zero_leaves_python_s_collector_as_it_is() -> None:
    before = gc.get_threshold()
    with collector(0):
        assert gc.get_threshold() == before
        assert freeze_startup(0) == 0 == gc.get_freeze_count()
    assert gc.get_threshold() == before


@pytest.mark.parametrize("bad", [-1, 10_000_001])
def test_a_threshold_out_of_range_is_refused_naming_the_option(bad: int) -> None:
    with pytest.raises(ValueError, match="--gc-young-threshold"):
        check_young_threshold(bad)


def _collector_of(output: str, role: str = "") -> tuple[tuple[int, int, int], int]:
    match = re.search(COLLECTOR_LINE.format(role=re.escape(role)), output)
    assert match, output
    return tuple(int(x) for x in match.groups()[:3]), int(match.group(4).replace(",", ""))  # type: ignore[return-value]


def test_the_server_process_collects_young_objects_less_often_and_freezes_its_start_up(tmp_path) -> None:
    server = start_server(tmp_path)
    try:
        output = server.wait_for("; SERVING")
    finally:
        server.stop()
    thresholds, frozen = _collector_of(output)
    assert thresholds[0] == DEFAULT_YOUNG_THRESHOLD and frozen > 10_000  # the model, the modules, gRPC's


def test_a_server_told_zero_keeps_python_s_collector(tmp_path) -> None:
    server = start_server(tmp_path, "--gc-young-threshold", "0")
    try:
        output = server.wait_for("; SERVING")
    finally:
        server.stop()
    assert _collector_of(output) == (gc.get_threshold(), 0)  # a new interpreter's: this one's


def test_every_process_of_a_multi_process_server_sets_the_collector(tmp_path) -> None:
    """The learner and the workers are new interpreters (spawned): each sets its collector itself."""
    server = start_server(tmp_path, "--workers", "2")
    try:
        for role in ("learner-0", "worker-0", "worker-1"):
            server.wait_for(f"{role} INFO garbage collector")
    finally:
        server.stop()
    for role in ("learner-0", "worker-0", "worker-1"):
        thresholds, frozen = _collector_of(server.output(), role)
        assert thresholds[0] == DEFAULT_YOUNG_THRESHOLD and frozen > 0, role


def test_a_bad_threshold_stops_the_server_naming_the_option() -> None:
    done = subprocess.run([sys.executable, "-m", "predictor.cli", "serve", "--port", "0", "--gc-young-threshold", "-5"],
                          capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 2 and "--gc-young-threshold" in done.stderr, done.stderr
