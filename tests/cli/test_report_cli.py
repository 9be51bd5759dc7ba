"""``predictor report LOG``: a log streamed into a real server (port 0), exactly once."""

from __future__ import annotations

import pytest

from predictor.cli import main
from predictor.cli.report import default_producer_id
from predictor.records.logio import write_records
from predictor.rpc.server import create_server, stop_server
from predictor.service import Service, ServiceConfig
from predictor.service.synthetic import synthetic_records


@pytest.fixture
def served():
    service = Service(ServiceConfig(observation_log=False))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    yield service, f"127.0.0.1:{port}"
    stop_server(server, service, grace=0.5)


def _rows(out: str) -> dict[str, str]:
    """The summary table's rows: label -> value."""
    rows = {}
    for line in out.splitlines():
        cells = [c.strip() for c in line.strip("│|").split("│")]
        if len(cells) == 2 and cells[0]:
            rows[cells[0]] = cells[1]
    return rows


def test_a_log_is_learned_once_however_often_it_is_sent(served, tmp_path, capsys):
    service, target = served
    records = synthetic_records(300, seed=3)
    log = tmp_path / "run.jsonl.gz"
    write_records(log, records[:200])

    assert main(["report", str(log), "--target", target, "--chunk", "64"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["records read"] == "200"
    assert rows["sent"] == "200 in 4 streams"
    assert rows["accepted (learned)"] == "200"
    assert rows["duplicates (already learned)"] == "0"
    assert rows["producer id"] == default_producer_id(str(log))
    assert service.status().observations_learned == 200

    # The same log again: every record a duplicate, nothing learned twice.
    assert main(["report", str(log), "--target", target]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["accepted (learned)"] == "0" and rows["duplicates (already learned)"] == "200"
    assert service.status().observations_learned == 200

    # The log grown by 100 records (a collector appending): only those are learned.
    write_records(log, records)
    assert default_producer_id(str(log)) == rows["producer id"]
    assert main(["report", str(log), "--target", target, "--chunk", "1000"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["accepted (learned)"] == "100" and rows["duplicates (already learned)"] == "200"
    assert service.status().observations_learned == 300

    # Without exactly-once numbering every send is learned again.
    assert main(["report", str(log), "--target", target, "--no-exactly-once", "--quiet"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert rows["accepted (learned)"] == "300" and rows["producer id"].startswith("none")
    assert service.status().observations_learned == 600


def test_records_refused_over_the_rate_limit_are_sent_again_by_the_same_command(tmp_path, capsys):
    service = Service(ServiceConfig(observation_log=False, rate_limit=1e-6, rate_burst=10))
    server, port = create_server("127.0.0.1:0", service)
    server.start()
    service.open()
    try:
        log = tmp_path / "run.jsonl"
        write_records(log, synthetic_records(50, seed=4))
        target = ["--target", f"127.0.0.1:{port}"]
        assert main(["report", str(log), *target]) == 0
        out = capsys.readouterr().out
        rows = _rows(out)
        assert rows["accepted (learned)"] == "10"
        assert rows["rejected"] == "40 (0 outliers, 40 over the rate limit)"
        assert "run the same command again later" in " ".join(out.split())
        # Again: the 10 learned are duplicates; the 40 refused were not taken, so they are refused again
        # (no tokens yet), never dropped as duplicates.
        assert main(["report", str(log), *target]) == 0
        rows = _rows(capsys.readouterr().out)
        assert rows["duplicates (already learned)"] == "10" and rows["rejected"].startswith("40 ")
        assert service.status().observations_learned == 10
    finally:
        stop_server(server, service, grace=0.5)


def test_bad_lines_and_an_unreachable_service_are_reported(served, tmp_path, capsys):
    service, target = served
    log = tmp_path / "mixed.jsonl"
    write_records(log, synthetic_records(20, seed=4))
    log.write_text(log.read_text() + "not json\n")

    assert main(["report", str(log), "--target", target, "--producer-id", "p1", "--chunk", "8"]) == 2
    captured = capsys.readouterr()
    assert "line 21" in captured.err and "--tolerant" in captured.err
    assert _rows(captured.out)["accepted (learned)"] == "16"  # the streams sent before the bad line
    assert "run the same command again" in " ".join(captured.out.split())

    assert main(["report", str(log), "--target", target, "--producer-id", "p1", "--tolerant"]) == 0
    out = capsys.readouterr().out
    rows = _rows(out)
    assert rows["records read"] == "20 (1 bad lines skipped)"
    assert rows["accepted (learned)"] == "4" and rows["duplicates (already learned)"] == "16"
    assert service.status().observations_learned == 20

    # Nothing listens there: a clear error naming the target, exit status 1.
    assert main(["report", str(log), "--target", "127.0.0.1:1", "--wait", "0.5", "--tolerant"]) == 1
    assert "127.0.0.1:1" in capsys.readouterr().err


def test_bad_options_name_the_flag(tmp_path, capsys):
    log = tmp_path / "x.jsonl"
    write_records(log, synthetic_records(2))
    assert main(["report", str(log), "--chunk", "0"]) == 2
    assert "--chunk" in capsys.readouterr().err
    assert main(["report", str(log), "--producer-id", "a", "--no-exactly-once"]) == 2
    assert "--no-exactly-once" in capsys.readouterr().err
    assert main(["report", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
