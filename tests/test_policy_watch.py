"""serve --watch's first look at the artifact path: compared with the artifact that serves, so that a
symlink swapped between serve's load and the watcher's start (an OTA install while serve boots) is an
update, not the baseline. tests/test_mender.py found it: a policy installed as serve started was never
taken over, and the commit timed out."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from rl2edge.plc_bridge.policy_update import PolicyUpdates, UpdateConfig
from rl2edge.runtime import Policy


def _requests_seen(tmp_path: Path, first: Path, now: Path) -> list[str]:
    """The update requests the watcher makes within 0.5 s when serve loaded `first` through the symlink
    and the symlink points at `now` by the time the watcher starts."""
    current = tmp_path / "current"
    current.symlink_to(first)
    policy = Policy.load(current)
    (tmp_path / "next").symlink_to(now)
    os.replace(tmp_path / "next", current)
    cfg = UpdateConfig(artifact=current, load=Policy.load, watch=True, poll_s=0.05)
    updates = PolicyUpdates(policy, cfg, prepare=lambda candidate, serving: serving)
    seen: list[str] = []
    updates.request = seen.append  # type: ignore[method-assign]  # what the watcher asks for

    async def watch() -> None:
        stop = asyncio.Event()
        task = asyncio.create_task(updates._watch(stop))
        await asyncio.sleep(0.5)
        stop.set()
        await task

    asyncio.run(watch())
    policy.close()
    return seen


def test_a_swap_before_the_watcher_starts_is_an_update(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    assert _requests_seen(tmp_path, root / "fp32", root / "int8") == [f"{tmp_path / 'current'} changed"]


def test_an_unswapped_path_is_no_update(cartpole_all, tmp_path: Path) -> None:
    _, root = cartpole_all
    assert _requests_seen(tmp_path, root / "fp32", root / "fp32") == []
