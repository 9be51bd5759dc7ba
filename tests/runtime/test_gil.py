"""``predictor serve`` answers with a short GIL switch interval (predictor.runtime.gil), and says so when told a bad one."""

from __future__ import annotations

import sys

import pytest
from serve_process import serving_in_thread

from predictor.rpc.processes.options import ServeOptions
from predictor.rpc.processes.serve import serve
from predictor.runtime.gil import DEFAULT_SWITCH_INTERVAL_MS
from predictor.service import ServiceConfig


@pytest.mark.parametrize("value", [0.0, -1.0, 1001.0, float("nan")])
def test_serve_refuses_a_switch_interval_out_of_range(value, capsys):
    assert serve(ServiceConfig(), ServeOptions(switch_interval_ms=value)) == 2
    assert "--switch-interval-ms must be in (0, 1000]" in capsys.readouterr().err


def test_serve_answers_with_its_switch_interval_and_restores_the_previous(tmp_path):
    before = sys.getswitchinterval()
    assert before != DEFAULT_SWITCH_INTERVAL_MS / 1e3  # the interpreter's own (5 ms) in the test process
    port_file = tmp_path / "port"
    options = ServeOptions(host="127.0.0.1", port=0, metrics_port=0, port_file=str(port_file), grace_s=0.1)
    with serving_in_thread(ServiceConfig(snapshot_every_s=0), options):
        assert sys.getswitchinterval() == pytest.approx(DEFAULT_SWITCH_INTERVAL_MS / 1e3)
    assert sys.getswitchinterval() == before
