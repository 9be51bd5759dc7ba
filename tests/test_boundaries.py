"""Package boundaries: ``predictor.records`` is the light shared core, and only the CLI wing touches ``collectors``.

``collectors/`` and ``predictor/`` both depend on :mod:`predictor.records`;
nothing in ``predictor/`` outside :mod:`predictor.cli` imports ``collectors``
(nor ``torch``, which only the workload's worker processes load).
"""

from __future__ import annotations

import ast
import importlib
import json
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

import predictor

PACKAGE_DIR = Path(predictor.__file__).resolve().parent
CLI_WING = "predictor.cli"


def _loaded_after(code: str) -> set[str]:
    """Top-level names in ``sys.modules`` after running ``code`` in a fresh interpreter."""
    script = f"import json, sys\n{code}\nprint(json.dumps(sorted({{m.split('.')[0] for m in sys.modules}})))"
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return set(json.loads(result.stdout.splitlines()[-1]))


def _core_modules() -> list[str]:
    names = [m.name for m in pkgutil.walk_packages([str(PACKAGE_DIR)], prefix="predictor.")]
    return sorted(n for n in names if n != CLI_WING and not n.startswith(CLI_WING + "."))


def test_records_import_nothing_heavy():
    loaded = _loaded_after("import predictor.records")
    assert not loaded & {"grpc", "google", "river", "sklearn", "torch", "collectors"}, loaded


def test_predictor_outside_the_cli_loads_neither_collectors_nor_torch():
    modules = _core_modules()
    assert "predictor.rpc.server" in modules and "predictor.service.core" in modules
    loaded = _loaded_after("\n".join(f"import {name}" for name in modules))
    assert "collectors" not in loaded
    assert "torch" not in loaded


def test_predictor_outside_the_cli_never_imports_collectors():
    # Also the imports inside functions, which importing the modules does not run.
    offenders = []
    for path in PACKAGE_DIR.rglob("*.py"):
        if path.relative_to(PACKAGE_DIR).parts[0] == "cli":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            offenders += [f"{path}:{node.lineno}" for n in names if n.split(".")[0] == "collectors"]
    assert not offenders


def test_the_command_line_parses_without_grpc_or_torch():
    loaded = _loaded_after("from predictor.cli import build_parser\nbuild_parser()")
    assert not loaded & {"grpc", "torch"}, loaded


def test_importing_the_package_alone_loads_nothing_heavy():
    loaded = _loaded_after("import predictor\ndir(predictor)")
    assert not loaded & {"grpc", "google", "river", "sklearn", "torch", "collectors"}, loaded


def test_the_record_names_of_the_package_stay_light():
    loaded = _loaded_after("from predictor import BatchSpec, CoRunner, Record, parse_record, iter_records")
    assert not loaded & {"grpc", "google", "river", "sklearn", "torch", "collectors"}, loaded


def test_every_exported_name_resolves_to_its_home():
    assert sorted(predictor.__all__) == sorted(predictor._EXPORTS)
    assert set(predictor.__all__) <= set(dir(predictor))
    for name in predictor.__all__:
        module, attribute = predictor._EXPORTS[name]
        assert getattr(predictor, name) is getattr(importlib.import_module(module), attribute), name
    from predictor import InterferenceClient, Record, make_predictor  # noqa: F401

    assert make_predictor is importlib.import_module("predictor.predictors.registry").create


def test_an_unknown_package_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no_such_name"):
        predictor.no_such_name  # noqa: B018
