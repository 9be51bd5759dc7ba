"""Generate the Python gRPC code from ``protos/`` into ``predictor/rpc/generated/``, at build time.

Run by the set-up (``make protos``, part of ``make setup``) and by the
setuptools build (``setup.py``'s ``build_py`` step, so ``pip install .`` ships
the code); never at run time: :mod:`predictor.rpc.protos` imports the result
statically. ``python -m predictor.rpc.codegen`` generates, ``--check`` only
reports whether the code is up to date (exit status 1 if not), ``--force``
regenerates anyway.

* Idempotent and fast when up to date: the generated package records a hash
  of the ``.proto`` sources and of the ``grpcio-tools`` version, and nothing
  is written when it matches.
* Atomic: code is generated into a temporary folder and swapped into place,
  so an import never sees a half-written package.
* Importable as ``predictor.rpc.generated.interference.v1``: protoc is run with
  ``-I protos`` so descriptors keep their canonical name
  (``interference/v1/interference.proto``, what reflection shows), and the one
  absolute import protoc writes into ``*_pb2_grpc.py`` is rewritten to the
  package path.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import sys
import tempfile
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

PACKAGE = "predictor.rpc.generated"
GENERATED_DIR = Path(__file__).resolve().parent / "generated"
PROTO_ROOT = Path(__file__).resolve().parents[2] / "protos"
PROTO_PACKAGE_DIR = "interference"  # top folder under protos/ and under generated/
STAMP_NAME = "_source_hash.txt"


class CodegenError(RuntimeError):
    """The gRPC code could not be generated."""


def proto_files(root: Path = PROTO_ROOT) -> list[Path]:
    """The ``.proto`` files under ``root``, relative to it, sorted."""
    return sorted(p.relative_to(root) for p in root.rglob("*.proto"))


def source_hash(root: Path = PROTO_ROOT) -> str:
    """Hash of the proto sources and of the code generator's version."""
    import grpc_tools  # heavy, build-time: protoc only when generating or checking

    digest = hashlib.sha256()
    digest.update(getattr(grpc_tools, "__version__", _tools_version()).encode())
    for rel in proto_files(root):
        digest.update(str(rel).encode() + b"\0" + (root / rel).read_bytes() + b"\0")
    return digest.hexdigest()


def _tools_version() -> str:
    try:
        return version("grpcio-tools")
    except PackageNotFoundError:
        return "unknown"


def _stamp_path(out: Path) -> Path:
    return out / PROTO_PACKAGE_DIR / STAMP_NAME


def is_up_to_date(root: Path = PROTO_ROOT, out: Path = GENERATED_DIR) -> bool:
    """Whether ``out`` holds code generated from the current sources."""
    stamp = _stamp_path(out)
    if not stamp.is_file():
        return False
    if not root.is_dir():  # installed without sources: trust what is there
        return True
    return stamp.read_text().strip() == source_hash(root)


def _fix_imports(path: Path) -> None:
    text = path.read_text()
    # protoc writes ``from interference.v1 import interference_pb2 as ...``.
    fixed = re.sub(
        rf"^from {PROTO_PACKAGE_DIR}(\.[\w.]+)? import",
        lambda m: f"from {PACKAGE}.{PROTO_PACKAGE_DIR}{m.group(1) or ''} import",
        text,
        flags=re.MULTILINE,
    )
    fixed = re.sub(
        rf"^import {PROTO_PACKAGE_DIR}\.", f"import {PACKAGE}.{PROTO_PACKAGE_DIR}.", fixed, flags=re.MULTILINE
    )
    path.write_text(fixed)


def _run_protoc(root: Path, target: Path) -> None:
    import grpc_tools  # heavy, build-time: protoc only when generating
    from grpc_tools import protoc  # heavy, build-time (as above)

    include = Path(grpc_tools.__file__).resolve().parent / "_proto"
    files = [str(p) for p in proto_files(root)]
    if not files:
        raise CodegenError(f"no .proto files under {root}")
    args = [
        "grpc_tools.protoc",
        f"-I{root.resolve()}",
        f"-I{include}",
        f"--python_out={target.resolve()}",
        f"--pyi_out={target.resolve()}",
        f"--grpc_python_out={target.resolve()}",
        *files,
    ]
    # protoc resolves relative proto paths against the working directory.
    cwd = os.getcwd()
    try:
        os.chdir(root)
        status = protoc.main(args)
    finally:
        os.chdir(cwd)
    if status != 0:
        raise CodegenError(f"protoc failed with status {status} on {', '.join(files)}")


def generate(root: Path = PROTO_ROOT, out: Path = GENERATED_DIR, *, force: bool = False) -> bool:
    """Generate the code unless up to date; returns whether anything was written."""
    if not root.is_dir():
        if is_up_to_date(root, out):
            return False
        raise CodegenError(f"proto sources not found at {root} and no generated code in {out}")
    if not force and is_up_to_date(root, out):
        return False
    digest = source_hash(root)
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out, prefix=".codegen-") as tmp:
        staging = Path(tmp)
        _run_protoc(root, staging)
        top = staging / PROTO_PACKAGE_DIR
        for folder in [top, *(p for p in top.rglob("*") if p.is_dir())]:
            (folder / "__init__.py").touch()
        for path in top.rglob("*_pb2*.py"):
            _fix_imports(path)
        (top / STAMP_NAME).write_text(digest + "\n")
        final = out / PROTO_PACKAGE_DIR
        old = staging / "old"
        if final.exists():
            final.rename(old)
        top.rename(final)
        shutil.rmtree(old, ignore_errors=True)
    _init = out / "__init__.py"
    if not _init.exists():
        _init.write_text('"""Generated gRPC code (``python -m predictor.rpc.codegen``)."""\n')
    return True


def main(argv: list[str] | None = None) -> int:
    """Command line of ``python -m predictor.rpc.codegen``; returns the exit status.

    0: generated or up to date; 1: ``--check`` found the code missing or stale;
    2: the code could not be generated.
    """
    parser = argparse.ArgumentParser(
        prog="python -m predictor.rpc.codegen", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--check", action="store_true", help="only report whether the code is up to date")
    parser.add_argument("--force", action="store_true", help="regenerate even when up to date")
    parser.add_argument(
        "--protos", type=Path, default=PROTO_ROOT, help=f"proto sources (default {PROTO_ROOT})"
    )
    parser.add_argument(
        "--out", type=Path, default=GENERATED_DIR, help=f"target package (default {GENERATED_DIR})"
    )
    args = parser.parse_args(argv)
    if args.check:
        fresh = is_up_to_date(args.protos, args.out)
        print("generated gRPC code is " + ("up to date" if fresh else "missing or stale: run `make protos`"))
        return 0 if fresh else 1
    try:
        wrote = generate(args.protos, args.out, force=args.force)
    except CodegenError as exc:
        print(f"codegen: error: {exc}", file=sys.stderr)
        return 2
    print(f"generated gRPC code in {args.out}" if wrote else "generated gRPC code is up to date")
    return 0


if __name__ == "__main__":
    sys.exit(main())
