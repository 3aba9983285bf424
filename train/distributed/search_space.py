"""A sweep's search space, read from YAML in the RL Zoo's spirit and checked before Ray starts:

    fixed:                      # optional: set for every trial, on top of the algorithm's preset
      n_timesteps: 20000
      eval_freq: 2000
    space:                      # one distribution per hyperparameter (SB3's names, as in presets)
      learning_rate: {loguniform: [1.0e-4, 3.0e-3]}
      batch_size: {choice: [64, 128, 256]}
      tau: {uniform: [0.005, 0.05]}
      train_freq: {int: [1, 8]}             # integers, both ends included
      net_arch: {choice: [[64, 64], [256, 256]]}

Every name must be a hyperparameter of the algorithm, and every value a distribution can give must be
one that the algorithm's config accepts (checked by building a config from each end and each choice).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from rl2edge.errors import ConfigError, short_repr
from rl2edge.fileio import load_yaml

KINDS = ("loguniform", "uniform", "int", "logint", "choice")


@dataclass(frozen=True)
class Dimension:
    name: str
    kind: str
    args: tuple[Any, ...]  # (low, high) or the choices

    def to_tune(self) -> Any:
        """The Ray Tune domain; choices that Optuna cannot hold (lists) are sampled by index."""
        from ray import tune

        if self.kind == "choice":
            if all(isinstance(c, (bool, int, float, str)) for c in self.args):
                return tune.choice(list(self.args))
            return tune.choice(list(range(len(self.args))))
        low, high = self.args
        return {
            "loguniform": tune.loguniform,
            "uniform": tune.uniform,
            "int": lambda lo, hi: tune.randint(lo, hi + 1),  # randint excludes the upper end
            "logint": lambda lo, hi: tune.lograndint(lo, hi + 1),
        }[self.kind](low, high)

    def decode(self, value: Any) -> Any:
        """A sampled value as the config takes it (an index back into non-scalar choices)."""
        if self.kind == "choice" and not all(isinstance(c, (bool, int, float, str)) for c in self.args):
            return copy.deepcopy(self.args[int(value)])
        return value

    def corners(self) -> list[Any]:
        return list(self.args)


@dataclass(frozen=True)
class SearchSpace:
    dimensions: tuple[Dimension, ...]
    fixed: dict[str, Any]

    def to_tune(self) -> dict[str, Any]:
        return {d.name: d.to_tune() for d in self.dimensions}

    def decode(self, sampled: dict[str, Any]) -> dict[str, Any]:
        """A trial's hyperparameters: the fixed ones, then the sampled ones decoded."""
        return {**self.fixed, **{d.name: d.decode(sampled[d.name]) for d in self.dimensions}}


def _dimension(name: str, spec: Any, where: str) -> Dimension:
    if not isinstance(spec, dict) or len(spec) != 1:
        raise ConfigError(
            f"{where}: {name} must be one distribution, such as {{loguniform: [1e-4, 1e-2]}} or "
            f"{{choice: [64, 128]}}; got {short_repr(spec)}"
        )
    kind, args = next(iter(spec.items()))
    if kind not in KINDS:
        raise ConfigError(
            f"{where}: {name}: unknown distribution {short_repr(kind)}; use one of {', '.join(KINDS)}"
        )
    if not isinstance(args, list) or not args:
        raise ConfigError(f"{where}: {name}: {kind} takes a list, got {short_repr(args)}")
    if kind == "choice":
        return Dimension(name, kind, tuple(args))
    if len(args) != 2:
        raise ConfigError(f"{where}: {name}: {kind} takes [low, high], got {short_repr(args)}")
    try:  # YAML reads 1e-4 (no dot) as a string
        low, high = (int(a) if kind in ("int", "logint") else float(a) for a in args)
    except (TypeError, ValueError):
        raise ConfigError(f"{where}: {name}: {kind} bounds must be numbers, got {short_repr(args)}") from None
    if kind in ("int", "logint") and any(float(a) != int(float(a)) for a in args):
        raise ConfigError(f"{where}: {name}: {kind} bounds must be integers, got {short_repr(args)}")
    if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
        raise ConfigError(f"{where}: {name}: {kind} needs low < high, got {short_repr(args)}")
    if kind in ("loguniform", "logint") and low <= 0:
        raise ConfigError(f"{where}: {name}: {kind} needs a positive low bound, got {low}")
    return Dimension(name, kind, (low, high))


def parse_search_space(data: Any, where: str) -> SearchSpace:
    if not isinstance(data, dict) or "space" not in data:
        raise ConfigError(
            f"{where}: a search space file holds a mapping with 'space:' (and optionally 'fixed:')"
        )
    unknown = set(data) - {"space", "fixed"}
    if unknown:
        raise ConfigError(f"{where}: unknown key(s) {', '.join(sorted(unknown))}; use space: and fixed:")
    space, fixed = data["space"], data.get("fixed") or {}
    if not isinstance(space, dict) or not space:
        raise ConfigError(f"{where}: space: must map at least one hyperparameter to a distribution")
    if not isinstance(fixed, dict):
        raise ConfigError(f"{where}: fixed: must map hyperparameters to values")
    both = set(space) & set(fixed)
    if both:
        raise ConfigError(f"{where}: {', '.join(sorted(both))} both fixed and searched; keep one")
    return SearchSpace(tuple(_dimension(n, s, where) for n, s in space.items()), dict(fixed))


def load_search_space(
    path: str | Path, algo: str, env_id: str, config_file: str | Path | None = None
) -> SearchSpace:
    """Read and check a search space for `algo` on `env_id` (names and every value a trial can get)."""
    from rl2edge.train.algos import build_config, get

    where = str(path)
    space = parse_search_space(load_yaml(Path(path), "search space"), where)
    known = {f.name for f in fields(get(algo).config_class())}
    for name in [*space.fixed, *(d.name for d in space.dimensions)]:
        if name not in known:
            raise ConfigError(
                f"{where}: {short_repr(name)} is not a {algo.upper()} hyperparameter; known: {', '.join(sorted(known))}"
            )
    for name in ("n_timesteps", "eval_freq"):
        if any(d.name == name for d in space.dimensions):
            raise ConfigError(
                f"{where}: {name} cannot be searched: ASHA compares trials on one step schedule"
            )
    build_config(env_id, config_file, space.fixed, algo=algo)
    for dim in space.dimensions:
        for value in dim.corners():
            try:
                build_config(env_id, config_file, {**space.fixed, dim.name: value}, algo=algo)
            except ConfigError as exc:
                raise ConfigError(
                    f"{where}: {dim.name}: the value {short_repr(value)} is not accepted: {exc}"
                ) from None
    return space
