"""Throw-away certificates for TLS tests, made with the ``openssl`` command at test time.

A CA, a server certificate for ``localhost``/``127.0.0.1`` and client certificates signed by it,
plus a rogue CA whose certificates the server must refuse. EC P-256 keys: fast to generate.
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class Pki:
    ca: Path
    server: Pair
    clients: dict[str, Pair]
    rogue_ca: Path
    rogue_client: Pair


def _run(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def _ca(folder: Path, name: str) -> Pair:
    key, cert = folder / f"{name}.key", folder / f"{name}.pem"
    _run(
        "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(cert), "-days", "2", "-subj", f"/CN={name}",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
        cwd=folder,
    )  # fmt: skip
    return Pair(cert, key)


def _leaf(folder: Path, ca: Pair, name: str, extensions: str) -> Pair:
    key, csr, cert, ext = (folder / f"{name}.{s}" for s in ("key", "csr", "pem", "ext"))
    ext.write_text(extensions + "\n")
    _run(
        "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
        "-keyout", str(key), "-out", str(csr), "-subj", f"/CN={name}",
        cwd=folder,
    )  # fmt: skip
    _run(
        "x509", "-req", "-in", str(csr), "-CA", str(ca.cert), "-CAkey", str(ca.key), "-CAcreateserial",
        "-out", str(cert), "-days", "2", "-extfile", str(ext),
        cwd=folder,
    )  # fmt: skip
    return Pair(cert, key)


def make_pki(folder: Path, clients: tuple[str, ...] = ("collector-1", "intruder")) -> Pki:
    """Generate everything under ``folder`` (skips the test when ``openssl`` is missing)."""
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is needed to generate test certificates")
    folder.mkdir(parents=True, exist_ok=True)
    ca = _ca(folder, "test-ca")
    server = _leaf(
        folder, ca, "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"
    )
    leaves = {name: _leaf(folder, ca, name, "extendedKeyUsage=clientAuth") for name in clients}
    rogue = _ca(folder, "rogue-ca")
    rogue_client = _leaf(folder, rogue, "rogue-client", "extendedKeyUsage=clientAuth")
    return Pki(ca.cert, server, leaves, rogue.cert, rogue_client)
