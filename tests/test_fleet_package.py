"""The fleet parts that need no Mender client: the layout digest a `depends` carries, the payload's tar
(one folder gives one tar; the module unpacks nothing but files under policy/), and the one-line refusals
of `rl2edge package` and `rl2edge mender install-module` through the real CLI. tests/test_mender.py runs
the real client."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from rl2edge.plc_bridge.mender_module import ModuleError, _unpack
from rl2edge.runtime.manifest import load_manifest
from rl2edge.runtime.mender_artifact import write_policy_tar
from testkit.cli import assert_clean_failure, rl2edge


def test_the_layout_digest_follows_the_plant_wiring_not_the_weights(
    cartpole_all, cartpole_flipped, pendulum_fp32
) -> None:
    _, root = cartpole_all
    digests = {m: load_manifest(root / m).io_digest for m in ("fp32", "int8", "fp16", "dynamic")}
    assert len(set(digests.values())) == 1  # quantization changes the weights, not the wiring
    assert load_manifest(cartpole_flipped).io_digest == digests["fp32"]  # other weights, same wiring
    assert load_manifest(pendulum_fp32[1]).io_digest != digests["fp32"]  # another layout


def test_one_folder_gives_one_tar(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    write_policy_tar(root / "int8", tmp_path / "a.tar")
    os.utime(root / "int8" / "manifest.json")  # a newer mtime: not in the tar
    write_policy_tar(root / "int8", tmp_path / "b.tar")
    assert (tmp_path / "a.tar").read_bytes() == (tmp_path / "b.tar").read_bytes()
    _unpack(tmp_path / "a.tar", tmp_path / "out")
    load_manifest(tmp_path / "out" / "policy")  # whole: every file's sha256


def _tar_with(tmp_path: Path, member: tarfile.TarInfo, data: bytes = b"") -> Path:
    path = tmp_path / "evil.tar"
    with tarfile.open(path, "w") as tar:
        tar.addfile(member, io.BytesIO(data) if data else None)
    return path


@pytest.mark.parametrize(
    "name, kind",
    [("policy/../../escape", tarfile.REGTYPE), ("/etc/x", tarfile.REGTYPE), ("policy/link", tarfile.SYMTYPE),
     ("other/file", tarfile.REGTYPE), ("policy/dev", tarfile.CHRTYPE)],
)  # fmt: skip
def test_the_module_unpacks_only_files_under_policy(tmp_path: Path, name: str, kind: bytes) -> None:
    member = tarfile.TarInfo(name)
    member.type = kind
    if kind == tarfile.SYMTYPE:
        member.linkname = "/etc/passwd"
    data = b"x" if kind == tarfile.REGTYPE else b""
    member.size = len(data)
    with pytest.raises(ModuleError, match="is not a file under policy/"):
        _unpack(_tar_with(tmp_path, member, data), tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*")) if (tmp_path / "out").exists() else True
    assert not (tmp_path.parent / "escape").exists()


def test_package_refuses_in_one_line(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    art = str(root / "int8")
    out = str(tmp_path / "p.mender")
    assert_clean_failure(rl2edge("package", art, "--device-type", "orin", "--out", out), "--mender")
    assert_clean_failure(
        rl2edge(
            "package", art, "--mender", "--device-type", "orin", "--out", out, env={"PATH": str(tmp_path)}
        ),
        "apt-get install mender-artifact",
    )
    assert_clean_failure(rl2edge("package", art, "--mender", "--out", out), "--device-type")
    assert_clean_failure(
        rl2edge("package", art, "--mender", "--device-type", "orin", "--name", "../x", "--out", out),
        "artifact name '../x'",
    )
    assert_clean_failure(
        rl2edge("package", str(tmp_path), "--mender", "--device-type", "orin", "--out", out),
        "not an rl2edge artifact",
    )
    assert not (tmp_path / "p.mender").exists()


def test_install_module_writes_a_module_that_answers_the_client(tmp_path: Path) -> None:
    config = tmp_path / "serve.yaml"
    dirs = ["--modules-dir", str(tmp_path / "modules"), "--inventory-dir", str(tmp_path / "inventory")]
    config.write_text("artifact: policies/current\nendpoint: opc.tcp://127.0.0.1:4840\n")
    assert_clean_failure(
        rl2edge("mender", "install-module", "--serve-config", str(config), *dirs), "watch: true"
    )
    config.write_text(config.read_text() + "watch: true\n")
    assert_clean_failure(
        rl2edge("mender", "install-module", "--serve-config", str(config), *dirs), "metrics_port"
    )
    config.write_text(config.read_text() + "metrics_port: 9464\n")
    (tmp_path / "policies" / "current").mkdir(parents=True)  # a policy placed by hand as a folder
    assert_clean_failure(
        rl2edge("mender", "install-module", "--serve-config", str(config), *dirs),
        "policies/current is a folder, not a symlink",
        "ln -s first",
    )
    (tmp_path / "policies" / "current").rmdir()
    done = rl2edge("mender", "install-module", "--serve-config", str(config), "--commit-timeout", "90", *dirs)
    assert done.returncode == 0, done.stderr
    module = tmp_path / "modules" / "rl2edge-policy"
    assert os.access(module, os.X_OK) and "--commit-timeout 90" in module.read_text()
    for state, answer in (("SupportsRollback", "Yes"), ("NeedsArtifactReboot", "No")):
        ran = subprocess.run([str(module), state, str(tmp_path)], capture_output=True, text=True, timeout=60)
        assert ran.returncode == 0 and ran.stdout.strip() == answer, ran.stderr
    inventory = subprocess.run(
        [str(tmp_path / "inventory" / "mender-inventory-rl2edge")], capture_output=True, text=True, timeout=60
    )
    assert inventory.returncode == 0 and "rl2edge_serve=not running" in inventory.stdout.splitlines()
