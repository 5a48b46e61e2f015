"""A throwaway certificate authority and a server certificate for tests that serve HTTPS on loopback."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest


def certificates(folder: Path, subject_alt_name: str, common_name: str) -> tuple[Path, Path, Path]:
    """(CA certificate, server certificate, server key) in `folder`, made with the openssl CLI; the server's
    certificate names `subject_alt_name` (e.g. `DNS:secure.example.test` or `IP:127.0.0.1`). Skips the test when
    openssl is not installed."""
    openssl = shutil.which("openssl")
    if openssl is None:
        pytest.skip("the openssl command is not installed")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def run(*args: str) -> None:
        subprocess.run([openssl, *args], cwd=folder, check=True, capture_output=True)

    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", "/CN=kbctl test CA",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign")  # fmt: skip
    run("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", f"/CN={common_name}")
    (folder / "ext.cnf").write_text(f"subjectAltName={subject_alt_name}\nbasicConstraints=CA:FALSE\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.pem", "-days", "2", "-extfile", "ext.cnf")  # fmt: skip
    return folder / "ca.pem", folder / "server.pem", folder / "server.key"
