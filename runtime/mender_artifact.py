"""A verified artifact folder as a Mender module-image artifact (`rl2edge package --mender`).

The payload is one file, `policy.tar`: the artifact folder under `policy/`, regular files only, in a
fixed order. Its type is `rl2edge-policy`, the name of the update module that installs it
(plc_bridge.mender_module). Its `provides` record the manifest's sha256 and the plant-wiring digest
(`Manifest.io_digest`); its `depends` ask for the digest the device serves now, so that the Mender client
refuses a policy with another observation layout before anything is written on the device. A device's
first policy has nothing to depend on (`first=True`).

`mender-artifact` (the Debian package mender-artifact, 3.9) writes and signs the file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rl2edge.errors import ConfigError
from rl2edge.runtime.manifest import Manifest, load_manifest

PAYLOAD_TYPE = "rl2edge-policy"
PAYLOAD_FILE = "policy.tar"
TOP = "policy"
"""The one folder in the tar: the artifact folder's contents."""
PROVIDES_MANIFEST = "rl2edge.manifest_sha256"
PROVIDES_IO = "rl2edge.io_digest"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
"""Artifact names: also the policy's folder name on the device, so no separators and no leading dot."""
WRITE_TIMEOUT_S = 300.0


@dataclass(frozen=True)
class Packaged:
    path: Path
    name: str
    manifest_sha256: str
    io_digest: str
    signed: bool
    depends: bool


def manifest_sha256(artifact: Path) -> str:
    from rl2edge.fileio import sha256_file
    from rl2edge.runtime.manifest import MANIFEST_FILE

    return sha256_file(artifact / MANIFEST_FILE)


def default_name(m: Manifest, digest: str) -> str:
    env = str((m.data.get("source") or {}).get("env_id", "policy"))
    mode = str(m.quantization.get("mode", ""))
    base = re.sub(r"[^A-Za-z0-9._+-]+", "-", f"{env}-{mode}").strip("-.") or "policy"
    return f"{base[:100]}-{digest[:12]}"


def check_name(name: str) -> str:
    if not _NAME.match(name):
        raise ConfigError(
            f"artifact name {name!r}: use 1 to 128 letters, digits, '.', '_', '+' or '-', starting with a "
            "letter or digit (it becomes the policy's folder name on the device)"
        )
    return name


def mender_artifact_tool() -> str:
    tool = shutil.which("mender-artifact")
    if tool is None:
        raise ConfigError(
            "mender-artifact is not installed: apt-get install mender-artifact (Debian/Ubuntu), or get it "
            "from https://docs.mender.io/downloads"
        )
    return tool


def write_policy_tar(artifact: Path, out: Path) -> None:
    """The artifact folder's regular files under `policy/`, sorted, with fixed owners and times, so that
    one folder always gives one tar."""
    files = sorted(p for p in artifact.rglob("*") if p.is_file() and not p.is_symlink())

    def fixed(info: tarfile.TarInfo) -> tarfile.TarInfo:
        info.uid = info.gid = 0
        info.uname = info.gname = ""
        info.mtime = 0
        info.mode = 0o644
        return info

    with tarfile.open(out, "w", format=tarfile.PAX_FORMAT) as tar:
        for p in files:
            tar.add(p, arcname=f"{TOP}/{p.relative_to(artifact).as_posix()}", recursive=False, filter=fixed)


def package(
    artifact: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    device_types: list[str],
    name: str | None = None,
    sign_key: str | os.PathLike[str] | None = None,
    first: bool = False,
) -> Packaged:
    """Write `out` (a .mender file) atomically from the verified artifact folder `artifact`."""
    src = Path(artifact)
    m = load_manifest(src)  # the manifest, its schema and every file's sha256: nothing unverified leaves
    digest = manifest_sha256(src)
    name = check_name(name or default_name(m, digest))
    if not device_types:
        raise ConfigError("give the device type(s) it installs on: --device-type (e.g. jetson-orin-nano)")
    for t in device_types:
        if not _NAME.match(t):
            raise ConfigError(f"device type {t!r}: use letters, digits, '.', '_', '+' or '-'")
    key = Path(sign_key) if sign_key else None
    if key is not None and not key.is_file():
        raise ConfigError(f"signing key {key} does not exist; give a PEM private key (RSA or ECDSA)")
    tool = mender_artifact_tool()
    out = Path(out)
    if out.suffix != ".mender":
        raise ConfigError(f"{out}: a Mender artifact's file name ends in .mender")
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".rl2edge-package-", dir=out.parent) as tmp_dir:
        tmp = Path(tmp_dir)
        write_policy_tar(src, tmp / PAYLOAD_FILE)
        meta = {
            "rl2edge": {
                "manifest_sha256": digest,
                "io_digest": m.io_digest,
                "env_id": str((m.data.get("source") or {}).get("env_id", "")),
                "mode": str(m.quantization.get("mode", "")),
            }
        }
        (tmp / "meta.json").write_text(json.dumps(meta))
        cmd = [tool, "write", "module-image", "--type", PAYLOAD_TYPE, "--artifact-name", name]
        for t in device_types:
            cmd += ["--device-type", t]
        cmd += ["--file", str(tmp / PAYLOAD_FILE), "--meta-data", str(tmp / "meta.json")]
        cmd += ["--provides", f"{PROVIDES_MANIFEST}:{digest}", "--provides", f"{PROVIDES_IO}:{m.io_digest}"]
        cmd += ["--software-name", PAYLOAD_TYPE, "--software-version", name]
        if not first:
            cmd += ["--depends", f"{PROVIDES_IO}:{m.io_digest}"]
        if key is not None:
            cmd += ["--key", str(key)]
        written = tmp / "out.mender"
        cmd += ["--output-path", str(written)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=WRITE_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise ConfigError(f"mender-artifact did not finish within {WRITE_TIMEOUT_S:g} s") from None
        if done.returncode != 0 or not written.is_file():
            why = (done.stderr or done.stdout).strip().splitlines()
            if key is not None and "ParsePKCS8PrivateKey" in done.stderr:
                why.append(
                    f"{key} is a PKCS#8 RSA key and mender-artifact reads PKCS#1: convert it with "
                    f"`openssl rsa -in {key} -out {key} -traditional`"
                )
            raise ConfigError(
                f"mender-artifact refused to write {out}: {why[-1] if why else f'exit {done.returncode}'}"
            )
        os.replace(written, out)
    return Packaged(out, name, digest, m.io_digest, key is not None, not first)
