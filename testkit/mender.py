"""A device with the real Mender client in standalone mode (`mender install FILE`, `commit`, `rollback`),
for the fleet tests and benchmark: its own config and state folder, serve's config file, and the
rl2edge-policy update module installed where the client looks for it.

The client reads update modules from /usr/share/mender/modules/v3 and, before its first install, the
device's artifact name from /etc/mender/artifact_info; neither path can be moved, so they are written there
(as root; the tests skip elsewhere). Everything else lives in the test's folder."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testkit.cli import rl2edge
from testkit.plc import free_port

PACKAGES = ("mender-client", "mender-artifact")
DEVICE_TYPE = "rl2edge-test-orin"
ARTIFACT_INFO = Path("/etc/mender/artifact_info")


def missing() -> str:
    """Why the Mender tests cannot run here, or ''."""
    if not all(shutil.which(t) for t in ("mender", "mender-artifact")):
        return f"needs the Debian packages {' and '.join(PACKAGES)} (apt-get install {' '.join(PACKAGES)})"
    if os.geteuid() != 0:
        return "the Mender client installs update modules as root; run as root"
    return ""


@dataclass
class Device:
    root: Path
    url: str
    metrics_port: int
    verify_key: Path | None = None

    @property
    def policies(self) -> Path:
        return self.root / "policies"

    @property
    def link(self) -> Path:
        return self.policies / "current"

    @property
    def serve_config(self) -> Path:
        return self.root / "serve.yaml"

    @property
    def metrics(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}"

    def mender(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        cmd = ["mender", "-c", str(self.root / "mender.conf"), "-d", str(self.root / "data"), "--no-syslog"]
        return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=timeout, check=False)

    def mender_popen(self, *args: str) -> subprocess.Popen[str]:
        cmd = ["mender", "-c", str(self.root / "mender.conf"), "-d", str(self.root / "data"), "--no-syslog"]
        return subprocess.Popen(
            [*cmd, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True
        )

    def show_artifact(self) -> str:
        return self.mender("show-artifact").stdout.strip()

    def serve_args(self, *extra: str) -> list[str]:
        return ["serve", "--config", str(self.serve_config), *extra]


def wait_until(what: str, check: Callable[[], Any], within_s: float = 30.0) -> Any:
    """check()'s first truthy value, polled every 50 ms; TimeoutError naming `what` after `within_s`."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if value := check():
            return value
        time.sleep(0.05)
    raise TimeoutError(f"{what} did not happen within {within_s} s")


def ready(dev: Device) -> bool:
    """serve answers /readyz with 200 (connected, its last cycle OK)."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(dev.metrics + "/readyz", timeout=2) as r:
            return bool(r.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def device(
    root: Path,
    *,
    commit_timeout: float = 60,
    verify_key: Path | None = None,
    shadow_min_agreement: float = 0.5,
    watch_interval: float = 0.2,
    shadow_cycles: int = 20,
) -> Device:
    """A fresh device in `root`: Mender's config and state, serve's config, the module installed."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "data").mkdir(exist_ok=True)
    (root / "policies").mkdir(exist_ok=True)
    (root / "data" / "device_type").write_text(f"device_type={DEVICE_TYPE}\n")
    conf: dict[str, str] = {"DeviceTypeFile": str(root / "data" / "device_type")}
    if verify_key is not None:
        conf["ArtifactVerifyKey"] = str(verify_key)
    (root / "mender.conf").write_text(json.dumps(conf))
    if not ARTIFACT_INFO.exists():
        ARTIFACT_INFO.parent.mkdir(parents=True, exist_ok=True)
        ARTIFACT_INFO.write_text("artifact_name=factory\n")
    dev = Device(root, f"opc.tcp://127.0.0.1:{free_port()}", free_port(), verify_key)
    dev.serve_config.write_text(
        f"artifact: policies/current\nendpoint: {dev.url}\nperiod_ms: 20\nsummary: summary.json\n"
        f"watch: true\nwatch_interval: {watch_interval}\nshadow_cycles: {shadow_cycles}\n"
        f"shadow_min_agreement: {shadow_min_agreement}\nmetrics_port: {dev.metrics_port}\n"
    )
    done = rl2edge(
        "mender",
        "install-module",
        "--serve-config",
        str(dev.serve_config),
        "--commit-timeout",
        str(commit_timeout),
    )
    assert done.returncode == 0, done.stderr
    return dev


def package(artifact: Path, out: Path, *extra: str) -> Path:
    done = rl2edge(
        "package", str(artifact), "--mender", "--device-type", DEVICE_TYPE, "--out", str(out), *extra
    )
    assert done.returncode == 0, done.stderr
    return out


def keypair(folder: Path, kind: str = "ecdsa") -> tuple[Path, Path]:
    """(private, public) PEM keys made by openssl: ECDSA P-256 or RSA 3072."""
    folder.mkdir(parents=True, exist_ok=True)
    private, public = folder / f"{kind}.key", folder / f"{kind}.pub"
    if kind == "ecdsa":
        make = ["openssl", "ecparam", "-genkey", "-name", "prime256v1", "-noout", "-out", str(private)]
    else:
        make = [
            "openssl",
            "genrsa",
            "-traditional",
            "-out",
            str(private),
            "3072",
        ]  # PKCS#1: mender-artifact reads it
    subprocess.run(make, check=True, capture_output=True)
    subprocess.run(
        ["openssl", "pkey", "-in", str(private), "-pubout", "-out", str(public)],
        check=True,
        capture_output=True,
    )
    return private, public
