"""Mender inventory for rl2edge: `key=value` lines the client sends to the server, so that a fleet's
operator sees which policy each device serves (name, manifest sha256, mode, env id) and whether serve is
ready. What serve's endpoint shows wins; with serve down, the policy its symlink points at."""

from __future__ import annotations

from pathlib import Path

from rl2edge.errors import Rl2EdgeError
from rl2edge.plc_bridge.mender_module import Target, http_get


def lines(target: Target) -> list[str]:
    from rl2edge.plc_bridge.metrics import parse_metrics
    from rl2edge.runtime.manifest import load_manifest
    from rl2edge.runtime.mender_artifact import manifest_sha256

    page = http_get(target.metrics + "/metrics")
    if page is not None and page[0] == 200:
        for (name, labels), _ in parse_metrics(page[1]).items():
            if name == "rl2edge_artifact_info":
                info = dict(labels)
                ready = http_get(target.metrics + "/readyz")
                return [
                    f"rl2edge_policy={Path(info.get('path', '')).name}",
                    f"rl2edge_manifest_sha256={info.get('manifest_sha256', '')}",
                    f"rl2edge_mode={info.get('mode', '')}",
                    f"rl2edge_env_id={info.get('env_id', '')}",
                    f"rl2edge_serve={'ready' if ready is not None and ready[0] == 200 else 'not ready'}",
                ]
    try:
        m = load_manifest(target.link)
    except Rl2EdgeError:
        return ["rl2edge_serve=not running", "rl2edge_policy=none"]
    return [
        f"rl2edge_policy={target.link.resolve().name}",
        f"rl2edge_manifest_sha256={manifest_sha256(target.link)}",
        f"rl2edge_mode={m.quantization.get('mode', '')}",
        f"rl2edge_env_id={(m.data.get('source') or {}).get('env_id', '')}",
        "rl2edge_serve=not running",
    ]
