"""Where this process stands in a data-parallel job, read without torch (the CLI decides before importing it).

torchrun's variables: RANK, WORLD_SIZE, LOCAL_RANK (and MASTER_ADDR, MASTER_PORT for the rendezvous); `rl2edge
train --nproc N` (train.data_parallel.launch) sets the same ones.
"""

from __future__ import annotations

import os

from rl2edge.errors import ConfigError


def world_from_env() -> tuple[int, int, int] | None:
    """(rank, world size, local rank) from torchrun's variables, or None outside a multi-process job."""
    try:
        world = int(os.environ.get("WORLD_SIZE", "1"))
        if world <= 1:
            return None
        rank = int(os.environ["RANK"])
        local = int(os.environ.get("LOCAL_RANK", rank))
    except (KeyError, ValueError) as exc:
        raise ConfigError(
            f"WORLD_SIZE is {os.environ.get('WORLD_SIZE')!r} but RANK or LOCAL_RANK is missing or not an integer "
            f"({exc}); start the job with torchrun or `rl2edge train --nproc N`"
        ) from None
    if not 0 <= rank < world:
        raise ConfigError(f"RANK {rank} is outside a job of WORLD_SIZE {world}")
    return rank, world, local
