"""A camera replay buffer's memory, frames stored as uint8 (rl2edge's ObservationStore, as SB3 stores them),
then also each observation stored once (`optimize_memory_usage`, SharedObsReplayBuffer), next to the same
buffer storing every value as float32 (what rl2edge did before issue 46), side by side in one run: the
resident memory it takes once full, the time to add a transition and to sample a batch.

    PYTHONPATH=. python benchmarks/replay_memory.py [--transitions 100000] [--batch 256]

The observation is an 84x84x3 uint8 frame (Atari's size, 21,168 pixels) and one float32 value, as a Dict
camera env gives it flat. Writes benchmarks/results/replay_memory.{json,md,png}. Run nothing beside it:
the float32 buffer of 100k transitions takes about 16 GiB."""

from __future__ import annotations

import argparse
import gc
import logging
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import RESULTS, markdown_table, pyplot, save_figure, write_results
from rl2edge.train.core.replay import ReplayBuffer, SharedObsReplayBuffer

_logger = logging.getLogger("benchmarks.replay_memory")
PIXELS, VECTOR = 84 * 84 * 3, 1
ONCE_ENVS = 100


def rss_bytes() -> int:
    """This process's resident set, from /proc (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def measure(
    name: str, uint8: bool, transitions: int, batch: int, rng: np.random.Generator, once: bool = False
) -> dict[str, Any]:
    """`once`: each observation stored once; an add is then one transition per env, 100 envs (a divisor
    of any multiple of 100 transitions; the other rows add 500 at a time)."""
    mask = np.zeros(PIXELS + VECTOR, bool)
    mask[:PIXELS] = True
    chunk = ONCE_ENVS if once else 500  # transitions per add, made before the baseline is read
    if once and transitions % chunk:
        raise SystemExit(f"--transitions must be a multiple of {chunk} (the stored-once buffer's envs)")
    frames = rng.integers(0, 256, (chunk, PIXELS + VECTOR)).astype(np.float32)
    frames[:, PIXELS:] = rng.normal(size=(chunk, VECTOR))
    gc.collect()
    before = rss_bytes()
    pixels = mask if uint8 else None
    buf = (
        SharedObsReplayBuffer(transitions, (PIXELS + VECTOR,), False, 1, chunk, pixels=pixels)
        if once
        else ReplayBuffer(transitions, (PIXELS + VECTOR,), False, 1, pixels=pixels)
    )
    t0 = time.perf_counter()
    for start in range(0, transitions, chunk):
        n = min(chunk, transitions - start)
        buf.add(frames[:n], np.zeros((n, 1), np.float32), np.zeros(n), frames[:n], np.zeros(n))
    add_s = time.perf_counter() - t0
    full = rss_bytes() - before
    t0 = time.perf_counter()
    samples = 20
    for _ in range(samples):
        buf.sample(1, batch, rng, lambda x: x)
    sample_s = (time.perf_counter() - t0) / samples
    stored = buf.obs.nbytes + (0 if once else buf.next_obs.nbytes)
    row = {
        "storage": name,
        "transitions": transitions,
        "observation_bytes_stored": stored,
        "rss_growth_bytes": full,
        "add_us_per_transition": 1e6 * add_s / transitions,
        "sample_ms_per_batch": 1e3 * sample_s,
        "batch": batch,
    }
    _logger.info("%s: %.2f GiB resident, add %.1f us, sample %.1f ms", name, full / 2**30,
                 row["add_us_per_transition"], row["sample_ms_per_batch"])  # fmt: skip
    del buf
    gc.collect()
    return row


def plot(rows: list[dict[str, Any]], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    fig, ax = plt.subplots(figsize=(6, 3.2))
    names = [r["storage"] for r in rows]
    ax.barh(
        names,
        [r["rss_growth_bytes"] / 2**30 for r in rows],
        color=["tab:blue", "tab:green", "tab:gray"][: len(rows)],
    )
    ax.set_xlabel("resident memory of the full buffer (GiB)")
    ax.set_title(f"Replay of {rows[0]['transitions']:,} transitions of an 84x84x3 frame")
    save_figure(fig, path)


def _ratio(num: int, den: int) -> float | None:
    """None where the growth is too small to read: a small buffer may fit in memory the allocator kept
    from the previous row, so VmRSS does not grow at all."""
    return num / den if num > 0 and den > 0 else None


def _fmt(ratio: float | None) -> str:
    return "n/a (too small to read from VmRSS)" if ratio is None else f"{ratio:.3f}"


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--transitions", type=int, default=100_000)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--out", default=str(RESULTS))
    p.add_argument("--name", default="replay_memory")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", datefmt="%H:%M:%S")
    rng = np.random.default_rng(0)
    rows = [
        measure(
            "uint8 frames, each once (optimize_memory_usage)", True, args.transitions, args.batch, rng, True
        ),
        measure("uint8 frames (default)", True, args.transitions, args.batch, rng),
        measure("float32 (before issue 46)", False, args.transitions, args.batch, rng),
    ]
    ratio = _ratio(rows[1]["rss_growth_bytes"], rows[2]["rss_growth_bytes"])
    once_ratio = _ratio(rows[0]["rss_growth_bytes"], rows[1]["rss_growth_bytes"])
    head = ["storage", "transitions", "stored GiB", "resident GiB", "add us/transition", "sample ms/batch"]
    body = [
        [r["storage"], f"{r['transitions']:,}", f"{r['observation_bytes_stored'] / 2**30:.2f}",
         f"{r['rss_growth_bytes'] / 2**30:.2f}", f"{r['add_us_per_transition']:.1f}",
         f"{r['sample_ms_per_batch']:.2f} ({r['batch']})"]
        for r in rows
    ]  # fmt: skip
    md = markdown_table(head, body) + (
        f"\n\nResident memory with uint8 frames: {_fmt(ratio)} of float32's; storing each observation once "
        f"(`optimize_memory_usage: true`) takes {_fmt(once_ratio)} of that (the ring holds the buffer's "
        "transitions plus one add's next observations: 100 envs here). 'resident' is the growth of VmRSS once "
        "every slot is written, 'stored' the arrays' own size. A sample reassembles float32 batches (obs "
        "and next_obs) from the uint8 frames."
    )
    data = {"rows": rows, "resident_ratio": ratio, "once_ratio": once_ratio}
    out = Path(args.out)
    write_results(args.name, data, md, out)
    plot(rows, out / f"{args.name}.png")
    return data


if __name__ == "__main__":
    main()
