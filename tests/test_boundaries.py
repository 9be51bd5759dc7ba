"""Package boundaries: ``predictor.records.record`` is the light shared core, and only the CLI wing touches ``collectors``.

``collectors/`` and ``predictor/`` both depend on :mod:`predictor.records.record`;
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
    loaded = _loaded_after("import predictor.records.record")
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


def test_the_service_package_exports_lazily_and_each_name_from_its_home():
    """``predictor.service`` loads a name's module when it is asked for, so that its light modules (the
    types a client speaks in) are imported without the service core."""
    loaded = _loaded_after("import predictor.service.types, predictor.service")
    assert "numba" not in loaded and "scipy" not in loaded, loaded
    service = importlib.import_module("predictor.service")
    assert sorted(service.__all__) == sorted(service._EXPORTS)
    for name in service.__all__:
        assert getattr(service, name) is getattr(importlib.import_module(service._EXPORTS[name]), name), name
    assert service.SnapshotError is importlib.import_module("predictor.snapshot").SnapshotError
    with pytest.raises(AttributeError, match="no_such_name"):
        service.no_such_name  # noqa: B018


# The layers of ``predictor``, lowest first: a module may import its own package and the ones
# below it, never one above. ``predictor/__init__.py`` (which loads its exports lazily) is above all.
LAYERS = (
    "predictor.runtime",
    "predictor.records",
    "predictor.features",
    "predictor.calibration",
    "predictor.regressors",
    "predictor.predictors",
    "predictor.snapshot",
    "predictor.testing",
    "predictor.prequential",
    "predictor.pipeline",
    "predictor.service",
    "predictor.analysis",
    "predictor.rpc",
    "predictor.ray_serve",
    "predictor.cli",
)
# Third-party packages a module may import inside a function: optional or heavy ones, loaded only
# where they are used (so that parsing the command line, or importing a record, stays light).
LAZY_THIRD_PARTY = frozenset({
    "torch", "ray", "lightgbm", "opentelemetry", "matplotlib", "numba", "river", "grpc", "grpc_tools",
    "prometheus_client", "collectors", "numpy", "scipy", "sklearn",
})


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve(name: str, modules: set[str]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _import_graph() -> dict[str, list[tuple[str, int, bool, bool]]]:
    """Each module of ``predictor`` -> the ``predictor`` modules it imports:
    ``(module, line, inside a function, for type checking only)``.

    Every import counts, those inside functions and under ``if TYPE_CHECKING:`` included."""
    paths = [p for p in PACKAGE_DIR.rglob("*.py") if "generated" not in p.parts]
    modules = {_module_name(p) for p in paths}
    graph: dict[str, list[tuple[str, int, bool, bool]]] = {}
    for path in paths:
        name = _module_name(path)
        tree = ast.parse(path.read_text(), str(path))
        nested = {
            id(node)
            for function in ast.walk(tree)
            if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef)
            for node in ast.walk(function)
        }
        typing_only = {
            id(node)
            for branch in ast.walk(tree)
            if isinstance(branch, ast.If) and "TYPE_CHECKING" in ast.unparse(branch.test)
            for node in ast.walk(branch)
        }
        edges = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                targets = [f"{node.module}.{alias.name}" for alias in node.names]
            else:
                continue
            for target in targets:
                if target.split(".")[0] != "predictor":
                    continue
                resolved = _resolve(target, modules)
                if resolved and resolved != name:
                    edges.append((resolved, node.lineno, id(node) in nested, id(node) in typing_only))
        graph[name] = edges
    return graph


def _layer(module: str) -> int:
    for rank, prefix in enumerate(LAYERS):
        if module == prefix or module.startswith(prefix + "."):
            return rank
    return len(LAYERS)  # the package's own __init__: above everything


def test_every_module_belongs_to_a_layer():
    assert [m for m in _import_graph() if _layer(m) == len(LAYERS) and m != "predictor"] == []


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{module}:{line} imports {target}"
        for module, edges in _import_graph().items()
        for target, line, _, _ in edges
        if _layer(target) > _layer(module)
    ]
    assert upward == []


def test_the_import_graph_has_no_cycle():
    # Imports for type checking only never run; every other import counts, inside functions too.
    graph = {m: sorted({t for t, _, _, typing in edges if not typing}) for m, edges in _import_graph().items()}
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[list[str]] = []

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in graph.get(module, ()):
            if state.get(target) == 1:
                cycles.append(path[path.index(target):] + [target])
            elif target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def test_imports_inside_functions_are_only_lazy_heavy_ones():
    # Inside ``predictor.cli`` a sub-command may load its layer below lazily (``--help`` needs no gRPC);
    # anywhere else an import inside a function would hide a cycle, unless it is an optional heavy package.
    offenders = []
    for module, edges in _import_graph().items():
        if _layer(module) != _layer(CLI_WING):
            offenders += [f"{module}:{line} imports {target}" for target, line, nested, _ in edges if nested]
    for path in PACKAGE_DIR.rglob("*.py"):
        if "generated" in path.parts:
            continue
        tree = ast.parse(path.read_text(), str(path))
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                else:
                    continue
                top = {n.split(".")[0] for n in names} - {"predictor"}
                if top - LAZY_THIRD_PARTY:
                    offenders.append(f"{path}:{node.lineno} imports {sorted(top - LAZY_THIRD_PARTY)} in a function")
    assert offenders == []


def test_few_modules_sit_directly_under_the_package():
    flat = sorted(p.name for p in PACKAGE_DIR.glob("*.py") if p.name != "__init__.py")
    assert len(flat) <= 8, flat
