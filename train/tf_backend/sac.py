"""SAC in TensorFlow, the twin of train.torch_backend.sac: twin critics with polyak-averaged targets
(assignments inside the compiled step), a squashed Gaussian actor, and a temperature whose Adam owns
log-alpha alone. One compiled call runs all of a training phase's gradient steps."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.numpy_actor import SquashedGaussian
from rl2edge.train.core.offpolicy_config import SACConfig
from rl2edge.train.tf_backend.offpolicy_base import TFOffPolicyBase

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


class TFSAC(TFOffPolicyBase):
    stat_names = ("actor_loss", "critic_loss", "ent_coef", "ent_coef_loss")
    policy_distribution = True  # its actor's squashed Gaussian

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """What export's graph is built from: the mean's Dense chain and the log std's head on the latent,
        the networks built from the checkpoint's network spec and loaded by `load(model)`."""
        from rl2edge.train.tf_backend.nets import DeployParts, SACNets, dense_layers, encoder_fn_of

        nets = SACNets(spec)
        load(nets)
        latent = dense_layers(nets.latent)
        return DeployParts(
            latent + dense_layers(nets.mu),
            log_std_dense=dense_layers(nets.log_std)[0],
            latent_depth=len(latent),
            log_std_bounds=(nets.log_std_min, nets.log_std_max),
            encoder_fn=encoder_fn_of(nets.latent),
        )

    def __init__(self, network: NetworkSpec, cfg: SACConfig, seed: int, device: str):
        super().__init__(seed, device)
        from rl2edge.train.tf_backend.nets import SACNets

        tf = self.tf
        self.cfg, self.act_dim = cfg, int(network.act_dim)
        self.nets = SACNets(network, seed, cfg.ent_coef_init())
        self.actor_vars = self.nets.actor_variables
        self.critic_vars = self.nets.critic_variables
        self.critic_target_vars = self.nets.critic_target_variables
        lr = cfg.learning_rate(1.0)
        self.actor_opt = self.adam(self.actor_vars, lr)
        self.critic_opt = self.adam(self.critic_vars, lr)
        self.learn_alpha = cfg.learns_ent_coef()
        # The temperature's optimizer owns log-alpha alone (tests check that it moves nothing else).
        self.alpha_opt = self.adam([self.nets.log_alpha], lr) if self.learn_alpha else None
        self.target_entropy = float(cfg.entropy_target(self.act_dim))
        self.n_updates = tf.Variable(0, dtype=tf.int64, trainable=False, name="n_updates")
        sample = SquashedGaussian(seed, network.required("log_std_min"), network.required("log_std_max"))
        if network.encoder is None:  # image keys: the graph explores (no numpy copy of a Nature-CNN)
            self.explorer = self.numpy_explorer(network.activation, self.actor_vars, sample)
        self.compile(int(network.obs_dim), self.act_dim, discrete=False)

    def parts(self) -> dict[str, list[Any]]:
        return {
            "actor": self.actor_vars,
            "critic": self.critic_vars,
            "critic_target": self.critic_target_vars,
        }

    def deterministic_graph(self, obs: Any) -> Any:
        return self.tf.tanh(self.nets.mean(obs))

    def explore_graph(self, obs: Any) -> Any:
        return self.nets.sample(obs, self.rng.normal([self.tf.shape(obs)[0], self.act_dim]))[0]

    def alpha_step(self, logp: Any) -> Any:
        """One temperature step; the policy enters only through the log-probs, as constants."""
        tf = self.tf
        log_alpha = self.nets.log_alpha
        with tf.GradientTape() as tape:
            loss = -tf.reduce_mean(log_alpha * tf.stop_gradient(logp + self.target_entropy))
        assert self.alpha_opt is not None  # a learned temperature's
        self.alpha_opt.apply_gradients([(tape.gradient(loss, log_alpha), log_alpha)])
        return loss

    def train_step_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        from rl2edge.train.tf_backend.nets import polyak_update

        tf, nets, cfg = self.tf, self.nets, self.cfg
        eps = self.rng.normal(tf.shape(actions))
        alpha = tf.exp(tf.identity(nets.log_alpha))  # the temperature before this step's update, as SB3
        _, logp = nets.sample(obs, eps)
        alpha_loss = self.alpha_step(logp) if self.learn_alpha else tf.constant(0.0)

        next_a, next_logp = nets.sample(next_obs, self.rng.normal(tf.shape(actions)))
        next_q = tf.reduce_min(tf.stack(nets.q_target(next_obs, next_a)), axis=0)
        target_q = tf.stop_gradient(rewards + (1.0 - dones) * cfg.gamma * (next_q - alpha * next_logp))
        with tf.GradientTape() as tape:
            qs = nets.q(obs, actions)
            critic_loss = 0.5 * tf.add_n([tf.reduce_mean(tf.square(q - target_q)) for q in qs])
        self.critic_opt.apply_gradients(
            zip(tape.gradient(critic_loss, self.critic_vars), self.critic_vars, strict=True)
        )

        with tf.GradientTape() as tape:
            pi, logp = nets.sample(obs, eps)  # the same draw as the temperature's step
            q_pi = tf.reduce_min(tf.stack(nets.q(obs, pi)), axis=0)
            actor_loss = tf.reduce_mean(alpha * logp - q_pi)
        self.actor_opt.apply_gradients(
            zip(tape.gradient(actor_loss, self.actor_vars), self.actor_vars, strict=True)
        )

        self.n_updates.assign_add(1)
        if cfg.target_update_interval == 1:
            polyak_update(self.critic_vars, self.critic_target_vars, cfg.tau)
        else:

            def soft_update() -> Any:
                polyak_update(self.critic_vars, self.critic_target_vars, cfg.tau)
                return tf.constant(True)

            tf.cond(self.n_updates % cfg.target_update_interval == 0, soft_update, lambda: tf.constant(False))
        return tf.stack([actor_loss, critic_loss, alpha, alpha_loss])
