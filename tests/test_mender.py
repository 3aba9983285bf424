"""A policy rolled out through the real Mender client (standalone mode: `mender install`, `commit`,
`rollback`) to a running serve and plc-sim on loopback, with the rl2edge-policy update module: a good update
commits once serve answers the PLC with it; one serve refuses rolls back without the old policy ever
stopping; another observation layout is refused by the client's `depends`; an unsigned or tampered file
is refused on a device with a key; serve not running fails the commit; a client killed between or during
its states leaves one whole policy behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from rl2edge.runtime import Policy
from rl2edge.runtime.manifest import load_manifest
from rl2edge.runtime.mender_artifact import manifest_sha256
from testkit import mender as mk
from testkit.plc import NO_MISS, running, stop, wait_for_server

# The Mender client reads /etc/mender/artifact_info and its update modules from /usr/share: one device per
# machine. This file's tests run one after another on one worker (--dist loadfile), and the only other user of
# the client, test_benchmarks_smoke.py's fleet smoke, is serial: nothing else touches those files meanwhile,
# so the file runs beside other files (none of its assertions is on time).
pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(bool(mk.missing()), reason=mk.missing() or "-"),
]


def _sim(dev: mk.Device, tmp_path: Path, trace: bool = True) -> list[str]:
    args = ["plc-sim", "--env", "CartPole-v1", "--endpoint", dev.url, "--mode", "lockstep"]
    return [*args, "--trace", str(tmp_path / "trace.jsonl")] if trace else args


def _names(dev: mk.Device) -> set[str]:
    return {p.name for p in dev.policies.iterdir() if not p.name.startswith(".")}


def _first_policy(dev: mk.Device, artifact: Path, tmp_path: Path) -> str:
    """The device's first policy, installed and committed before serve runs (serve cannot run without one:
    the module commits a first policy on its install checks)."""
    first = mk.package(artifact, tmp_path / "first.mender", "--first", "--name", "first")
    for step in (("install", str(first)), ("commit",)):
        done = dev.mender(*step)
        assert done.returncode == 0, done.stderr
    assert dev.show_artifact() == "first"
    return "first"


def test_a_good_update_commits_and_a_refused_one_rolls_back_while_the_old_policy_serves(
    cartpole_all, cartpole_flipped, tmp_path: Path
) -> None:
    _, root = cartpole_all
    dev = mk.device(tmp_path / "device")
    _first_policy(dev, root / "fp32", tmp_path)
    good = mk.package(root / "int8", tmp_path / "good.mender", "--name", "good")
    bad = mk.package(cartpole_flipped, tmp_path / "bad.mender", "--name", "bad")
    with running(_sim(dev, tmp_path), tmp_path / "sim.log") as sim:
        wait_for_server(dev.url)
        with running(dev.serve_args(*NO_MISS), tmp_path / "serve.log") as serve:
            mk.wait_until("serve ready", lambda: mk.ready(dev))
            t0 = time.monotonic()
            assert dev.mender("install", str(good)).returncode == 0
            committed = dev.mender("commit")
            took_s = time.monotonic() - t0
            assert committed.returncode == 0, committed.stderr
            assert dev.show_artifact() == "good"
            installed = dev.mender("install", str(bad))
            assert installed.returncode == 0, installed.stderr
            refused = dev.mender(
                "commit"
            )  # serve's shadow run refuses it: the commit fails, the client rolls back
            assert refused.returncode != 0
            assert (
                "serve refused bad: " in refused.stderr
                and "agreed with the serving policy's in" in refused.stderr
            )
            assert dev.show_artifact() == "good"
            assert os.path.realpath(dev.link) == str((dev.policies / "good").resolve())
            time.sleep(0.5)  # some cycles after the rollback
            assert stop(serve) == 0, (tmp_path / "serve.log").read_text()
        assert stop(sim) == 0
    s = json.loads((dev.root / "summary.json").read_text())
    history = s["policy"]["history"]
    outcomes = [(h["result"], Path(h["artifact"]).name) for h in history]
    assert outcomes[:2] == [("accepted", "good"), ("refused", "bad")]
    assert set(outcomes[2:]) <= {("unchanged", "good")}  # the rollback points back at what serves
    assert history[0]["manifest_sha256"] == manifest_sha256(root / "int8")
    assert s["invalid"] == 0 and s["stale"] == 0 and s["inference_errors"] == 0 and s["deadline_misses"] == 0
    # The PLC's trace: the first policy's actions before good's first answered sequence number, good's after,
    # and never the refused policy's where it differs from good's.
    trace = [json.loads(line) for line in (tmp_path / "trace.jsonl").read_text().splitlines()][:-1]
    k = history[0]["first_sequence"]
    first, new = Policy.load(root / "fp32"), Policy.load(root / "int8")
    seq = np.array([r["seq"] for r in trace])
    by = {n: np.array([float(p.predict(np.asarray(r["obs"], np.float32))) == r["action"][0] for r in trace])
          for n, p in (("first", first), ("good", new))}  # fmt: skip
    assert by["first"][seq < k].all() and by["good"][seq > k].all() and (seq > k).sum() > 20
    assert took_s < 30, took_s


def test_another_layout_is_refused_by_depends_before_anything_is_written(
    cartpole_all, pendulum_fp32, tmp_path: Path
) -> None:
    _, root = cartpole_all
    _, pendulum = pendulum_fp32
    dev = mk.device(tmp_path / "device")
    _first_policy(dev, root / "fp32", tmp_path)
    before = (_names(dev), os.path.realpath(dev.link))
    other = mk.package(pendulum, tmp_path / "pendulum.mender", "--name", "pendulum")
    done = dev.mender("install", str(other))
    assert done.returncode != 0
    assert "rl2edge.io_digest" in done.stderr  # the client names the depends it could not meet
    assert (_names(dev), os.path.realpath(dev.link)) == before
    assert dev.show_artifact() == "first"


def test_a_device_with_a_key_refuses_unsigned_and_tampered_artifacts(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    for kind in ("ecdsa", "rsa"):
        private, public = mk.keypair(tmp_path / "keys", kind)
        dev = mk.device(tmp_path / f"device-{kind}", verify_key=public)
        unsigned = mk.package(root / "fp32", tmp_path / "unsigned.mender", "--first", "--name", "unsigned")
        signed = mk.package(
            root / "fp32", tmp_path / f"{kind}.mender", "--first", "--name", "signed", "--sign", str(private)
        )
        tampered = tmp_path / f"{kind}-tampered.mender"
        data = bytearray(signed.read_bytes())
        at = data.find(b"data/0000.tar.gz")  # the outer tar's header of the (compressed) payload
        assert at > 0
        data[at + 512 + 4000] ^= 0x01  # a bit inside the payload
        tampered.write_bytes(bytes(data))
        for refused in (unsigned, tampered):
            done = dev.mender("install", str(refused))
            assert done.returncode != 0, refused
            assert "signature" in done.stderr.lower() or "checksum" in done.stderr.lower(), done.stderr[-500:]
            assert _names(dev) == set() and not dev.link.is_symlink()
        done = dev.mender("install", str(signed))
        assert done.returncode == 0, done.stderr
        assert _names(dev) == {"signed", "current"}


def test_serve_not_running_fails_the_commit_and_rollback_restores_the_link(
    cartpole_all, tmp_path: Path
) -> None:
    _, root = cartpole_all
    dev = mk.device(tmp_path / "device")
    _first_policy(dev, root / "fp32", tmp_path)
    update = mk.package(root / "int8", tmp_path / "int8.mender", "--name", "int8")
    assert dev.mender("install", str(update)).returncode == 0
    assert os.path.realpath(dev.link) == str((dev.policies / "int8").resolve())
    t0 = time.monotonic()
    done = dev.mender("commit")
    assert done.returncode != 0
    lines = [line for line in done.stderr.splitlines() if "rl2edge-policy ArtifactCommit" in line]
    assert len(lines) == 1 and "serve does not answer at" in lines[0], done.stderr[-800:]
    assert time.monotonic() - t0 < 30
    assert os.path.realpath(dev.link) == str((dev.policies / "first").resolve())
    assert dev.show_artifact() == "first"


def test_a_client_killed_between_or_during_its_states_leaves_one_whole_policy(
    cartpole_all, tmp_path: Path
) -> None:
    _, root = cartpole_all
    dev = mk.device(tmp_path / "device")
    _first_policy(dev, root / "fp32", tmp_path)
    first = str((dev.policies / "first").resolve())
    update = mk.package(root / "int8", tmp_path / "int8.mender", "--name", "int8")
    # Killed after install, before commit: the next `rollback` restores the first policy.
    assert dev.mender("install", str(update)).returncode == 0
    assert dev.mender("rollback").returncode == 0
    assert os.path.realpath(dev.link) == first and dev.show_artifact() == "first"
    # Killed in the middle of install, at several moments. The standalone client records an install only once
    # ArtifactInstall has returned: killed just after the module's swap, it has nothing to roll back (exit 2)
    # and the link is ahead of its record. Either way the link names one whole policy.
    for delay in (0.05, 0.2, 0.4, 0.55, 0.6, 0.65, 0.7, 0.8):
        client = dev.mender_popen("install", str(update))
        time.sleep(delay)
        os.killpg(client.pid, signal.SIGKILL)
        client.communicate()
        again = dev.mender("rollback")
        assert again.returncode in (0, 2), again.stderr  # 2: nothing in progress
        now = os.path.realpath(dev.link)
        assert now in (first, str((dev.policies / "int8").resolve())), delay
        load_manifest(dev.link)  # whole: the manifest and every file's sha256
        assert dev.show_artifact() == "first"
    # The next update's rollback point is what the client records, not where a killed install left the link.
    assert dev.mender("install", str(update)).returncode == 0
    assert dev.mender("rollback").returncode == 0
    assert os.path.realpath(dev.link) == first and dev.show_artifact() == "first"
    # Install repeated (the client's retry after a power loss), then committed to a running serve.
    with running(_sim(dev, tmp_path, trace=False), tmp_path / "sim.log") as sim:
        wait_for_server(dev.url)
        with running(dev.serve_args(*NO_MISS), tmp_path / "serve.log") as serve:
            assert dev.mender("install", str(update)).returncode == 0
            killed = dev.mender_popen("commit")
            time.sleep(0.1)
            os.killpg(killed.pid, signal.SIGKILL)
            killed.communicate()
            done = dev.mender("commit")
            assert done.returncode == 0, done.stderr
            assert stop(serve) == 0
        assert stop(sim) == 0
    assert (
        os.path.realpath(dev.link) == str((dev.policies / "int8").resolve()) and dev.show_artifact() == "int8"
    )
    assert not [p for p in dev.policies.iterdir() if p.name.startswith(".incoming-")]


def _module_files(update: Path, tmp_path: Path) -> Path:
    """The folder the client gives an update module (header/, files/, tmp/), from a .mender file."""
    files = tmp_path / "files"
    (files / "header").mkdir(parents=True)
    (files / "files").mkdir()
    (files / "tmp").mkdir()
    subprocess.run(
        ["tar", "-xf", str(update), "-C", str(tmp_path / "files"), "header.tar.gz", "data/0000.tar.gz"],
        check=True,
    )
    subprocess.run(["tar", "-xzf", str(files / "header.tar.gz"), "-C", str(files)], check=True)
    subprocess.run(
        ["tar", "-xzf", str(files / "data" / "0000.tar.gz"), "-C", str(files / "files")], check=True
    )
    (files / "header" / "artifact_name").write_text(update.stem)
    (files / "header" / "meta-data").write_text((files / "headers" / "0000" / "meta-data").read_text())
    return files


MODULE = "/usr/share/mender/modules/v3/rl2edge-policy"


def _state(name: str, files: Path) -> subprocess.CompletedProcess[str]:
    """One state of the module, as the client calls it."""
    return subprocess.run(
        [MODULE, name, str(files)], capture_output=True, text=True, timeout=120, check=False
    )


def test_the_module_repeats_each_state_without_harm(cartpole_all, tmp_path: Path) -> None:
    """The module alone, as the client calls it, each state twice: the second call finds the work done."""
    _, root = cartpole_all
    dev = mk.device(tmp_path / "device")
    _first_policy(dev, root / "fp32", tmp_path)
    files = _module_files(mk.package(root / "int8", tmp_path / "int8.mender", "--name", "int8"), tmp_path)

    def state(name: str) -> subprocess.CompletedProcess[str]:
        return _state(name, files)

    for _ in range(2):
        done = state("ArtifactInstall")
        assert done.returncode == 0, done.stderr
        assert os.path.realpath(dev.link) == str((dev.policies / "int8").resolve())
    for _ in range(2):
        assert state("ArtifactRollback").returncode == 0
        assert os.path.realpath(dev.link) == str((dev.policies / "first").resolve())
    assert state("SupportsRollback").stdout.strip() == "Yes"
    assert state("NeedsArtifactReboot").stdout.strip() == "No"
    done = state("ArtifactCommit")  # serve is not running: one line, exit 1
    assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1


def test_a_full_disk_during_install_leaves_no_folder_behind_and_the_next_install_works(
    cartpole_all, tmp_path: Path
) -> None:
    """The policies' disk full while ArtifactInstall unpacks: one line that says so, exit 1, no folder left
    behind, the ledger as it was (the folder had been renamed into place before its name reached the ledger;
    Cleanup removes only ledger names, so it stayed, the disk stayed full and every later update failed).
    Once space is freed the same install works."""
    _, root = cartpole_all
    dev = mk.device(tmp_path / "device")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(dev.policies)], capture_output=True, text=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"a small disk for the policies needs mount (root): {mounted.stderr.strip()}")
    try:
        _first_policy(dev, root / "fp32", tmp_path)
        ledger = (dev.policies / ".mender-installed.json").read_text()
        files = _module_files(mk.package(root / "int8", tmp_path / "int8.mender", "--name", "int8"), tmp_path)
        filler = dev.policies / "filler"
        with open(filler, "wb") as f:  # the disk to its last byte
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        done = _state("ArtifactInstall", files)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        assert "No space left on device" in done.stderr and "free space on that disk" in done.stderr
        assert sorted(p.name for p in dev.policies.iterdir()) == sorted(
            [".mender-installed.json", "current", "filler", "first"]
        )
        assert (dev.policies / ".mender-installed.json").read_text() == ledger
        filler.unlink()
        done = _state("ArtifactInstall", files)
        assert done.returncode == 0, done.stderr
        assert os.path.realpath(dev.link) == str((dev.policies / "int8").resolve())
    finally:
        subprocess.run(["umount", "-l", str(dev.policies)], check=False)
