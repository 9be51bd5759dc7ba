"""Build step of the package: generate the gRPC code from ``protos/`` while building.

Everything else is declared in ``pyproject.toml``. The generator is
``predictor/rpc/codegen.py``, loaded from its file (the package itself is not
importable in the isolated build environment); ``grpcio-tools`` comes from
``[build-system] requires``.

- ``pip install .`` (a wheel): the code is generated into the build folder, so it ships in the wheel.
- ``pip install -e .``: the code is generated into the source tree, which the installation points at.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
GENERATED = Path("predictor", "rpc", "generated")


def load_codegen() -> ModuleType:
    """``predictor/rpc/codegen.py`` as a module, without importing the package."""
    spec = importlib.util.spec_from_file_location(
        "_predictor_codegen", ROOT / "predictor" / "rpc" / "codegen.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithProtos(build_py):
    """``build_py``, then the gRPC code generated into what is being built."""

    def run(self) -> None:
        """Build the modules, then generate the gRPC code beside them."""
        super().run()
        codegen = load_codegen()
        if getattr(self, "editable_mode", False):
            codegen.generate(ROOT / "protos", ROOT / GENERATED)
        else:
            codegen.generate(ROOT / "protos", Path(self.build_lib) / GENERATED)


setup(cmdclass={"build_py": BuildPyWithProtos})
