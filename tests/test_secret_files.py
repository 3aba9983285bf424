"""serve refuses a private key or password file that group or others can read (or that another user
owns) before it connects, with a one-line message that names the fix."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.security import SecurityConfig, check_secret_file, make_certificate, read_password

pytestmark = pytest.mark.skipif(not hasattr(os, "geteuid"), reason="POSIX owners and modes only")


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("pki")
    return {name: make_certificate(d, name, f"urn:rl2edge:{name}", "localhost") for name in ("plc", "serve")}


def _client_sec(pki: dict[str, tuple[Path, Path]], key: Path) -> SecurityConfig:
    return SecurityConfig("sign_and_encrypt", pki["serve"][0], key, trusted=(pki["plc"][0],))


def test_a_key_open_to_others_is_refused(pki, tmp_path: Path) -> None:
    key = tmp_path / "serve.key.pem"
    key.write_bytes(pki["serve"][1].read_bytes())
    key.chmod(0o644)
    with pytest.raises(ConfigError, match=re.escape(f"chmod 600 {key}")) as err:
        _client_sec(pki, key).check("client")
    assert "private key" in str(err.value) and "\n" not in str(err.value)


def test_a_0600_key_passes(pki) -> None:
    key = pki["serve"][1]
    assert key.stat().st_mode & 0o777 == 0o600  # as `rl2edge certs` writes it
    _client_sec(pki, key).check("client")


def test_a_password_file_0640_is_refused(tmp_path: Path) -> None:
    pw = tmp_path / "password"
    pw.write_text("s3cret\n")
    pw.chmod(0o640)
    with pytest.raises(
        ConfigError,
        match=re.escape(f"password file {pw} has mode 0640") + ".*" + re.escape(f"chmod 600 {pw}"),
    ):
        read_password(str(pw))


def test_a_password_file_0600_is_read(tmp_path: Path) -> None:
    pw = tmp_path / "password"
    pw.write_text("s3cret\nignored\n")
    pw.chmod(0o600)
    assert read_password(str(pw)) == "s3cret"


def test_a_file_owned_by_another_user_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pw = tmp_path / "password"
    pw.write_text("s3cret\n")
    pw.chmod(0o600)
    monkeypatch.setattr(os, "geteuid", lambda: pw.stat().st_uid + 1)  # as if another user ran serve
    with pytest.raises(ConfigError, match="chown .* " + re.escape(str(pw))):
        check_secret_file(pw, "password file")


def test_a_missing_password_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read password file"):
        read_password(str(tmp_path / "nope"))


def test_outputs_are_readable_by_the_service_and_secrets_never_are(tmp_path: Path) -> None:
    """Artifacts copied to a device must be readable by the service user; a key must never be readable
    by others, not even between the write and a chmod."""
    from rl2edge.fileio import write_bytes_atomic

    write_bytes_atomic(tmp_path / "manifest.json", b"{}")
    write_bytes_atomic(tmp_path / "serve.key.pem", b"secret", mode=0o600)
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o644
    assert (tmp_path / "serve.key.pem").stat().st_mode & 0o777 == 0o600
