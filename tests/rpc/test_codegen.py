"""The gRPC code is generated at build time, checked for staleness, and imported statically."""

from __future__ import annotations

import shutil
import subprocess
import sys

from predictor.rpc import codegen


def test_codegen_is_idempotent_and_checkable(tmp_path):
    assert codegen.is_up_to_date()
    assert codegen.generate() is False  # up to date: nothing written
    assert codegen.main(["--check"]) == 0
    out = tmp_path / "generated"
    assert codegen.generate(out=out) is True
    assert (out / "interference" / "v1" / "interference_pb2.py").exists()
    grpc_module = (out / "interference" / "v1" / "interference_pb2_grpc.py").read_text()
    assert "from predictor.rpc.generated.interference.v1 import interference_pb2" in grpc_module
    assert codegen.generate(out=out) is False


def test_check_fails_on_missing_or_stale_code(tmp_path, capsys, monkeypatch):
    protos = tmp_path / "protos"
    shutil.copytree(codegen.PROTO_ROOT, protos)
    monkeypatch.chdir(tmp_path)
    paths = ["--protos", "protos", "--out", "generated"]  # relative, as setup.py's build folder
    assert codegen.main(["--check", *paths]) == 1  # missing
    assert codegen.main(paths) == 0
    assert codegen.main(["--check", *paths]) == 0
    proto = next(protos.rglob("*.proto"))
    proto.write_text(proto.read_text() + "\n// changed\n")
    assert codegen.main(["--check", *paths]) == 1  # stale
    assert "make protos" in capsys.readouterr().out
    assert codegen.main(paths) == 0
    assert codegen.main(["--check", *paths]) == 0


def _run(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)


def _files(folder):
    return {p: p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file() and "__pycache__" not in p.parts}


def test_importing_the_rpc_layer_generates_nothing():
    before = _files(codegen.GENERATED_DIR)
    result = _run(
        "import sys\n"
        "import predictor.rpc.client, predictor.rpc.server, predictor.rpc.convert\n"
        "print(sorted(m for m in sys.modules if m in ('grpc_tools.protoc', 'predictor.rpc.codegen')))\n"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
    assert _files(codegen.GENERATED_DIR) == before  # nothing written into the package


def test_missing_generated_code_says_how_to_generate_it():
    result = _run(
        "import sys\n"
        "sys.modules['predictor.rpc.generated.interference'] = None  # as if never generated\n"
        "import predictor.rpc.protos\n"
    )
    assert result.returncode != 0
    assert "ImportError" in result.stderr and "make protos" in result.stderr
    assert "python -m predictor.rpc.codegen" in result.stderr
