"""OPC UA security against a real server: Basic256Sha256 SignAndEncrypt with explicitly trusted
certificates, untrusted clients refused, username/password enforced, passwords never logged."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest
from asyncua.ua.uaerrors import BadCertificateUntrusted, BadIdentityTokenRejected, BadUserAccessDenied

from rl2edge.errors import ConfigError
from rl2edge.plc_bridge.client import BridgeConfig, PlantIo, PlcClient
from rl2edge.plc_bridge.security import SecurityConfig, make_certificate
from rl2edge.plc_bridge.sim import PlcSim, SimConfig
from testkit.plc import free_port, running, stop

PASSWORD = "s3cret-Pa55word!"


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Path, Path]]:
    d = tmp_path_factory.mktemp("pki")
    return {
        name: make_certificate(d, name, f"urn:rl2edge:{name}", "localhost")
        for name in ("plc", "serve", "intruder")
    }


async def _session(sim_sec: SecurityConfig, client_sec: SecurityConfig) -> list:
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    sim = PlcSim(SimConfig("CartPole-v1", endpoint=url, mode="realtime", security=sim_sec))
    stop_sim = asyncio.Event()
    task = asyncio.create_task(sim.run(stop_sim))
    try:
        for _ in range(100):
            if sim.server is not None:
                break
            await asyncio.sleep(0.05)
        cartpole = PlantIo(4, 1, True, (0.0,), (1.0,))
        async with PlcClient(BridgeConfig(url, security=client_sec, connect_timeout_s=5), cartpole) as plc:
            reading = await plc.read()
            assert (await plc.answer([1.0], 0, reading.sequence)).answered
            return list(reading.observation)
    finally:
        stop_sim.set()
        await task


def _server_sec(pki, mode: str = "sign_and_encrypt", **kw) -> SecurityConfig:
    cert, key = pki["plc"]
    return SecurityConfig(mode, cert, key, trusted=(pki["serve"][0],), **kw)


def _client_sec(pki, who: str = "serve", mode: str = "sign_and_encrypt", **kw) -> SecurityConfig:
    cert, key = pki[who]
    return SecurityConfig(mode, cert, key, trusted=(pki["plc"][0],), **kw)


@pytest.mark.parametrize("mode", ["sign", "sign_and_encrypt"])
def test_trusted_certificates_make_a_secure_session(pki, mode: str) -> None:
    obs = asyncio.run(_session(_server_sec(pki, mode), _client_sec(pki, mode=mode)))
    assert len(obs) == 4


def test_a_client_the_server_does_not_trust_is_rejected(pki) -> None:
    with pytest.raises(BadCertificateUntrusted):
        asyncio.run(_session(_server_sec(pki), _client_sec(pki, who="intruder")))


def test_an_unencrypted_client_is_rejected_by_an_encrypting_server(pki) -> None:
    with pytest.raises(Exception):  # noqa: B017 (asyncua raises several types for a refused endpoint)
        asyncio.run(_session(_server_sec(pki), SecurityConfig()))


def test_user_and_password_are_enforced(pki) -> None:
    server = _server_sec(pki, username="operator", password=PASSWORD)
    assert asyncio.run(_session(server, _client_sec(pki, username="operator", password=PASSWORD)))
    with pytest.raises(BadIdentityTokenRejected):
        asyncio.run(_session(server, _client_sec(pki)))  # anonymous
    with pytest.raises(BadUserAccessDenied):
        asyncio.run(_session(server, _client_sec(pki, username="operator", password="wrong")))


def test_a_server_that_is_not_the_pinned_one_is_named_not_a_timeout(pki) -> None:
    """The client pins the intruder's certificate, the server presents the PLC's: a TimeoutError after the
    connect timeout before, now the two certificates by subject and fingerprint."""
    client = SecurityConfig("sign_and_encrypt", *pki["serve"], trusted=(pki["intruder"][0],))
    with pytest.raises(
        ConfigError, match=r"presents O=rl2edge,CN=plc .*not the pinned --server-cert .*intruder"
    ):
        asyncio.run(_session(_server_sec(pki), client))


def test_unusable_key_material_is_refused_before_connecting(pki, tmp_path: Path) -> None:
    cert, key = pki["serve"]
    garbage = tmp_path / "garbage.key.pem"
    garbage.write_text("-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")
    garbage.chmod(0o600)
    with pytest.raises(ConfigError, match="is not a PEM private key"):
        SecurityConfig("sign_and_encrypt", cert, garbage, trusted=(pki["plc"][0],)).check("client")
    with pytest.raises(ConfigError, match="does not belong to certificate"):
        SecurityConfig("sign_and_encrypt", cert, pki["plc"][1], trusted=(pki["plc"][0],)).check("client")
    not_a_cert = tmp_path / "plc.der"
    not_a_cert.write_bytes(b"\x30\x03garbage")
    with pytest.raises(ConfigError, match="is not a DER or PEM certificate"):
        SecurityConfig("sign_and_encrypt", cert, key, trusted=(not_a_cert,)).check("client")


def test_security_misconfiguration_is_a_clear_error(pki) -> None:
    with pytest.raises(ConfigError, match="never on first use"):
        replace(_client_sec(pki), trusted=()).check("client")
    with pytest.raises(ConfigError, match="needs --certificate"):
        SecurityConfig("sign_and_encrypt").check("client")
    with pytest.raises(ConfigError, match="needs a password"):
        SecurityConfig(username="operator").check("client")
    assert PASSWORD not in repr(_client_sec(pki, username="operator", password=PASSWORD))


def test_a_password_never_crosses_unencrypted_unless_asked_for_by_name(
    caplog: pytest.LogCaptureFixture,
) -> None:
    for role in ("client", "server"):
        with pytest.raises(
            ConfigError, match=r"sends the password in clear text.*--allow-plaintext-password"
        ):
            SecurityConfig(username="operator", password=PASSWORD).check(role)
    with caplog.at_level("WARNING", logger="rl2edge.plc_bridge.security"):
        SecurityConfig(username="operator", password=PASSWORD, allow_plaintext_password=True).check("client")
    assert "crosses the network unencrypted" in caplog.text and PASSWORD not in caplog.text


def test_serve_with_encryption_and_a_password_never_logs_it(cartpole_all, pki, tmp_path: Path) -> None:
    _, root = cartpole_all
    url = f"opc.tcp://127.0.0.1:{free_port()}"
    pw_file = tmp_path / "pw"
    pw_file.write_text(PASSWORD + "\n")
    pw_file.chmod(0o600)  # serve and plc-sim refuse a password file open to group or others
    sim_args = [
        "plc-sim",
        "--env",
        "CartPole-v1",
        "--endpoint",
        url,
        "--mode",
        "realtime",
        "--security",
        "sign_and_encrypt",
        "--cert",
        str(pki["plc"][0]),
        "--key",
        str(pki["plc"][1]),
        "--trust",
        str(pki["serve"][0]),
        "--user",
        "operator",
        "--password-file",
        str(pw_file),
    ]
    serve_args = [
        "-v",
        "serve",
        str(root / "fp32"),
        "--endpoint",
        url,
        "--period-ms",
        "20",
        "--cycles",
        "20",
        "--summary",
        str(tmp_path / "s.json"),
        "--security",
        "sign_and_encrypt",
        "--cert",
        str(pki["serve"][0]),
        "--key",
        str(pki["serve"][1]),
        "--server-cert",
        str(pki["plc"][0]),
        "--user",
        "operator",
    ]
    with running(sim_args, tmp_path / "sim.log"):
        from testkit.plc import start

        proc = start(serve_args, tmp_path / "serve.log", env={"RL2EDGE_OPCUA_PASSWORD": PASSWORD})
        try:
            assert proc.wait(timeout=120) == 0, (tmp_path / "serve.log").read_text()
        finally:
            stop(proc)
    summary = json.loads((tmp_path / "s.json").read_text())
    assert summary["cycles"] == 20 and summary["security"] == "sign_and_encrypt"
    for log in ("serve.log", "sim.log"):
        assert PASSWORD not in (tmp_path / log).read_text()
