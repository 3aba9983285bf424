"""Replay buffers keep each observation value in its dtype (issue 46): a uint8 camera frame's pixels take a
byte each, as in SB3's buffer, and a sampled batch is the float32 batch of before, bit for bit.
benchmarks/replay_memory.py measures the memory (a quarter of before's for 100k 84x84x3 transitions)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from rl2edge.errors import ConfigError
from rl2edge.train.core import replay
from rl2edge.train.core.replay import ObservationStore, ReplayBuffer
from testkit.runs import assert_same_weights, tiny_train


def _mask(*runs: tuple[int, bool]) -> np.ndarray:
    return np.concatenate([np.full(n, px) for n, px in runs])


def test_the_store_gives_back_what_was_written_with_pixels_as_uint8() -> None:
    # keys in any order: a vector, a frame, a vector, a frame (runs of each, copied as slices)
    mask = _mask((3, False), (12, True), (1, False), (8, True))
    rng = np.random.default_rng(0)
    obs = np.where(mask, rng.integers(0, 256, (50, mask.size)), rng.normal(size=(50, mask.size)) * 1e3)
    obs = obs.astype(np.float32)
    store = ObservationStore(64, mask.size, mask)
    store[np.arange(50)] = obs
    assert store.frames.dtype == np.uint8 and store.frames.shape == (64, 20)
    assert store.values.dtype == np.float32 and store.values.shape == (64, 4)
    idx = rng.integers(0, 50, (3, 7))  # [n, B] as the buffer samples
    got = store[idx]
    assert got.dtype == np.float32 and got.shape == (3, 7, mask.size)
    assert np.array_equal(got, obs[idx])  # exact: pixels are the integers 0-255, vectors stay float32
    assert store.nbytes == 64 * (20 + 4 * 4)
    plain = ObservationStore(64, mask.size)  # no mask: float32 as before
    plain[np.arange(50)] = obs
    assert plain.frames.size == 0 and np.array_equal(plain[idx], obs[idx])


def test_a_mask_that_does_not_fit_the_observation_is_refused() -> None:
    with pytest.raises(ValueError, match="mask has 3 entries; the observation has 4"):
        ObservationStore(4, 4, np.ones(3, bool))


def test_the_memory_check_counts_frames_at_a_byte_a_pixel(monkeypatch: pytest.MonkeyPatch) -> None:
    """SB3's default buffer of 10^6 84x84x3 transitions: 157.7 GiB as float32, 39.4 GiB as uint8; both are
    refused under a 24 GiB limit, 10^5 uint8 transitions (3.9 GiB) are not."""
    monkeypatch.setattr(replay, "memory_limit", lambda: 24 * 2**30)
    pixels = np.ones(84 * 84 * 3, bool)
    with pytest.raises(ConfigError, match=r"21,168 values each \(21,168 of them uint8 pixels\): 39.4 GiB"):
        ReplayBuffer(10**6, (pixels.size,), True, 4, pixels=pixels)
    with pytest.raises(ConfigError, match=r"21,168 float32 values each: 157.7 GiB"):
        ReplayBuffer(10**6, (pixels.size,), True, 4)
    assert replay.observation_bytes(pixels.size, pixels.size) * 4 == replay.observation_bytes(pixels.size)


@pytest.mark.integration  # about 15 s for both: the integration tier (the default one is near its 15 minutes)
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_sac_on_a_camera_trains_the_same_with_uint8_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, framework: str
) -> None:
    """The same seed with frames stored as uint8 and as float32 (the store told to ignore the mask):
    the same checkpoint, weight for weight. The sampled batches are equal bit for bit, so the same code on
    the same CPU computes the same updates; a difference would mean the store changed a value."""
    overrides = {"learning_starts": 64, "batch_size": 16, "net_arch": [16, 16]}
    env = "testkit.dict_envs:CameraPendulum"  # 36x36x3 uint8 frame and a rate
    seen: list[int] = []
    original = ObservationStore.__init__

    def counting(self: ObservationStore, capacity: int, size: int, pixels: np.ndarray | None = None) -> None:
        original(self, capacity, size, pixels)
        seen.append(self.pixels)

    monkeypatch.setattr(ObservationStore, "__init__", counting)
    a = tiny_train(env, tmp_path / "uint8", steps=160, algo="sac", framework=framework, **overrides)
    assert seen == [36 * 36 * 3] * 2  # obs and next_obs, frames as uint8

    def as_float32(
        self: ObservationStore, capacity: int, size: int, pixels: np.ndarray | None = None
    ) -> None:
        counting(self, capacity, size, None)

    monkeypatch.setattr(ObservationStore, "__init__", as_float32)
    b = tiny_train(env, tmp_path / "float32", steps=160, algo="sac", framework=framework, **overrides)
    assert seen[2:] == [0, 0]
    assert_same_weights(a, b)


# ------------------------------------------------------------ each observation once (optimize_memory_usage)
def _stream(steps: int, n_envs: int, size: int, seed: int = 0):  # type: ignore[no-untyped-def]
    """Vectorized env steps as the off-policy driver adds them: (obs, action id, reward, next_obs (the
    final observation where an episode ended), terminated, done), episodes of random length, some
    terminated, some truncated; the next add's obs is the reset observation where one ended."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n_envs, size)).astype(np.float32)
    left = rng.integers(2, 9, n_envs)
    for t in range(steps):
        nxt = rng.normal(size=(n_envs, size)).astype(np.float32)
        left -= 1
        done = left == 0
        terminated = done & (rng.random(n_envs) < 0.5)
        ids = (t * n_envs + np.arange(n_envs)).astype(np.float32)[:, None]
        yield obs, ids, ids[:, 0], nxt, terminated.astype(np.float32), done
        reset = rng.normal(size=(n_envs, size)).astype(np.float32)
        obs = np.where(done[:, None], reset, nxt)
        left = np.where(done, rng.integers(2, 9, n_envs), left)


def test_each_observation_once_gives_the_plain_buffers_transitions() -> None:
    """Fed the same steps of 3 envs: until the ring wraps, the same draws give the plain buffer's batches
    bit for bit (the final observation of an ended episode, not the reset one, as next_obs); once it
    wraps, every sampled transition is still a true one (its action id names the obs and next_obs it had)."""
    from rl2edge.train.core.replay import SharedObsReplayBuffer

    n_envs, size = 3, 5
    plain = ReplayBuffer(60, (size,), False, 1)
    once = SharedObsReplayBuffer(60, (size,), False, 1, n_envs)
    truth: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    ident = lambda x: x  # noqa: E731
    for step, (obs, ids, rew, nxt, term, done) in enumerate(_stream(45, n_envs, size)):
        for b in (plain, once):
            b.add(obs, ids, rew, nxt, term)
            b.mark_episode_ends(done)
        for i in range(n_envs):
            truth[int(ids[i, 0])] = (obs[i], nxt[i])
        if step < 19:  # 20 adds fill the 60 transitions: the ring (63) has not wrapped
            got, want = (b.sample(2, 16, np.random.default_rng(step), ident) for b in (once, plain))
            for field in ("obs", "actions", "rewards", "next_obs", "dones"):
                assert np.array_equal(getattr(got, field), getattr(want, field)), (step, field)
    assert len(once) == 60 and once.obs.nbytes == 63 * size * 4  # one copy: plain stores 2 x 60
    batch = once.sample(4, 32, np.random.default_rng(9), ident)
    oldest = 45 * n_envs - 60  # action ids below it were overwritten
    for a, o, nx in zip(
        batch.actions.reshape(-1), batch.obs.reshape(-1, size), batch.next_obs.reshape(-1, size), strict=True
    ):
        assert a >= oldest, a
        assert np.array_equal(o, truth[int(a)][0]) and np.array_equal(nx, truth[int(a)][1]), a
    assert 0 < len(once.final) <= 60  # one kept observation per ended episode still in the buffer


def test_storing_once_halves_what_the_memory_check_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    """5 x 10^5 84x84x3 frames under a 24 GiB limit: 19.7 GiB as obs and next_obs is refused, with the
    option named; stored once, 9.9 GiB, it is not."""
    from rl2edge.train.core.replay import SharedObsReplayBuffer

    monkeypatch.setattr(replay, "memory_limit", lambda: 24 * 2**30)
    pixels = np.ones(84 * 84 * 3, bool)
    with pytest.raises(ConfigError, match=r"19.7 GiB .*`optimize_memory_usage: true`"):
        ReplayBuffer(5 * 10**5, (pixels.size,), True, 4, pixels=pixels)
    SharedObsReplayBuffer(5 * 10**5, (pixels.size,), True, 4, 1, pixels=pixels)  # numpy commits lazily


def test_optimize_memory_usage_is_refused_where_transitions_are_not_one_step(tmp_path: Path) -> None:
    from rl2edge.train.algos import build_config

    with pytest.raises(ConfigError, match="optimize_memory_usage is for uniform one-step replay"):
        build_config("CartPole-v1", overrides={"optimize_memory_usage": True}, algo="rainbow")
    with pytest.raises(ConfigError, match="HerReplayBuffer relabels stored transitions"):
        build_config("testkit.goal_envs:PointReach", algo="sac",
                     overrides={"optimize_memory_usage": True, "replay_buffer_class": "HerReplayBuffer"})  # fmt: skip


@pytest.mark.integration  # about 15 s for both
@pytest.mark.parametrize("framework", ["torch", "tf"])
def test_sac_on_a_camera_trains_the_same_storing_each_observation_once(
    tmp_path: Path, framework: str
) -> None:
    """The same seed with `optimize_memory_usage` on and off: the same checkpoint, weight for weight (the
    batches are equal bit for bit while the buffer has not wrapped, as in a run shorter than buffer_size),
    across CameraPendulum's episode ends (200 steps; truncations bootstrapped from their final frame)."""
    overrides = {"learning_starts": 64, "batch_size": 16, "net_arch": [16, 16]}
    env = "testkit.dict_envs:CameraPendulum"
    a = tiny_train(env, tmp_path / "once", steps=420, algo="sac", framework=framework,
                   optimize_memory_usage=True, **overrides)  # fmt: skip
    b = tiny_train(env, tmp_path / "twice", steps=420, algo="sac", framework=framework, **overrides)
    assert_same_weights(a, b)
