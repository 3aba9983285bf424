"""DQN (double DQN by default) in TensorFlow, the twin of train.torch_backend.dqn."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from rl2edge.train.core.dqn_hooks import DQNHooks
from rl2edge.train.core.network_spec import NetworkSpec
from rl2edge.train.core.offpolicy_config import DQNConfig
from rl2edge.train.tf_backend.offpolicy_base import TFOffPolicyBase

if TYPE_CHECKING:
    from rl2edge.train.tf_backend.nets import DeployParts


class TFDQN(DQNHooks, TFOffPolicyBase):
    stat_names = ("loss", "q_mean")

    @classmethod
    def deploy_parts(cls, spec: NetworkSpec, load: Callable[[Any], None]) -> DeployParts:
        """What export's graph is built from: the Q-network's Dense chain, the networks built from the
        checkpoint's network spec and loaded by `load(model)`."""
        from rl2edge.train.tf_backend.nets import DeployParts, DQNNets, dense_layers, encoder_fn_of

        nets = DQNNets(spec)
        load(nets)
        return DeployParts(dense_layers(nets.q_net), encoder_fn=encoder_fn_of(nets.q_net))

    def __init__(self, network: NetworkSpec, cfg: DQNConfig, seed: int, device: str):
        super().__init__(seed, device)
        self.cfg = cfg
        self.n_actions = int(network.act_dim)
        self.nets = self.make_nets(network, seed)
        self.q_vars = self.nets.q_net.trainable_variables
        self.q_target_vars = self.nets.q_target.trainable_variables
        self.opt = self.adam(self.q_vars, cfg.learning_rate(1.0))
        self.compile(int(network.obs_dim), int(network.act_dim), discrete=True)

    def make_nets(self, network: NetworkSpec, seed: int) -> Any:
        from rl2edge.train.tf_backend.nets import DQNNets

        return DQNNets(network, seed)

    def parts(self) -> dict[str, list[Any]]:
        return {"q": self.q_vars, "q_target": self.q_target_vars}

    def deterministic_graph(self, obs: Any) -> Any:
        return self.tf.argmax(self.nets.q_net(obs), axis=-1)

    def update_target_graph(self) -> Any:
        from rl2edge.train.tf_backend.nets import polyak_update

        polyak_update(self.q_vars, self.q_target_vars, self.cfg.tau)
        return self.tf.constant(0)

    def train_step_graph(self, obs: Any, actions: Any, rewards: Any, next_obs: Any, dones: Any) -> Any:
        tf, nets, cfg = self.tf, self.nets, self.cfg
        next_q_all = nets.q_target(next_obs)
        if cfg.double_q:  # the online net picks, the target net values
            next_a = tf.argmax(nets.q_net(next_obs), axis=-1)
            next_q = tf.gather(next_q_all, next_a, batch_dims=1)
        else:
            next_q = tf.reduce_max(next_q_all, axis=-1)
        target_q = tf.stop_gradient(rewards + (1.0 - dones) * cfg.gamma * next_q)
        with tf.GradientTape() as tape:
            q = tf.gather(nets.q_net(obs), actions, batch_dims=1)
            loss = tf.reduce_mean(tf.keras.losses.huber(target_q[:, None], q[:, None]))
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, self.q_vars), cfg.max_grad_norm)
        self.opt.apply_gradients(zip(grads, self.q_vars, strict=True))
        return tf.stack([loss, tf.reduce_mean(q)])
