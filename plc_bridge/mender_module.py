"""The Mender update module `rl2edge-policy`: a new policy for a running `rl2edge serve --watch`.

Mender's client calls the module once per state (`rl2edge-policy STATE FILES`; update module protocol
v3), a script that runs `rl2edge mender state` (rl2edge.cli.commands.mender reads serve's own config file for
the path serve watches, a symlink such as /srv/rl2edge/policies/current, and its metrics endpoint). It:

- ArtifactInstall: unpacks the payload (runtime.mender_artifact) beside the serving policy, checks it
  with the runtime's own checks (manifest, every sha256, the model, one run; the plant-wiring digest equal
  to the serving policy's), then swaps the symlink atomically. serve sees the swap, shadow-runs the
  policy and takes it over, or refuses it and keeps serving the old one;
- ArtifactCommit: waits, up to --commit-timeout, until serve's `rl2edge_artifact_info` shows the new
  manifest sha256 and /readyz answers 200. A refusal by serve (`rl2edge_policy_update_last_info`),
  serve not answering, or the time running out fails the commit with one line, and the client rolls back;
- ArtifactRollback: points the symlink back at the policy that served before (serve takes it back without
  a shadow run: it served in this run), and waits a while for serve to show it;
- Cleanup: removes unpacked leftovers and keeps the last --keep installed policies.

Every state may run twice (the client repeats one after a power loss): what Install found serving is
written once, before anything changes, to the update's own folder, and each step checks what is done.
Each failure is one line on stderr and exit 1.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rl2edge.errors import Rl2EdgeError
from rl2edge.fileio import write_json_atomic

_logger = logging.getLogger("rl2edge.mender")

MODULE_NAME = "rl2edge-policy"
INCOMING = ".incoming-"
LEDGER = ".mender-installed.json"
"""The policies folder's record of what this module installed, oldest first (Cleanup prunes from it)."""
SERVE_ABSENT_S = 10.0
"""Commit: serve's endpoint not answering this long in a row fails the commit (it is not running)."""
POLL_S = 0.1
MAX_PAYLOAD_FILES = 1000


class ModuleError(Rl2EdgeError):
    """One line for the client's log: why this state failed."""


@dataclass(frozen=True)
class Target:
    """Where serve reads its policy from and where it shows what it serves (from serve's config file)."""

    link: Path
    metrics: str
    """http://host:port"""

    @property
    def root(self) -> Path:
        return self.link.parent


# ----------------------------------------------------------------------------------------- serve's view
def http_get(url: str) -> tuple[int, str] | None:
    """(status, body), or None when nothing answers."""
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return r.status, r.read(1 << 20).decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read(1 << 16).decode("utf-8", "replace")
    except (urllib.error.URLError, OSError):
        return None


@dataclass(frozen=True)
class Serving:
    """What serve's endpoint shows: the serving manifest's sha256, readiness, the last update's record."""

    manifest_sha256: str
    ready: bool
    ready_text: str
    last: dict[str, str]
    updates: float
    """Update requests serve has counted (all outcomes): a refusal counts only if it came after install."""


def serving(target: Target) -> Serving | None:
    from rl2edge.plc_bridge.metrics import parse_metrics

    page = http_get(target.metrics + "/metrics")
    if page is None or page[0] != 200:
        return None
    sha, last, updates = "", {}, 0.0
    for (name, labels), value in parse_metrics(page[1]).items():
        if name == "rl2edge_artifact_info":
            sha = dict(labels).get("manifest_sha256", "")
        elif name == "rl2edge_policy_update_last_info":
            last = dict(labels)
        elif name == "rl2edge_policy_updates_total":
            updates += value
    ready = http_get(target.metrics + "/readyz")
    text = "" if ready is None else ready[1].strip()
    return Serving(sha, ready is not None and ready[0] == 200, text, last, updates)


# ----------------------------------------------------------------------------------------- the update
class Update:
    """One update's states. `files`: the folder the client gives each state (header/, files/, tmp/)."""

    def __init__(self, files: Path, target: Target, commit_timeout_s: float, keep: int):
        self.files, self.target = files, target
        self.commit_timeout_s, self.keep = commit_timeout_s, keep
        self.state_file = files / "tmp" / "rl2edge-state.json"

    @property
    def name(self) -> str:
        from rl2edge.runtime.mender_artifact import check_name

        try:
            return check_name((self.files / "header" / "artifact_name").read_text().strip())
        except OSError as exc:
            raise ModuleError(f"the client gave no artifact name ({exc.strerror})") from None

    def meta(self) -> dict[str, Any]:
        try:
            data = json.loads((self.files / "header" / "meta-data").read_text() or "{}")
            meta = data["rl2edge"]
            return {"manifest_sha256": str(meta["manifest_sha256"]), "io_digest": str(meta["io_digest"])}
        except (OSError, ValueError, KeyError, TypeError):
            raise ModuleError(
                "the artifact's meta-data has no rl2edge section; write it with `rl2edge package --mender`"
            ) from None

    def state(self) -> dict[str, Any] | None:
        try:
            return dict(json.loads(self.state_file.read_text()))
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as exc:
            raise ModuleError(f"{self.state_file} is unreadable ({exc}); roll back by hand") from None

    # -------------------------------------------------------------------------- ArtifactInstall
    def install(self) -> None:
        from rl2edge.runtime.mender_artifact import manifest_sha256

        link, name, meta = self.target.link, self.name, self.meta()
        if link.exists() and not link.is_symlink():
            raise ModuleError(
                f"{link} is a folder, not a symlink: serve's artifact path must be a symlink the module can swap "
                f"(mv {link} {link.parent}/first && ln -s first {link})"
            )
        state = self.state()
        if state is None:  # first call: what to roll back to, written before anything changes
            previous = self._installed_before()
            before = serving(self.target)
            state = {
                "previous": previous,
                "target": str(link.parent / name),
                "updates_before": None if before is None else before.updates,
                **meta,
            }
            self.state_file.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(self.state_file, state)
        dest = Path(state["target"])
        if dest.is_dir() and _sha_or_none(dest) == meta["manifest_sha256"]:
            _ledger_add(link.parent, name)  # unpacked and renamed into place by an earlier call
        elif dest.exists():
            raise ModuleError(
                f"{dest} holds another policy named {name}; give each artifact its own name (--name)"
            )
        else:
            # this call's own folder: two installs at once never share one (Cleanup removes every half)
            incoming = link.parent / f"{INCOMING}{name}-{os.getpid()}"
            try:
                shutil.rmtree(incoming, ignore_errors=True)
                incoming.mkdir(parents=True)
                _unpack(self.files / "files" / "policy.tar", incoming)
                unpacked = incoming / "policy"
                if manifest_sha256(unpacked) != meta["manifest_sha256"]:
                    raise ModuleError("the payload's manifest is not the one the artifact's meta-data names")
                self._check(unpacked, state["previous"], meta["io_digest"])
                _sync_tree(unpacked)  # on disk before the name that makes it visible
                # the ledger names the folder before it exists: Cleanup and Rollback know every folder this
                # module made, even when the disk fills between the two (a folder left out stayed for good)
                _ledger_add(link.parent, name)
                os.replace(unpacked, dest)
                _sync_dir(dest.parent)
            except OSError as exc:
                raise ModuleError(
                    f"installing {name} into {link.parent} failed: {exc.strerror or exc}"
                    + (
                        "; free space on that disk: the next update works once there is"
                        if exc.errno == errno.ENOSPC
                        else ""
                    )
                ) from None
            finally:
                shutil.rmtree(incoming, ignore_errors=True)
        _point(link, dest)
        _logger.info("installed %s; %s -> %s; serve takes it over after its shadow run", name, link, dest)

    def _installed_before(self) -> str | None:
        """The policy to roll back to: the one the client records as installed (`current_artifact_name`,
        a folder this module made), else what the symlink points at (a first policy placed by hand), else
        none. The client's record wins over the symlink: a client killed after ArtifactInstall swapped the
        link but before it recorded the install (standalone mode) leaves the link ahead of its record."""
        link = self.target.link
        try:
            recorded = (self.files / "current_artifact_name").read_text().strip()
        except OSError:
            recorded = ""
        folder = link.parent / recorded
        if recorded and recorded in _ledger(link.parent) and (folder / "manifest.json").is_file():
            return str(folder.resolve())
        return os.path.realpath(link) if link.is_symlink() else None

    def _check(self, artifact: Path, previous: str | None, io_digest: str) -> None:
        """The runtime's own checks (manifest, sha256s, the model's structure and one run), and the wiring
        of the policy serving now."""
        from rl2edge.runtime import Policy
        from rl2edge.runtime.manifest import load_manifest

        try:
            Policy.load(artifact).close()
            m = load_manifest(artifact)
        except Rl2EdgeError as exc:
            raise ModuleError(f"the policy does not check out: {exc}") from None
        if m.io_digest != io_digest:
            raise ModuleError("the policy's wiring digest is not the one its artifact's provides record")
        if previous is not None and Path(previous).is_dir():
            try:
                serving_digest = load_manifest(previous).io_digest
            except Rl2EdgeError:
                return  # the serving folder no longer checks out: serve itself compares the specs
            if serving_digest != io_digest:
                raise ModuleError(
                    f"its observation/action layout (digest {io_digest[:12]}) is not the serving policy's "
                    f"({serving_digest[:12]} at {previous}); serve would refuse it"
                )

    # -------------------------------------------------------------------------- ArtifactCommit
    def commit(self) -> None:
        state = self.state()
        if state is None:
            raise ModuleError("nothing was installed by this update (no install record)")
        want, name = state["manifest_sha256"], self.name
        deadline = time.monotonic() + self.commit_timeout_s
        answered_at = time.monotonic()
        shown: Serving | None = None
        while time.monotonic() < deadline:
            now = serving(self.target)
            if now is None and state["previous"] is None:
                # The device's first policy: serve cannot have been running without one. Committed on the
                # install's checks; serve, once started, shadow-runs nothing and serves it.
                _logger.warning(
                    "serve is not running: %s, the device's first policy, is committed on its checks", name
                )
                return
            if now is None:
                if time.monotonic() - answered_at > SERVE_ABSENT_S:
                    raise ModuleError(
                        f"serve does not answer at {self.target.metrics} (is rl2edge-serve running?); "
                        f"{name} is not serving"
                    )
            else:
                answered_at, shown = time.monotonic(), now
                if now.manifest_sha256 == want and now.ready:
                    _logger.info("%s serves and serve is ready; committed", name)
                    return
                fresh = now.updates != state.get("updates_before")  # not a refusal from before this install
                if fresh and now.last.get("manifest_sha256") == want and now.last.get("result") == "refused":
                    raise ModuleError(f"serve refused {name}: {now.last.get('reason', '(no reason)')}")
            time.sleep(POLL_S)
        why = "serve never answered"
        if shown is not None:
            why = (
                f"serve still serves manifest {shown.manifest_sha256[:12]}"
                if shown.manifest_sha256 != want
                else f"serve serves it but is not ready ({shown.ready_text or 'no answer'})"
            )
        raise ModuleError(f"{name} did not take over within {self.commit_timeout_s:g} s: {why}")

    # -------------------------------------------------------------------------- ArtifactRollback
    def rollback(self) -> None:
        state = self.state()
        link = self.target.link
        if state is None:
            return  # Install never began: nothing to undo
        previous = state["previous"]
        if previous is None:
            if link.is_symlink() and os.path.realpath(link) == os.path.realpath(state["target"]):
                link.unlink()  # the device served nothing before
            return
        if not Path(previous).is_dir():
            raise ModuleError(f"the policy that served before, {previous}, is gone; point {link} by hand")
        _point(link, Path(previous))
        _logger.info("rolled back: %s -> %s", link, previous)
        try:  # serve takes a policy that served in this run back without a shadow run
            want = _sha_or_none(Path(previous))
            deadline = time.monotonic() + min(self.commit_timeout_s, 30.0)
            while time.monotonic() < deadline:
                now = serving(self.target)
                if now is None or now.manifest_sha256 == want:
                    return
                time.sleep(POLL_S)
            _logger.warning("serve does not show %s yet; its symlink is restored", previous)
        except Rl2EdgeError:
            return

    # -------------------------------------------------------------------------- Cleanup
    def cleanup(self) -> None:
        root = self.target.root
        for left in root.glob(f"{INCOMING}*"):
            shutil.rmtree(left, ignore_errors=True)
        keep = {os.path.realpath(self.target.link)}
        state = self.state()
        if state and state.get("previous"):
            keep.add(os.path.realpath(state["previous"]))
        names = _ledger(root)
        old, kept = names[: -self.keep], names[-self.keep :]
        for n in old:
            if os.path.realpath(root / n) in keep:
                kept.insert(0, n)
            else:
                shutil.rmtree(root / n, ignore_errors=True)
        write_json_atomic(root / LEDGER, {"installed": kept})


def _sha_or_none(artifact: Path) -> str | None:
    from rl2edge.runtime.mender_artifact import manifest_sha256

    try:
        return manifest_sha256(artifact)
    except OSError:
        return None


def _point(link: Path, dest: Path) -> None:
    """Swap `link` to `dest` in one rename (serve reads either the old target or the new, never none)."""
    if link.is_symlink() and os.path.realpath(link) == os.path.realpath(dest):
        return
    tmp = link.with_name(f".{link.name}.mender-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    tmp.symlink_to(dest.name if dest.parent.resolve() == link.parent.resolve() else dest)
    os.replace(tmp, link)
    _sync_dir(link.parent)  # the swap survives a power loss once the state returns


def _sync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync_tree(root: Path) -> None:
    """Every file and folder under `root` flushed to disk (a rename alone may reach the disk before the
    data it names)."""
    for path in sorted(root.rglob("*"), reverse=True):
        if path.is_file():
            with open(path, "rb") as f:
                os.fsync(f.fileno())
        elif path.is_dir():
            _sync_dir(path)
    _sync_dir(root)


def _unpack(payload: Path, into: Path) -> None:
    """Regular files and folders under `policy/` only: no links, devices, absolute paths or `..`."""
    try:
        with tarfile.open(payload, "r:") as tar:
            members = tar.getmembers()
            if len(members) > MAX_PAYLOAD_FILES:
                raise ModuleError(f"the payload holds {len(members)} entries; a policy has a few")
            for m in members:
                parts = Path(m.name).parts
                if (
                    not (m.isfile() or m.isdir())
                    or m.name.startswith("/")
                    or ".." in parts
                    or parts[:1] != ("policy",)
                ):
                    raise ModuleError(f"the payload's entry {m.name!r} is not a file under policy/; refused")
            for m in members:
                m.mode = 0o755 if m.isdir() else 0o644
                tar.extract(m, into, set_attrs=False, **_DATA_FILTER)
    except OSError as exc:
        if exc.errno == errno.ENOSPC:
            raise  # not the payload's fault: install() says so
        raise ModuleError(f"the payload {payload} is not a readable tar ({exc})") from None
    except tarfile.TarError as exc:
        raise ModuleError(f"the payload {payload} is not a readable tar ({exc})") from None


_DATA_FILTER: dict[str, Any] = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
"""Python's own extraction filter as well, where it has one (3.10.12+, 3.11.4+): a second line of defence."""


def _ledger(root: Path) -> list[str]:
    try:
        return [str(n) for n in json.loads((root / LEDGER).read_text())["installed"]]
    except (OSError, ValueError, KeyError, TypeError):
        return []


def _ledger_add(root: Path, name: str) -> None:
    names = [n for n in _ledger(root) if n != name]
    write_json_atomic(root / LEDGER, {"installed": [*names, name]})


# ----------------------------------------------------------------------------------------- the entry point
STATES_NO_OP = ("Download", "ArtifactVerifyReboot", "ArtifactVerifyRollbackReboot", "ArtifactFailure")


ANSWERS = {"SupportsRollback": "Yes", "NeedsArtifactReboot": "No"}
"""The states whose answer the client reads from stdout: rollback supported, no reboot needed."""


def run_state(
    state: str, files: Path | None, target: Callable[[], Target], commit_timeout_s: float, keep: int
) -> str:
    """One state as the client calls it (`rl2edge mender state`, which prints the result): the protocol's
    answer for the states that have one, else ''. A failure raises an Rl2EdgeError with its one line.
    `target` is read only by the states that need it."""
    if state in ANSWERS:
        return ANSWERS[state]
    if state in STATES_NO_OP or files is None:
        return ""
    update = Update(files, target(), commit_timeout_s, keep)
    step = {
        "ArtifactInstall": update.install,
        "ArtifactCommit": update.commit,
        "ArtifactRollback": update.rollback,
        "Cleanup": update.cleanup,
    }.get(state)
    if step is not None:
        step()
    return ""
