"""Joining or starting Ray, with errors that say what to do: Ray missing, or a cluster that does not answer."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
from collections.abc import Iterator
from types import ModuleType
from urllib.parse import urlsplit

from rl2edge.errors import ConfigError
from rl2edge.interrupts import handlers_kept

_logger = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0


def require_ray() -> ModuleType:
    """The ray module, or a ConfigError naming the extra to install."""
    try:
        import ray
    except ImportError:
        raise ConfigError(
            "this command runs on Ray, which is not installed: pip install 'rl2edge[ray]' "
            "(on the workstation; the edge install never needs it)"
        ) from None
    return ray


def check_address(address: str) -> None:
    """Fail in seconds, not after Ray's own minute of retries, when nothing listens at host:port."""
    if address == "auto":
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    if not parts.hostname or parts.port is None:
        raise ConfigError(
            f"--address {address!r}: give host:port of the head node's GCS (ray start --head prints it, "
            "default port 6379), ray://host:10001 for Ray Client, or auto"
        )
    try:
        with socket.create_connection((parts.hostname, parts.port), timeout=CONNECT_TIMEOUT_S):
            pass
    except OSError as exc:
        raise ConfigError(
            f"no Ray cluster answers at {address} ({exc}); start one there with `ray start --head`, "
            "check the port and the firewall, or leave --address out to run Ray on this machine"
        ) from None


@contextlib.contextmanager
def ray_session(address: str | None = None, num_cpus: int | None = None) -> Iterator[ModuleType]:
    """Ray, connected: to `address` when given, else an already initialized Ray (a test's cluster), else a
    local one started here (and stopped on exit)."""
    global _ends_with_block
    ray = require_ray()
    if ray.is_initialized():
        yield ray
        return
    if address:
        check_address(address)
    # A local Ray's workers import what the driver can from its working directory (a user's env module,
    # `--env mypkg.env:Twin`); on a cluster, the env code must be installed on every node.
    path = os.pathsep.join(p for p in (os.getcwd(), os.environ.get("PYTHONPATH", "")) if p)
    try:
        with handlers_kept():  # ray.init's SIGTERM handler would skip train --seeds' stop report
            ray.init(
                address=address or None,
                num_cpus=None if address else num_cpus,
                include_dashboard=False,
                logging_level=logging.WARNING,
                configure_logging=False,
                runtime_env=None if address else {"env_vars": {"PYTHONPATH": path}},
            )
    except ConnectionError as exc:
        raise ConfigError(f"cannot join the Ray cluster at {address}: {exc}") from None
    try:
        _ends_with_block = True
        _logger.info("Ray: %s, %s CPUs", address or "local", ray.cluster_resources().get("CPU", 0))
        yield ray
    finally:
        _ends_with_block = False
        ray.shutdown()


# Whether the innermost ray_session started or joined Ray itself, and so ends this driver's job on exit.
_ends_with_block = False


def tasks_end_with_session() -> bool:
    """True inside a ray_session that shuts Ray down on exit: that ends this driver's job, and Ray stops the
    job's running tasks with SIGTERM, so their `finally` blocks run as the job ends (the driver does not
    wait for them). Cancelling them first is then not needed, and not safe: in Ray 2.60, ray.cancel on a
    task just being handed to a worker (a lease granted, the push in flight) can abort the driver with
    "Check failed: it != submissible_tasks_.end() Tried to complete task that was not pending" in its
    core-worker log, exit 1 and nothing on stderr (2 of 8 runs of `train --seeds` stopped as the second
    seed started; 0 of 10 without the cancel)."""
    return _ends_with_block
