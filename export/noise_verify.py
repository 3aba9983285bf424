"""Checks of an exported graph's folded noise, on numpy arrays through the runtime: neutral at zero, and
sampling the configured distribution. No framework: the TF route runs them as the torch route does."""

from __future__ import annotations

from typing import Any

import numpy as np

from rl2edge.errors import ExportError
from rl2edge.export.tolerances import NOISE_N_SIGMA, NOISE_SLACK
from rl2edge.specs import NoiseSpec

SAMPLES = 2000


def check_noise_off(source: Any, obs: np.ndarray, rtol: float) -> dict[str, Any]:
    """With zero noise (and zero OU state) the noisy graph must give the deterministic head's actions
    within float32 rounding (`Tolerances.noise_off_rtol`): two graphs, so never compared bit for bit."""
    zeros = np.zeros((len(obs), source.act_dim), np.float32)
    noisy, _ = source.noisy_actions(obs, zeros, zeros if source.noise.kind == "ou" else None)
    det = source.deployable_actions(obs)
    diff = float(np.max(np.abs(noisy.reshape(det.shape).astype(np.float64) - det)))
    tolerance = rtol * max(1.0, float(np.max(np.abs(det))))
    result = {
        "samples": len(obs),
        "max_abs_diff": diff,
        "tolerance": tolerance,
        "bit_equal": bool(np.array_equal(noisy.reshape(det.shape), det)),  # informative: CPU-dependent
    }
    if not diff <= tolerance:
        raise ExportError(
            f"with the noise input at zero the noisy graph differs from the deterministic one by {diff:.3g} "
            f"(tolerance {tolerance:.3g}) on {len(obs)} held-out observations: the noise process is not neutral at zero"
        )
    return result


def _moments(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return x.mean(axis=0), x.std(axis=0)


def verify_distribution(
    served: Any, source: Any, heldout: np.ndarray, mode: str, seed: int
) -> dict[str, Any]:
    """Sample the file through the runtime at one observation and compare the actions' mean and std, in
    [-1, 1]-scaled units, with the configured distribution's (a Monte Carlo reference, which also covers
    the clip at the bounds). OU: its innovations x' - (1 - theta dt) x must have mean 0 and std sigma
    sqrt(dt). Leaves `served` exploring, its noise restarted from `seed`."""
    from rl2edge.specs import ActionTransform

    spec: NoiseSpec = source.noise
    t = ActionTransform(source.action)
    to_scaled = lambda a: (np.asarray(a, np.float32).reshape(-1, source.act_dim) - t.center) / t.half_range  # noqa: E731
    det = to_scaled(source.deployable_actions(heldout))
    i = int(np.argmin(np.abs(det).max(axis=1)))  # the observation farthest from the bounds
    obs = heldout[i]
    served.explore = False
    u0 = to_scaled(served.raw(obs))[0]
    served.explore = True
    served.reset_noise(seed)
    samples, states = [], []
    for _ in range(SAMPLES):
        samples.append(to_scaled(served.raw(obs))[0])
        if spec.kind == "ou":
            states.append(served.noise_state.reshape(-1))
    u = np.stack(samples)
    ref_rng = np.random.default_rng(seed + 1)  # independent of the draws the runtime made
    z = ref_rng.standard_normal((200_000, source.act_dim)).astype(np.float32)
    out: dict[str, Any] = {"samples": SAMPLES, "observation_index": i, "units": "[-1, 1]-scaled action"}
    atol, rtol = NOISE_SLACK.get(mode, NOISE_SLACK["int8"])
    n_sigma = NOISE_N_SIGMA
    if spec.kind == "ou":
        x = np.stack(states)
        prev = np.vstack([np.zeros((1, source.act_dim), np.float32), x[:-1]])
        innov = x - (1.0 - np.float32(spec.theta * spec.dt)) * prev
        expected_std = np.full(source.act_dim, spec.sigma * np.sqrt(spec.dt))
        mean, std = _moments(innov)
        action_err = float(np.max(np.abs(u - np.clip(u0 + x, -1.0, 1.0))))
        out["action_vs_state_max_abs_err"] = action_err
        mean_ok = np.all(np.abs(mean) <= n_sigma * expected_std / np.sqrt(SAMPLES) + 1e-6)
        std_ok = np.all(np.abs(std / expected_std - 1.0) <= n_sigma / np.sqrt(2 * SAMPLES) + 1e-3)
        passed = bool(mean_ok and std_ok and action_err <= atol + 1e-5)
        out.update(
            statistic="innovations of the OU state",
            expected_mean=[0.0] * source.act_dim,
            expected_std=expected_std.tolist(),
        )
    else:
        if spec.kind == "gaussian":
            reference = np.clip(u0 + np.float32(spec.sigma) * z, -1.0, 1.0)
        else:
            # The file's own mean (its deterministic output, inverted through the squash) with the source's
            # std: parity already measures the mean's quantization error; this checks the sampling.
            m, s = source.distribution(obs[None])
            if source.head == "tanh_unscale":
                mean = np.arctanh(np.clip(u0, -0.999999, 0.999999))
            else:
                mean = np.where(np.abs(u0) < 1.0, u0, m[0])
            pre = mean + s[0] * z
            reference = np.tanh(pre) if source.head == "tanh_unscale" else np.clip(pre, -1.0, 1.0)
        exp_mean, exp_std = _moments(reference)
        mean, std = _moments(u)
        mean_ok = np.all(np.abs(mean - exp_mean) <= n_sigma * exp_std / np.sqrt(SAMPLES) + atol)
        std_ok = np.all(np.abs(std - exp_std) <= (n_sigma / np.sqrt(2 * SAMPLES) + rtol) * exp_std + 1e-6)
        passed = bool(mean_ok and std_ok)
        out.update(
            statistic="sampled actions", expected_mean=exp_mean.tolist(), expected_std=exp_std.tolist()
        )
    out.update(
        sample_mean=mean.tolist(),
        sample_std=std.tolist(),
        tolerance={"n_sigma": n_sigma, "atol": atol, "rtol": rtol},
    )
    out["passed"] = passed
    served.reset_noise()
    return out
