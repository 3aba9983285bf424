"""The process group of a data-parallel job: which process this is, and the collectives the learner uses.

The job's processes find each other through torchrun's environment (RANK, WORLD_SIZE, LOCAL_RANK,
MASTER_ADDR, MASTER_PORT), which `rl2edge train --nproc N` (train.data_parallel.launch) and torchrun set.
Gradients go over the device's backend (NCCL on GPUs, not yet run on one; gloo on CPUs); the
rollouts and the stop flags, numpy objects, over a gloo group beside it, so that they never occupy a GPU.
"""

from __future__ import annotations

import datetime
import logging
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from rl2edge.errors import ConfigError
from rl2edge.train.core.rollout_collector import share_bounds
from rl2edge.train.data_parallel.job import world_from_env

_logger = logging.getLogger(__name__)

TIMEOUT_S = 300.0
"""How long a collective waits for a rank that neither answers nor drops its connection (a hung simulator).
A rank that dies closes its sockets, and the others fail at once; the launcher stops them all."""


def check_gpus_for(world: int, device: str) -> None:
    """`--nproc N --device cuda`: N GPUs on this node, checked before any process starts (each rank had found
    out for itself, eight seconds and five error lines later)."""
    if device != "cuda":
        return
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if count == 0:
        raise ConfigError(
            f"--nproc {world} --device cuda: torch sees no CUDA device here; use --device cpu or auto"
        )
    if count < world:
        raise ConfigError(
            f"--nproc {world} --device cuda needs {world} GPUs on this machine, and torch sees {count}; "
            f"use --nproc {count} (one process per GPU)"
        )


@dataclass
class Replicas:
    """This process's place in the job (rank 0 leads: it evaluates, logs and writes the checkpoint)."""

    rank: int
    world: int
    local_rank: int
    backend: str
    cpu_group: Any  # gloo: numpy objects and flags

    @property
    def lead(self) -> bool:
        return self.rank == 0

    @classmethod
    def join(cls, device: str, timeout_s: float = TIMEOUT_S) -> Replicas:
        """Join the job torchrun's variables describe (the default group, unless the caller made it
        already). `device`: the run's --device; a CUDA job takes GPU LOCAL_RANK and NCCL."""
        where = world_from_env()
        if where is None:
            raise ConfigError("no data-parallel job here: WORLD_SIZE is not above 1")
        rank, world, local_rank = where
        cuda = device == "cuda" or (device == "auto" and torch.cuda.is_available())
        backend = "nccl" if cuda else "gloo"
        if cuda:
            if local_rank >= torch.cuda.device_count():
                raise ConfigError(
                    f"rank {rank} is local rank {local_rank} but this node has {torch.cuda.device_count()} "
                    "GPU(s); start at most one process per GPU (--nproc)"
                )
            torch.cuda.set_device(local_rank)
        timeout = datetime.timedelta(seconds=timeout_s)
        if not dist.is_initialized():
            dist.init_process_group(backend, rank=rank, world_size=world, timeout=timeout)
        backend = str(dist.get_backend())
        cpu_group = dist.new_group(backend="gloo", timeout=timeout) if backend != "gloo" else None
        _logger.info("rank %d of %d (local rank %d), %s", rank, world, local_rank, backend)
        return cls(rank, world, local_rank, backend, cpu_group)

    @property
    def torch_device(self) -> str:
        """This rank's torch device: its own GPU on a CUDA job (NCCL), else the CPU."""
        return f"cuda:{self.local_rank}" if self.backend == "nccl" else "cpu"

    @staticmethod
    def lost_peer(exc: BaseException) -> bool:
        """Whether `exc` is a collective's report of another rank gone: torch's DistError (NCCL), or the
        RuntimeError gloo raises with its transport's message ("Connection closed by peer")."""
        return isinstance(exc, dist.DistError) or (isinstance(exc, RuntimeError) and "gloo" in str(exc))

    def env_share(self, n_envs: int) -> tuple[int, int]:
        """(first, count) of this rank's envs: contiguous, as the Ray rollout workers split them."""
        lo, hi = share_bounds(n_envs, self.world, self.rank)
        return lo, hi - lo

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's `obj`, in rank order, on every rank (pickled over gloo)."""
        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out

    def any(self, flag: bool) -> bool:
        """Whether any rank's flag is set: every rank gets the same answer (a stop at the same update)."""
        t = torch.tensor([1 if flag else 0], dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.MAX, group=self.cpu_group)
        return bool(t.item())

    def mean(self, values: np.ndarray) -> np.ndarray:
        """The ranks' mean of a small float array (the update's stats: every rank takes the same early stop
        on the target KL)."""
        t = torch.as_tensor(np.asarray(values, np.float64))
        dist.all_reduce(t, op=dist.ReduceOp.SUM, group=self.cpu_group)
        return (t / self.world).numpy()

    def sum_grads(self, params: list[torch.Tensor], weight: float) -> None:
        """Replace every parameter's gradient by the sum over ranks of `weight` times it: with each rank's
        weight its share of the minibatch, the gradient of the whole minibatch's mean loss. One flat
        all-reduce, not one per tensor."""
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads]).mul_(weight)
        dist.all_reduce(flat, op=dist.ReduceOp.SUM)
        offset = 0
        for p, g in zip(params, grads, strict=True):
            summed = flat[offset : offset + g.numel()].view_as(g)
            if p.grad is None:
                p.grad = summed.clone()
            else:
                p.grad.copy_(summed)
            offset += g.numel()

    def broadcast_(self, module: torch.nn.Module) -> None:
        """Rank 0's parameters and buffers onto every rank (each rank seeds alike; this makes it exact)."""
        with torch.no_grad():
            for t in [*module.parameters(), *module.buffers()]:
                dist.broadcast(t.data, src=0)

    def close(self) -> None:
        if dist.is_initialized():
            dist.destroy_process_group()
