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
import warnings
from pathlib import Path
from types import ModuleType

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.warnings import InformationOnly

# `pip install -e .` (make setup): setuptools' notice that an editable install of a flat layout may
# import same-named folders of the working directory. This project's only top-level packages are
# predictor, collectors and experiments, so the notice says nothing here: keep the build output clean.
warnings.filterwarnings("ignore", message="Editable installation", category=InformationOnly)

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


def generated_packages() -> list[str]:
    """The packages of the gRPC code generated in the source tree (none before it is generated)."""
    return sorted(
        ".".join(init.parent.relative_to(ROOT).parts) for init in (ROOT / GENERATED).rglob("__init__.py")
    )


class BuildPyWithProtos(build_py):
    """``build_py`` with the gRPC code generated into what is being built.

    An editable build generates into the source tree first and declares the generated
    packages, so that setuptools neither warns about importable folders missing from
    ``packages`` nor leaves them out.
    """

    def run(self) -> None:
        """Build the modules and generate the gRPC code beside them."""
        codegen = load_codegen()
        if getattr(self, "editable_mode", False):
            codegen.generate(ROOT / "protos", ROOT / GENERATED)
            self.packages = list(self.packages or ())
            self.packages += [name for name in generated_packages() if name not in self.packages]
            self.distribution.packages = self.packages
            super().run()
        else:
            super().run()
            codegen.generate(ROOT / "protos", Path(self.build_lib) / GENERATED)


setup(cmdclass={"build_py": BuildPyWithProtos})
