"""Stable-Baselines3 models (PPO, A2C, SAC, TD3, DQN; MlpPolicy, sb3-contrib's RecurrentPPO with MlpLstmPolicy, and MultiInputPolicy on Dict observations
of vector and image keys) as export sources, with VecNormalize's observation statistics, epsilon and
clipping folded into the graph (per key for a Dict: the keys outside `norm_obs_keys` pass raw) and SB3's own
action post-processing reproduced in the head (clip to bounds for PPO/A2C, unscale for squashed policies,
argmax for DQN). A MultiInputPolicy's CombinedExtractor runs a Nature-CNN on each image key (scaled by
1/255, not normalized) and flattens each vector key, then concatenates them in the Dict's order, the order
of the artifact's observation. An image key keeps the env's layout in the artifact: when SB3 trained on
channel-first frames (VecTransposeImage) from a channel-last env, the graph transposes, as SB3's
`predict` does.

Loading an SB3 .zip or a VecNormalize .pkl runs pickle: only load files you trust.
"""

from __future__ import annotations

import logging
import pickle
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torch import nn

from rl2edge.errors import ConfigError, ExportError
from rl2edge.export.deployable import DeployablePolicy
from rl2edge.export.source import ExportSource
from rl2edge.export.torch_graph import TorchSource
from rl2edge.fileio import sha256_file
from rl2edge.specs import ObservationSpec
from rl2edge.train.core.envs import check_env_id, make_env
from rl2edge.train.core.normalization import RunningNormalizer
from rl2edge.train.core.spaces import action_spec, observation_spec

if TYPE_CHECKING:
    from rl2edge.export.sources import SourceOptions

_logger = logging.getLogger(__name__)

# SB3 pickles schedules as closures, which need not unpickle on another Python; none are needed here.
_CUSTOM_OBJECTS = {
    "learning_rate": 0.0,
    "lr_schedule": lambda _: 0.0,
    "clip_range": lambda _: 0.0,
    "exploration_schedule": lambda _: 0.0,
}


def _algo_of(path: Path) -> str:
    from stable_baselines3.common.save_util import load_from_zip_file

    try:
        data, _, _ = load_from_zip_file(
            str(path), device="cpu", custom_objects=_CUSTOM_OBJECTS, print_system_info=False
        )
    except Exception as exc:  # zipfile, pickle and SB3 raise many types for a file that is not a model
        raise ConfigError(f"{path} is not a Stable-Baselines3 model: {exc}") from None
    policy_class = data.get("policy_class")
    module = getattr(policy_class, "__module__", "")
    name = getattr(policy_class, "__name__", str(policy_class))
    if "Cnn" in name and module == "sb3_contrib.common.recurrent.policies":
        raise ExportError(
            f"{path}: CnnLstmPolicy ({name}) is not supported yet; RecurrentPPO's MlpLstmPolicy is"
        )
    if module == "sb3_contrib.common.recurrent.policies":  # sb3-contrib's RecurrentPPO
        if "MultiInput" in name:
            raise ExportError(
                f"{path}: MultiInputLstmPolicy ({name}) is not supported yet; RecurrentPPO's MlpLstmPolicy is"
            )
        return "recurrent_ppo"
    if module.endswith("common.policies"):
        return "ppo" if "clip_range" in data or "n_epochs" in data else "a2c"
    for algo in ("sac", "td3", "dqn"):  # DDPG shares TD3's policy module and actor
        if module == f"stable_baselines3.{algo}.policies":
            return algo
    raise ExportError(f"{path}: policy class {module}.{name} is not one of PPO, A2C, SAC, TD3, DQN")


SbKey = tuple[str, slice, tuple[int, ...], bool]
"""A MultiInputPolicy's key: name, slice of the flat observation, the env's shape, and whether SB3's
network takes it transposed (a channel-last frame to SB3's channel-first)."""


class Sb3Actor(nn.Module):
    """The part of an SB3 policy that maps a (normalized) observation to logits, Q-values or the mean."""

    def __init__(self, model: Any, algo: str, keys: list[SbKey] | None = None):
        """`keys`: a MultiInputPolicy's Dict keys (`SbKey`)."""
        super().__init__()
        self.algo = algo
        self.policy = model.policy
        self.keys = keys
        self._prescaled: dict[int, nn.Module | None] = {}  # a CnnPolicy's extractors, 1/255 folded in

    def forward(self, flat: torch.Tensor) -> torch.Tensor:
        p = self.policy
        if self.algo in ("ppo", "a2c"):
            latent = p.mlp_extractor.forward_actor(self._features(p, p.pi_features_extractor, flat))
            return p.action_net(latent)
        if self.algo == "sac":
            a = p.actor
            return a.mu(a.latent_pi(self._features(a, a.features_extractor, flat)))
        if self.algo == "td3":
            a = p.actor
            return a.mu(self._features(a, a.features_extractor, flat))
        q = p.q_net
        return q.q_net(self._features(q, q.features_extractor, flat))

    def _features(self, net: Any, extractor: nn.Module, flat: torch.Tensor) -> torch.Tensor:
        """SB3's `extract_features`. A Dict's keys are views of the flat observation, preprocessed here as
        SB3's preprocess_obs does (image keys scaled to [0, 1], the rest as they are), with the scaling on
        the flat slice, before the reshape: onnx2tf 1.29's accuracy check of a binary op whose output has
        two equal dims (a square frame, H == W) fails to convert ("Output tensors of a Functional model
        must be the output of a TensorFlow Layer"). A Mul by 1/255 and SB3's Div by 255 differ by at most
        one float32 ulp of the scaled pixel."""
        from stable_baselines3.common.preprocessing import is_image_space

        if not self.keys:
            if is_image_space(net.observation_space, check_channels=False) and net.normalize_images:
                key = id(extractor)
                if key not in self._prescaled:
                    self._prescaled[key] = _prescaled(extractor)
                scaled = self._prescaled[key]
                if scaled is not None:
                    return scaled(flat)
            return net.extract_features(flat, extractor)

        obs = {}
        for k, part, shape, transpose in self.keys:
            x = flat[:, part]
            if is_image_space(net.observation_space[k], check_channels=False) and net.normalize_images:
                x = x * (1.0 / 255.0)  # on the flat slice: see above
            x = x.reshape(-1, *shape)
            obs[k] = x.permute(0, 3, 1, 2) if transpose else x
        return extractor(obs)


def _prescaled(extractor: nn.Module) -> nn.Module | None:
    """A CnnPolicy's Nature-CNN with SB3's 1/255 folded into its first convolution's weights: conv(x / 255)
    = conv'(x) with W' = W / 255, equal within float32 rounding. No elementwise op on the 4-D frame is left
    for onnx2tf, which mistracks the layout of one there (its NCHW input turned NHWC: a reshape of the
    scaled frame fails to convert). None: an extractor of another form (SB3's own preprocessing is kept)."""
    import copy

    first = getattr(getattr(extractor, "cnn", None), "0", None)
    if not isinstance(first, nn.Conv2d):
        return None
    scaled = copy.deepcopy(extractor).requires_grad_(False)  # constants of the traced graph
    with torch.no_grad():
        scaled.cnn[0].weight.mul_(1.0 / 255.0)
    return scaled


class _RecurrentView:
    """An sb3-contrib RecurrentActorCriticPolicy as LSTMCellActor reads a recurrent actor-critic: the actor's
    LSTM, then its MLP (mlp_extractor.policy_net) and action_net, and PPO's log std."""

    def __init__(self, policy: Any, discrete: bool):
        from types import SimpleNamespace

        if policy.lstm_actor.bias is False or policy.lstm_actor.batch_first:
            raise ExportError("an LSTM without biases or batch-first is not RecurrentPPO's; not supported")
        self.lstm_actor = policy.lstm_actor
        self.layers, self.hidden = policy.lstm_actor.num_layers, policy.lstm_actor.hidden_size
        self.discrete = discrete
        self.heads = SimpleNamespace(
            actor=nn.Sequential(policy.mlp_extractor.policy_net, policy.action_net),
            log_std=getattr(policy, "log_std", None),
        )


class RecurrentReference:
    """sb3-contrib's own `predict(obs, state, episode_start, deterministic=True)`, the state carried from call
    to call and reset at an episode's start: what an imported recurrent policy's files are checked against."""

    def __init__(self, model: Any, normalize: Any):
        self.model, self.normalize = model, normalize
        self.reset()

    def reset(self) -> None:
        self.state: Any = None
        self.start = np.ones((1,), bool)

    def __call__(self, row: np.ndarray) -> np.ndarray:
        x = np.asarray(row, np.float32).reshape(1, -1)
        actions, self.state = self.model.predict(
            self.normalize(x), state=self.state, episode_start=self.start, deterministic=True
        )
        self.start = np.zeros((1,), bool)
        return np.asarray(actions)[0]

    def trajectory(self, obs: np.ndarray, starts: np.ndarray) -> np.ndarray:
        out = []
        for row, start in zip(obs, starts, strict=True):
            if start:
                self.reset()
            out.append(self(row))
        self.reset()
        return np.stack(out)


def observation_is_dict(model: Any) -> bool:
    import gymnasium as gym

    return isinstance(model.observation_space, gym.spaces.Dict)


def _head(model: Any, algo: str, discrete: bool) -> str:
    if discrete:
        return "argmax"
    if algo == "sac" or (
        algo in ("ppo", "a2c", "recurrent_ppo") and getattr(model.policy, "squash_output", False)
    ):
        return "tanh_unscale"
    if algo == "td3":
        return "unscale"
    return "clip"


def _normalizer(vecnormalize: Path | None, observation: ObservationSpec) -> tuple[RunningNormalizer, Any]:
    obs_shape = observation.shape
    if vecnormalize is None:
        return RunningNormalizer(obs_shape, enabled=False), None
    try:
        with open(vecnormalize, "rb") as f:
            vn = pickle.load(f)
    except FileNotFoundError:
        raise ConfigError(f"VecNormalize file {vecnormalize} does not exist") from None
    except Exception as exc:
        raise ConfigError(f"{vecnormalize} is not a VecNormalize file: {exc}") from None
    rms = getattr(vn, "obs_rms", None)
    norm = RunningNormalizer(
        obs_shape, clip=float(vn.clip_obs), eps=float(vn.epsilon), enabled=bool(vn.norm_obs)
    )
    if isinstance(rms, dict):
        if not observation.is_dict:
            raise ConfigError(
                f"{vecnormalize} normalizes Dict keys {sorted(rms)}; the model's observation is a Box"
            )
        _dict_statistics(norm, rms, observation, vecnormalize)
    elif rms is not None and observation.is_dict:
        raise ConfigError(f"{vecnormalize} holds Box statistics; the model's observation is a Dict")
    elif rms is not None:
        norm.mean = np.asarray(rms.mean, np.float64).reshape(obs_shape)
        norm.var = np.asarray(rms.var, np.float64).reshape(obs_shape)
        norm.count = float(rms.count)
    return norm, vn


def _dict_statistics(
    norm: RunningNormalizer, rms: dict[str, Any], observation: ObservationSpec, path: Path
) -> None:
    """VecNormalize on a Dict (`norm_obs_keys`): each listed key's statistics in its slice, the other keys
    raw (neither normalized nor clipped), as VecNormalize.normalize_obs treats them."""
    slices = dict(observation.key_slices)
    unknown = sorted(set(rms) - set(slices))
    if unknown:
        raise ConfigError(f"{path} normalizes keys {unknown} that the model's observation does not have")
    raw = np.ones(observation.shape, bool)
    counts = set()
    shapes = {k.name: k.shape for k in observation.keys}
    for key, stats in rms.items():
        part = slices[key]
        shape = tuple(np.shape(stats.mean))
        if len(shape) == 3 and shape != shapes[key]:
            raise ConfigError(
                f"{path}: key {key!r} has statistics of shape {list(shape)}, the env's frame {list(shapes[key])}: "
                "VecNormalize saw the frames transposed; normalize before VecTransposeImage, or leave the camera "
                "out of norm_obs_keys (SB3 scales images by 1/255 itself)"
            )
        if np.asarray(stats.mean).size != part.stop - part.start:
            raise ConfigError(
                f"{path}: key {key!r} has statistics of {np.asarray(stats.mean).size} values, the model's key "
                f"{part.stop - part.start}; is it the VecNormalize file of this model?"
            )
        norm.mean[part] = np.asarray(stats.mean, np.float64).reshape(-1)
        norm.var[part] = np.asarray(stats.var, np.float64).reshape(-1)
        raw[part] = False
        counts.add(float(stats.count))
    norm.count = max(counts) if counts else norm.count
    norm.raw = raw if raw.any() else None


def _transposed(model_shape: tuple[int, ...], env_shape: tuple[int, ...]) -> bool:
    """SB3's VecTransposeImage: the env's HWC frame is the model's CHW one."""
    if len(env_shape) != 3 or model_shape == env_shape:
        return False
    h, w, c = env_shape
    return model_shape == (c, h, w)  # more than 4 channels: image_layout refuses it with its own message


def _same_spaces(model: Any, env: Any) -> bool:
    import gymnasium as gym

    mo, eo = model.observation_space, env.observation_space
    if type(env.action_space) is not type(model.action_space):
        return False
    if isinstance(mo, gym.spaces.Dict) or isinstance(eo, gym.spaces.Dict):
        return (
            isinstance(mo, gym.spaces.Dict)
            and isinstance(eo, gym.spaces.Dict)
            and list(mo.spaces) == list(eo.spaces)
            and all(mo[k].shape == eo[k].shape or _transposed(mo[k].shape, eo[k].shape) for k in mo.spaces)
        )
    return bool(eo.shape == mo.shape or _transposed(mo.shape, eo.shape))  # a CnnPolicy's HWC frame


def from_path(path: Path, options: SourceOptions) -> ExportSource:
    """export.sources' entry point."""
    return source_from_sb3(path, options.env, options.vecnormalize)


def source_from_sb3(path: Path, env_id: str | None, vecnormalize: Path | None) -> ExportSource:
    if env_id is None:
        raise ConfigError(
            "exporting a Stable-Baselines3 .zip needs --env ENV_ID (SB3 files do not record it)"
        )
    if not path.is_file():
        raise ConfigError(f"SB3 model {path} does not exist")
    check_env_id(env_id)
    algo = _algo_of(path)
    import stable_baselines3 as sb3

    if algo == "recurrent_ppo":
        try:
            from sb3_contrib import RecurrentPPO
        except ImportError:
            raise ConfigError(
                f"{path} is an sb3-contrib RecurrentPPO model: install sb3-contrib to export it"
            ) from None
        cls: Any = RecurrentPPO
    else:
        cls = {"ppo": sb3.PPO, "a2c": sb3.A2C, "sac": sb3.SAC, "td3": sb3.TD3, "dqn": sb3.DQN}[algo]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = cls.load(str(path), device="cpu", custom_objects=_CUSTOM_OBJECTS)
    model.policy.set_training_mode(False)
    action = action_spec(model.action_space)
    env = make_env(env_id)
    try:
        if not _same_spaces(model, env):
            raise ConfigError(
                f"{path} was trained on {model.observation_space} -> {model.action_space}; {env_id} has "
                f"{env.observation_space} -> {env.action_space}. Is --env right?"
            )
        # The artifact takes the observation as the env (and the PLC) gives it: a Dict's image keys, or a
        # CnnPolicy's frame, in the env's layout, which may be the transpose of what SB3's network saw
        dict_env = env.observation_space if observation_is_dict(model) else None
        space = dict_env or (env.observation_space if len(env.observation_space.shape or ()) == 3 else None)
        observation = observation_spec(
            space or model.observation_space, env.metadata.get("observation_units") if dict_env else None
        )
    finally:
        env.close()
    if algo == "recurrent_ppo" and observation.layout != "flat":
        raise ExportError(
            f"{path}: a recurrent policy of an image {list(observation.shape)} is not supported yet"
        )
    norm, vn = _normalizer(vecnormalize, observation)
    head = _head(model, algo, action.discrete)
    keys: list[SbKey] = [
        (k.name, part, k.shape, _transposed(tuple(model.observation_space[k.name].shape), k.shape))
        for k, (_, part) in zip(observation.keys, observation.key_slices, strict=True)
    ]
    actor: nn.Module
    if algo == "recurrent_ppo":  # one LSTM step per call, the state explicit (export.stateful)
        from rl2edge.train.torch_backend.recurrent_nets import LSTMCellActor

        actor = LSTMCellActor(_RecurrentView(model.policy, action.discrete))  # type: ignore[arg-type]
    else:
        actor = Sb3Actor(model, algo, keys)
    # a CnnPolicy's frame: the graph takes NCHW, SB3's own order (the env's HWC frame transposed, as SB3's
    # VecTransposeImage does); onnx2tf gives the TFLite file the env's NHWC
    layout = observation.layout if not observation.is_dict else "flat"
    policy = DeployablePolicy(actor, norm, action, head, layout).eval()

    def sb3_predict(obs: np.ndarray) -> Any:
        x: Any = np.asarray(obs, np.float32)
        if keys:  # SB3 takes a Dict model's batch as a dict of arrays (its predict transposes frames)
            x = {k: x[:, part].reshape(-1, *shape) for k, part, shape, _ in keys}
        if vn is not None:
            x = vn.normalize_obs(x)
        actions, _ = model.predict(x, deterministic=True)
        return np.asarray(actions)

    description: dict[str, Any] = {
        "kind": "stable-baselines3",
        "file": str(path),
        "sha256": sha256_file(path),
        "algo": algo,
        "framework": f"torch (stable-baselines3 {sb3.__version__})",
        "env_id": env_id,
        "policy": model.policy.__class__.__name__,
        "vecnormalize": None
        if vecnormalize is None
        else {"file": str(vecnormalize), "sha256": sha256_file(vecnormalize)},
    }
    _logger.info(
        "SB3 %s on %s, head %s, VecNormalize %s",
        algo.upper(),
        env_id,
        head,
        "yes" if vn is not None else "no",
    )
    return TorchSource(
        env_id,
        observation,
        action,
        norm,
        head,
        description,
        "SB3 predict",
        algo=f"sb3-{algo}",
        policy=policy,
        reference=sb3_predict,
        stateful_reference=RecurrentReference(model, vn.normalize_obs if vn is not None else (lambda x: x))
        if algo == "recurrent_ppo"
        else None,
    )
