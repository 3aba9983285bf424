"""OPC UA security for both ends: Basic256Sha256 Sign / SignAndEncrypt with explicitly trusted peer
certificates (pinned by fingerprint, never trust-on-first-use), and username/password.

Passwords live in SecurityConfig.password (excluded from repr) and are never logged.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import hashlib
import hmac
import logging
import os
import socket
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from asyncua import Client, Server, ua
from asyncua.common.utils import ServiceError
from asyncua.crypto import security_policies
from asyncua.crypto.cert_gen import (
    dump_private_key_as_pem,
    generate_private_key,
    generate_self_signed_app_certificate,
)
from asyncua.crypto.permission_rules import User, UserRole
from asyncua.crypto.validator import CertificateValidator, CertificateValidatorOptions
from asyncua.server.internal_server import InternalServer
from cryptography import x509
from cryptography.exceptions import UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat
from cryptography.x509.oid import ExtendedKeyUsageOID

from rl2edge.errors import ConfigError
from rl2edge.fileio import write_bytes_atomic

_logger = logging.getLogger(__name__)

MODES = {
    "none": ua.MessageSecurityMode.None_,
    "sign": ua.MessageSecurityMode.Sign,
    "sign_and_encrypt": ua.MessageSecurityMode.SignAndEncrypt,
}
_SERVER_POLICY = {
    "none": ua.SecurityPolicyType.NoSecurity,
    "sign": ua.SecurityPolicyType.Basic256Sha256_Sign,
    "sign_and_encrypt": ua.SecurityPolicyType.Basic256Sha256_SignAndEncrypt,
}
PASSWORD_ENV = "RL2EDGE_OPCUA_PASSWORD"


@dataclass(frozen=True)
class SecurityConfig:
    mode: str = "none"
    """none | sign | sign_and_encrypt (Basic256Sha256)."""
    certificate: Path | None = None
    """This application's certificate (DER or PEM)."""
    private_key: Path | None = None
    """This application's private key (PEM)."""
    trusted: tuple[Path, ...] = ()
    """Peer certificates trusted explicitly: for a client the server's, for a server the clients'."""
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    allow_plaintext_password: bool = False
    """With mode none, a username's password crosses the network unencrypted: only if asked for by name."""

    def check(self, role: str) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"--security {self.mode!r}: choose one of {', '.join(MODES)}")
        if self.mode != "none":
            for name in ("certificate", "private_key"):
                path = getattr(self, name)
                if path is None:
                    raise ConfigError(
                        f"--security {self.mode} needs --{name.replace('_', '-')} (make one with `rl2edge certs`)"
                    )
                if not Path(path).is_file():
                    raise ConfigError(f"{name.replace('_', ' ')} file {path} does not exist")
                if name == "private_key":
                    check_secret_file(path, "private key")
            _check_key_pair(Path(self.certificate), Path(self.private_key))  # type: ignore[arg-type]
            if not self.trusted:
                peer = (
                    "the server's certificate (--server-cert)"
                    if role == "client"
                    else "the clients' certificates (--trust)"
                )
                raise ConfigError(
                    f"--security {self.mode} needs {peer}: peers are trusted explicitly, never on first use"
                )
            for p in self.trusted:
                if not Path(p).is_file():
                    raise ConfigError(f"trusted certificate {p} does not exist")
                load_cert(Path(p))
        if (self.username is None) != (self.password is None):
            raise ConfigError(
                f"a username needs a password (--password-file or ${PASSWORD_ENV}) and vice versa"
            )
        if self.username is not None and self.mode == "none":
            if not self.allow_plaintext_password:
                raise ConfigError(
                    "--user with --security none sends the password in clear text; use --security sign or "
                    "sign_and_encrypt (the password is then encrypted with the peer's certificate), or pass "
                    "--allow-plaintext-password on a network you trust"
                )
            _logger.warning(
                "--allow-plaintext-password: the password of user %r crosses the network unencrypted "
                "(--security none)",
                self.username,
            )


def check_secret_file(path: str | os.PathLike[str], what: str) -> None:
    """Refuse a secret file (private key, password) that someone else could read or replace.

    It must be owned by the user running this process (effective uid) and carry no group or other
    permission bits (mode 0600 or 0400); otherwise a one-line ConfigError names the file and the fix.
    Skipped where the OS has no POSIX owners and modes (Windows).
    """
    if not hasattr(os, "geteuid"):
        return
    try:
        st = os.stat(path)
    except OSError as exc:
        raise ConfigError(f"cannot read {what} {path}: {exc.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{what} {path} is not a regular file")
    euid = os.geteuid()
    problems: list[str] = []
    fixes: list[str] = []
    if st.st_uid != euid:
        user = _user_name(euid)
        problems.append(f"is owned by {_user_name(st.st_uid)}, not by {user} who runs rl2edge")
        fixes.append(f"chown {user} {path}")
    if st.st_mode & 0o077:
        problems.append(f"has mode {stat.S_IMODE(st.st_mode):04o}, open to group or others")
        fixes.append(f"chmod 600 {path}")
    if problems:
        raise ConfigError(f"{what} {path} {' and '.join(problems)}: {' && '.join(fixes)}")


def _user_name(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return str(uid)


def read_password(password_file: str | None) -> str | None:
    """From a file (first line) or the environment; never from the command line, where `ps` shows it.
    A password file must pass check_secret_file (owned by the user running rl2edge, mode 0600)."""
    if password_file:
        check_secret_file(password_file, "password file")
        try:
            return Path(password_file).read_text().splitlines()[0]
        except (OSError, IndexError):
            raise ConfigError(f"cannot read a password from {password_file}") from None
    return os.environ.get(PASSWORD_ENV)


def _check_key_pair(cert_path: Path, key_path: Path) -> None:
    """The certificate and key parse and belong together: found here with one line, not as a handshake
    that fails at every reconnect."""
    cert = load_cert(cert_path)
    try:
        key = serialization.load_pem_private_key(key_path.read_bytes(), password=None)
    except OSError as exc:
        raise ConfigError(f"cannot read private key {key_path}: {exc.strerror}") from None
    except TypeError:  # encrypted
        raise ConfigError(
            f"private key {key_path} is encrypted; rl2edge reads unencrypted keys protected by file mode 0600 "
            "(openssl pkey -in KEY -out KEY.pem)"
        ) from None
    except (ValueError, UnsupportedAlgorithm):
        raise ConfigError(f"{key_path} is not a PEM private key (make one with `rl2edge certs`)") from None
    if cert.public_key().public_bytes(
        Encoding.DER, PublicFormat.SubjectPublicKeyInfo
    ) != key.public_key().public_bytes(Encoding.DER, PublicFormat.SubjectPublicKeyInfo):
        raise ConfigError(
            f"private key {key_path} does not belong to certificate {cert_path}: pass the key made with it"
        )


def load_cert(path: Path) -> x509.Certificate:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError(f"cannot read certificate {path}: {exc.strerror}") from None
    try:
        return (
            x509.load_der_x509_certificate(data)
            if not data.startswith(b"-----")
            else x509.load_pem_x509_certificate(data)
        )
    except ValueError:
        raise ConfigError(f"{path} is not a DER or PEM certificate") from None


def application_uri(cert_path: Path) -> str:
    cert = load_cert(cert_path)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        return san.get_values_for_type(x509.UniformResourceIdentifier)[0]
    except (x509.ExtensionNotFound, IndexError):
        raise ConfigError(f"certificate {cert_path} has no application URI in its subjectAltName") from None


def fingerprint(cert: x509.Certificate) -> str:
    return hashlib.sha256(cert.public_bytes(Encoding.DER)).hexdigest()


async def apply_client_security(client: Client, sec: SecurityConfig) -> None:
    if sec.mode != "none":
        assert sec.certificate and sec.private_key  # checked by SecurityConfig.check
        client.application_uri = application_uri(sec.certificate)
        try:
            await client.set_security(
                security_policies.SecurityPolicyBasic256Sha256,
                certificate=str(sec.certificate),
                private_key=str(sec.private_key),
                server_certificate=str(sec.trusted[0]),
                mode=MODES[sec.mode],
            )
        except Exception as exc:  # asyncua/cryptography raise several types for bad key material
            raise ConfigError(f"cannot set up {sec.mode} security: {exc}") from None
    if sec.username is not None:
        client.set_user(sec.username)
        client.set_password(sec.password or "")


async def pinned_certificate_mismatch(endpoint: str, sec: SecurityConfig, timeout_s: float) -> str | None:
    """Why a secure connect failed, if the reason is that the server is not the one pinned.

    With a --server-cert that is not the server's, the client encrypts for the wrong key; the server
    cannot decrypt and says nothing, so the client sees only a timeout. The server's certificate is
    public (GetEndpoints needs no security), so fetch it and compare. None: it matches, or cannot be told.
    """
    if sec.mode == "none" or not sec.trusted:
        return None
    pinned_path = Path(sec.trusted[0])
    pinned = load_cert(pinned_path)
    pinned_der = pinned.public_bytes(Encoding.DER)
    probe = Client(endpoint, timeout=timeout_s)
    try:
        endpoints = await asyncio.wait_for(probe.connect_and_get_server_endpoints(), timeout_s)
    except Exception as exc:  # the server may not answer at all: then there is nothing to compare
        _logger.debug("GetEndpoints for the certificate check failed: %s", exc)
        return None
    presented = [bytes(e.ServerCertificate) for e in endpoints if e.ServerCertificate]
    if not presented or any(c.startswith(pinned_der) for c in presented):  # a chain starts with the leaf
        return None
    try:
        theirs = x509.load_der_x509_certificate(presented[0])
        who = f"{theirs.subject.rfc4514_string()} (sha256 {fingerprint(theirs)[:16]}...)"
    except ValueError:
        who = "a certificate rl2edge cannot parse"
    return (
        f"the server at {endpoint} presents {who}, not the pinned --server-cert {pinned_path} "
        f"({pinned.subject.rfc4514_string()}, sha256 {fingerprint(pinned)[:16]}...): if the PLC's certificate was "
        "renewed, copy the new one; otherwise check that the endpoint is the PLC you mean"
    )


class PinnedCertificateValidator:
    """Accept a client certificate only if it is one of the trusted files (by SHA-256 fingerprint),
    inside its validity period, and names the application URI the client presents."""

    def __init__(self, trusted: Iterable[Path]):
        self._fingerprints = {fingerprint(load_cert(p)) for p in trusted}
        self._basic = CertificateValidator(
            CertificateValidatorOptions.TIME_RANGE
            | CertificateValidatorOptions.URI
            | CertificateValidatorOptions.PEER_CLIENT
        )

    async def __call__(self, cert: x509.Certificate, app_description: ua.ApplicationDescription) -> None:
        if fingerprint(cert) not in self._fingerprints:
            _logger.warning("rejected untrusted client certificate %s", cert.subject.rfc4514_string())
            raise ServiceError(ua.StatusCodes.BadCertificateUntrusted)
        await self._basic.validate(cert, app_description)


class PasswordUserManager:
    """One username and password; anything else is refused."""

    def __init__(self, username: str, password: str):
        self._username, self._password = username, password

    def get_user(
        self,
        iserver: InternalServer,
        username: str | None = None,
        password: str | None = None,
        certificate: Any = None,
    ) -> User | None:
        if username == self._username and hmac.compare_digest(
            (password or "").encode(), self._password.encode()
        ):
            return User(role=UserRole.User)
        _logger.warning("rejected login for user %r", username)
        return None


async def apply_server_security(server: Server, sec: SecurityConfig) -> None:
    server.set_security_policy([_SERVER_POLICY[sec.mode]])
    if sec.mode != "none":
        assert sec.certificate and sec.private_key
        await server.set_application_uri(application_uri(sec.certificate))
        await server.load_certificate(str(sec.certificate))
        await server.load_private_key(str(sec.private_key))
        server.set_certificate_validator(PinnedCertificateValidator(sec.trusted))
    if sec.username is not None:
        server.set_identity_tokens([ua.UserNameIdentityToken])


MAX_CERT_DAYS = 36500
"""rl2edge certs --days: past 100 years the date overflows datetime long before it means anything."""


def make_certificate(
    out_dir: Path, name: str, uri: str, host: str | None = None, days: int = 365
) -> tuple[Path, Path]:
    """A self-signed application certificate (DER) and its key (PEM, mode 0600), for tests and commissioning.
    Refuses (ConfigError) a name that is not a plain file name, a validity under one day, and files that
    exist already: a key is never overwritten."""
    if not name or name in (".", "..") or "/" in name or "\\" in name or name.strip() != name:
        raise ConfigError(
            f"--name {name!r}: a plain name (letters, digits, - _ .), used for NAME.der and NAME.key.pem"
        )
    if not 1 <= days <= MAX_CERT_DAYS:
        raise ConfigError(
            f"--days {days}: a certificate must be valid for at least 1 day and at most {MAX_CERT_DAYS} (100 years)"
        )
    existing = [p for p in (Path(out_dir) / f"{name}.der", Path(out_dir) / f"{name}.key.pem") if p.exists()]
    if existing:
        raise ConfigError(
            f"{existing[0]} exists; choose another --name or --out (a key is never overwritten)"
        )
    if Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise ConfigError(f"--out {out_dir} exists and is not a directory")
    host = host or socket.gethostname()
    key = generate_private_key()
    cert = generate_self_signed_app_certificate(
        key,
        name,
        {"organizationName": "rl2edge"},
        [x509.UniformResourceIdentifier(uri), x509.DNSName(host), x509.DNSName("localhost")],
        extended=[ExtendedKeyUsageOID.CLIENT_AUTH, ExtendedKeyUsageOID.SERVER_AUTH],
        days=days,
    )
    cert_path, key_path = out_dir / f"{name}.der", out_dir / f"{name}.key.pem"
    try:
        write_bytes_atomic(key_path, dump_private_key_as_pem(key), mode=0o600)
        try:
            write_bytes_atomic(cert_path, cert.public_bytes(Encoding.DER))
        except BaseException:
            key_path.unlink(missing_ok=True)  # a key without its certificate would block the next try
            raise
    except OSError as exc:
        raise ConfigError(
            f"--out {out_dir}: cannot write the certificate there ({exc.strerror or exc}); choose a writable folder"
        ) from None
    _logger.info(
        "certificate %s (uri %s, valid until %s), key %s",
        cert_path,
        uri,
        (dt.datetime.now(dt.timezone.utc) + dt.timedelta(days=days)).date(),
        key_path,
    )
    return cert_path, key_path


class _Redact(logging.Filter):
    def __init__(self, secret: str):
        super().__init__()
        self._secret = secret

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if self._secret in message:
            record.msg, record.args = message.replace(self._secret, "***"), ()
        return True


def redact_in_logs(secret: str | None) -> None:
    """Mask a secret in every log line from here on, whoever logs it: asyncua's debug log prints whole
    ActivateSession requests, password included."""
    if secret:
        for handler in logging.getLogger().handlers:
            handler.addFilter(_Redact(secret))
