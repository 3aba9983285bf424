"""PPO's torch side: the network, the clipped-surrogate loss and the optimizer step. The driver
(rollout, GAE, minibatches, evaluation, checkpoint) is train.core.onpolicy_driver, shared with TF."""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import nn

from rl2edge.train.core.config import PPOConfig
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_policy import RolloutWeights
from rl2edge.train.core.rollout import Minibatch
from rl2edge.train.torch_backend.actor_critic_grad import ActorCriticGrad, ForwardPass
from rl2edge.train.torch_backend.encoder import encoder_weights
from rl2edge.train.torch_backend.matmul_precision import training_phase
from rl2edge.train.torch_backend.nets import ActorCritic, EncodedActor, clip_grad_norm
from rl2edge.train.torch_backend.optim_step import clear_grads, fused_adam_step
from rl2edge.train.torch_backend.setup import setup_torch
from rl2edge.train.torch_backend.weights import save_safetensors, state_copy

_logger = logging.getLogger(__name__)


def clipped_surrogate(adv: torch.Tensor, ratio: torch.Tensor, clip: float | torch.Tensor) -> torch.Tensor:
    """PPO's policy loss: the min of the unclipped and clipped objectives. Clipping the ratio alone
    (tf.clip_by_value(ratio) * adv) would also pass gradients where the min should cut them off."""
    return -torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)).mean()


def ppo_loss(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    values: torch.Tensor,
    old_logp: torch.Tensor,
    old_values: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor,
    clip: float | torch.Tensor,
    cfg: PPOConfig,
) -> tuple[torch.Tensor, ...]:
    """PPO's loss through autograd (`train --compile`, and the reference): ppo_grads writes out its
    derivative, so a change here goes there too (tests/test_actor_critic_grad.py compares them)."""
    log_ratio = logp - old_logp
    ratio = log_ratio.exp()
    pg_loss = clipped_surrogate(adv, ratio, clip)
    if cfg.clip_range_vf is not None:  # SB3's value clipping: around the values recorded in the rollout
        values = old_values + (values - old_values).clamp(-cfg.clip_range_vf, cfg.clip_range_vf)
    v_loss = nn.functional.mse_loss(returns, values)
    ent = entropy.mean()
    loss = pg_loss - cfg.ent_coef * ent + cfg.vf_coef * v_loss
    return loss, pg_loss, v_loss, ent, ratio, log_ratio


def ppo_stats(
    pg_loss: torch.Tensor,
    v_loss: torch.Tensor,
    ent: torch.Tensor,
    ratio: torch.Tensor,
    log_ratio: torch.Tensor,
    clip: float | torch.Tensor,
) -> torch.Tensor:
    """The update's stats row: the three losses, the approximate KL (Schulman's k3) and the fraction
    of samples whose ratio left the clip range."""
    kl = ((ratio - 1) - log_ratio).mean()
    return torch.stack([pg_loss, v_loss, ent, kl, ((ratio - 1).abs() > clip).float().mean()])


def ppo_grads(
    fwd: ForwardPass,
    old_logp: torch.Tensor,
    old_values: torch.Tensor,
    adv: torch.Tensor,
    returns: torch.Tensor,
    clip: float,
    cfg: PPOConfig,
) -> tuple[tuple[torch.Tensor, float, torch.Tensor], tuple[torch.Tensor, ...]]:
    """ppo_loss's derivatives with respect to each sample's log-prob, entropy and value, for
    ActorCriticGrad.backward, and its stats (pg_loss, v_loss, ent, ratio, log_ratio)."""
    n = fwd.terms.logp.shape[0]
    log_ratio = fwd.terms.logp - old_logp
    ratio = log_ratio.exp()
    unclipped, clipped = adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip)
    pg_loss = -torch.min(unclipped, clipped).mean()
    # The min's gradient is the unclipped term's, adv * ratio (d ratio / d logp = ratio), where that term
    # is the min; else zero (the clipped term is flat outside the range). Inside the range the two terms
    # are equal and autograd gives each half, which sums to the whole. Where rounding makes them equal
    # just outside it (adv * ratio == adv * (1 + clip) in float32), autograd would give half: harmless.
    g_logp = torch.where(unclipped <= clipped, unclipped, 0.0).mul_(-1.0 / n)
    values = fwd.values
    g_scale = 2.0 * cfg.vf_coef / n  # d mean((v - R)^2) / dv = 2 (v - R) / n
    if cfg.clip_range_vf is not None:
        move = values - old_values
        diff = old_values + move.clamp(-cfg.clip_range_vf, cfg.clip_range_vf) - returns
        g_values = torch.where(move.abs() <= cfg.clip_range_vf, diff, 0.0).mul_(g_scale)
    else:
        diff = values - returns
        g_values = diff * g_scale
    v_loss = diff.square().mean()
    ent = fwd.terms.entropy.mean()
    return (g_logp, -cfg.ent_coef / n, g_values), (pg_loss, v_loss, ent, ratio, log_ratio)


class TorchPPO:
    matmul_precision = "highest"  # of the training phases (train --matmul-precision sets it)
    framework = "torch"
    policy_distribution = True  # Box actions: the Gaussian of the actor's mean and the learned log std

    @classmethod
    def deployable_actor(cls, spec: NetworkSpec, load: Callable[[nn.Module, str], None]) -> nn.Module:
        """What export runs (the actor: logits, or the Gaussian's mean), built from the checkpoint's
        network spec and loaded by `load(module, prefix)` from the whole actor-critic's weights. Box actions:
        the state-independent log std rides along as the actor's buffer `log_std`, which `--noise policy`
        samples with."""
        net = ActorCritic.from_network_spec(spec)
        load(net, "")
        actor: nn.Module = net.actor if net.encoder is None else EncodedActor(net.encoder, net.actor)
        if hasattr(net, "log_std"):
            actor.register_buffer("log_std", net.log_std.detach().clone())
        return actor

    def __init__(self, network: NetworkSpec, cfg: PPOConfig, seed: int, device: str):
        dev = setup_torch(seed, device)
        self.cfg, self.dev, self.device = cfg, dev, str(dev)
        self.policy = ActorCritic.from_network_spec(network).to(dev)
        self.params = list(self.policy.parameters())
        self.optimizer = self.make_optimizer()
        # `autograd` True: train_step differentiates `loss` through autograd (compile_update sets it: the
        # compiled graph differentiates through AOTAutograd). False, the default: the written-out
        # gradient (ActorCriticGrad), the same values within float32 rounding without autograd's per-op
        # cost. A network it does not cover (another activation) falls back to autograd.
        self.backprop: ActorCriticGrad | None = None
        try:
            self.backprop = ActorCriticGrad(self.policy)
        except ValueError as exc:
            _logger.info("training through autograd: %s", exc)
        self.autograd = self.backprop is None
        self.compiled = False
        # A data-parallel job's gradient average over its processes (train.data_parallel), between the
        # backward pass and the clip: None in one process.
        self.grad_sync: Callable[[list[torch.Tensor]], None] | None = None

    def compile_update(self) -> None:
        """`train --compile`: the forward pass and the loss as one torch.compile graph (fullgraph, static
        shapes), and through AOTAutograd its backward; the gradient clip and the optimizer step stay eager.
        The clip range goes in as a 0-d tensor, not a Python float, so that its schedule does not make a
        new graph every update (one graph per minibatch shape: tests/test_compile.py counts them).
        On a CPU it does not beat the written-out gradient (ActorCriticGrad, the default) and costs seconds
        of compiling first (benchmarks/micro_costs.py measures the three side by side); it is meant for
        GPUs, where per-kernel launch costs dominate small nets."""
        self._loss_tensors = torch.compile(  # type: ignore[method-assign]  # the compiled twin, per agent
            self._loss_tensors, fullgraph=True, dynamic=False
        )
        self.compiled = self.autograd = True
        self._clip_value: float | None = None
        self._clip_t: torch.Tensor | None = None

    def make_optimizer(self) -> torch.optim.Optimizer:
        # fused Adam: one kernel for all parameters instead of a few per parameter tensor.
        return torch.optim.Adam(
            self.policy.parameters(), lr=self.cfg.learning_rate(1.0), eps=1e-5, fused=True
        )

    def _t(self, x: np.ndarray) -> torch.Tensor:
        return torch.as_tensor(x, device=self.dev)

    def act(self, obs: np.ndarray, noise: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        action, logp, value = self.policy.act(self._t(obs), self._t(noise))
        return action.cpu().numpy(), logp.cpu().numpy(), value.cpu().numpy()

    def rollout_weights(self) -> RolloutWeights:
        """The weights the rollout acts with (train.core.numpy_policy), kernels [in, out]."""
        layers = lambda seq: [  # noqa: E731
            (m.weight.detach().cpu().numpy().T, m.bias.detach().cpu().numpy())
            for m in seq
            if isinstance(m, nn.Linear)
        ]
        p = self.policy
        log_std = None if p.discrete else p.log_std.detach().cpu().numpy()
        return RolloutWeights(layers(p.actor), layers(p.critic), log_std, encoder_weights(p.encoder))

    @torch.no_grad()
    def deterministic(self, obs: np.ndarray) -> np.ndarray:
        return self.policy.deterministic(self._t(obs)).cpu().numpy()

    def set_learning_rate(self, lr: float) -> None:
        for group in self.optimizer.param_groups:
            group["lr"] = lr

    def loss(self, mb: Minibatch, clip: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The loss to minimize and the stats row (kept on the device)."""
        return self._loss_tensors(
            self._t(mb.obs),
            self._t(mb.actions),
            self._t(mb.old_logprobs),
            self._t(mb.old_values),
            self._t(mb.advantages),
            self._t(mb.returns),
            self._clip_tensor(clip) if self.compiled else clip,
        )

    def _clip_tensor(self, clip: float) -> torch.Tensor:
        """The compiled loss's clip range: float64, as the eager path's Python float (1 - clip rounds the
        same way in both); made once per value, not per minibatch (a host-to-device copy on a GPU)."""
        if self._clip_value != clip:
            self._clip_t = torch.tensor(clip, dtype=torch.float64, device=self.dev)
            self._clip_value = clip
        return self._clip_t

    def _loss_tensors(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        old_logp: torch.Tensor,
        old_values: torch.Tensor,
        adv: torch.Tensor,
        returns: torch.Tensor,
        clip: float | torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        logp, entropy, values = self.policy.evaluate_actions(obs, actions)
        loss, pg_loss, v_loss, ent, ratio, log_ratio = ppo_loss(
            logp, entropy, values, old_logp, old_values, adv, returns, clip, self.cfg
        )
        with torch.no_grad():
            stats = ppo_stats(pg_loss, v_loss, ent, ratio, log_ratio, clip)
        return loss, stats.detach()

    @torch.no_grad()
    def written_out_grads(self, mb: Minibatch, clip: float) -> torch.Tensor:
        """The loss's gradient into every `.grad` through ActorCriticGrad (no autograd); the stats row
        as `loss` returns it."""
        assert self.backprop is not None, "this network trains through autograd (self.autograd)"
        fwd = self.backprop.forward(self._t(mb.obs), self._t(mb.actions))
        grads, (pg_loss, v_loss, ent, ratio, log_ratio) = ppo_grads(
            fwd,
            self._t(mb.old_logprobs),
            self._t(mb.old_values),
            self._t(mb.advantages),
            self._t(mb.returns),
            clip,
            self.cfg,
        )
        self.backprop.backward(fwd, *grads)
        return ppo_stats(pg_loss, v_loss, ent, ratio, log_ratio, clip)

    def train_step(self, mb: Minibatch, clip: float) -> torch.Tensor:
        if self.autograd:
            loss, stats = self.loss(mb, clip)
            clear_grads(self.optimizer)
            loss.backward()
        else:
            stats = self.written_out_grads(mb, clip)
        if self.grad_sync is not None:
            self.grad_sync(self.params)
        clip_grad_norm(self.params, self.cfg.max_grad_norm)
        fused_adam_step(self.optimizer)
        return stats  # on the device: one sync per update, not five per minibatch

    def train_minibatches(self, mbs: list[Minibatch], clip: float) -> np.ndarray:
        with training_phase(self.matmul_precision):  # subnormals flushed, the run's precision
            rows = [self.train_step(mb, clip) for mb in mbs]
        return torch.stack(rows).mean(0).cpu().numpy()

    def get_state(self) -> dict[str, torch.Tensor]:
        return state_copy(self.policy)

    def set_state(self, state: dict[str, torch.Tensor]) -> None:
        self.policy.load_state_dict(state)

    def save_weights(self, run_dir: Path) -> str:
        return save_safetensors(self.policy, run_dir)
