"""TD3 (and DDPG) in TensorFlow, the twin of train.torch_backend.td3. The critic-step counter is a
tf.Variable incremented inside the compiled step, and the delayed actor and target updates run under
tf.cond on it: a Python int there would be frozen into the graph at trace time."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_actor import Tanh
from rl2edge.train.core.offpolicy_config import TD3Config
from rl2edge.train.tf_backend.offpolicy_base import TFOffPolicyBase

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


class TFTD3(TFOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss")

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """What export's graph is built from: the tanh actor's Dense chain, the networks built from the
        checkpoint's network spec and loaded by `load(model)`."""
        from rl2edge.train.tf_backend.nets import DeployParts, TD3Nets, dense_layers, encoder_fn_of

        nets = TD3Nets(spec)
        load(nets)
        return DeployParts(dense_layers(nets.actor), encoder_fn=encoder_fn_of(nets.actor))

    def __init__(self, network: NetworkSpec, cfg: TD3Config, seed: int, device: str):
        super().__init__(seed, device)
        from rl2edge.train.tf_backend.nets import TD3Nets

        tf = self.tf
        self.cfg = cfg
        self.nets = TD3Nets(network, seed)
        self.actor_vars = self.nets.actor.trainable_variables
        self.actor_target_vars = self.nets.actor_target.trainable_variables
        self.critic_vars = self.nets.critic_variables
        self.critic_target_vars = self.nets.critic_target_variables
        lr = cfg.learning_rate(1.0)
        self.actor_opt = self.adam(self.actor_vars, lr)
        self.critic_opt = self.adam(self.critic_vars, lr)
        self.n_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="n_updates")
        if network.encoder is None:  # image keys: the graph explores (no numpy copy of a Nature-CNN)
            self.explorer = self.numpy_explorer(network.activation, self.actor_vars, Tanh())
        self.compile(int(network.obs_dim), int(network.act_dim), discrete=False)

    def parts(self) -> dict[str, list[Any]]:
        return {
            "actor": self.actor_vars,
            "actor_target": self.actor_target_vars,
            "critic": self.critic_vars,
            "critic_target": self.critic_target_vars,
        }

    def deterministic_graph(self, obs: Any) -> Any:
        return self.nets.actor(obs)

    def actor_step(self, obs: Any) -> Any:
        """The delayed update: actor on Q1, then both target networks."""
        from rl2edge.train.tf_backend.nets import polyak_update

        tf = self.tf
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(self.nets.q(obs, self.nets.actor(obs), first=True)[0])
        self.actor_opt.apply_gradients(
            zip(tape.gradient(loss, self.actor_vars), self.actor_vars, strict=True)
        )
        polyak_update(self.critic_vars, self.critic_target_vars, self.cfg.tau)
        polyak_update(self.actor_vars, self.actor_target_vars, self.cfg.tau)
        return loss

    def train_step_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        tf, nets, cfg = self.tf, self.nets, self.cfg
        self.n_updates.assign_add(1)
        noise = tf.clip_by_value(
            self.rng.normal(tf.shape(actions)) * cfg.target_policy_noise,
            -cfg.target_noise_clip,
            cfg.target_noise_clip,
        )
        next_a = tf.clip_by_value(nets.actor_target(next_obs) + noise, -1.0, 1.0)
        next_q = tf.reduce_min(tf.stack(nets.q_target(next_obs, next_a)), axis=0)
        target_q = tf.stop_gradient(rewards + (1.0 - dones) * cfg.gamma * next_q)
        with tf.GradientTape() as tape:
            critic_loss = tf.add_n([tf.reduce_mean(tf.square(q - target_q)) for q in nets.q(obs, actions)])
        self.critic_opt.apply_gradients(
            zip(tape.gradient(critic_loss, self.critic_vars), self.critic_vars, strict=True)
        )
        actor_loss = tf.cond(
            self.n_updates % cfg.policy_delay == 0,
            lambda: self.actor_step(obs),
            lambda: tf.constant(float("nan")),
        )
        return tf.stack([actor_loss, critic_loss])
