"""Expected SARSA in TensorFlow: DQN's agent with the expected target (testkit.toy_algorithm)."""

from __future__ import annotations

from rl2edge.train.tf_backend.dqn import TFDQN


class TFExpectedSarsa(TFDQN):
    def train_step_graph(self, obs, actions, rewards, next_obs, dones):
        tf, nets, cfg = self.tf, self.nets, self.cfg
        w_max, w_mean = cfg.target_weights()
        next_q_all = nets.q_target(next_obs)
        next_q = w_max * tf.reduce_max(next_q_all, axis=-1) + w_mean * tf.reduce_mean(next_q_all, axis=-1)
        target_q = tf.stop_gradient(rewards + (1.0 - dones) * cfg.gamma * next_q)
        with tf.GradientTape() as tape:
            q = tf.gather(nets.q_net(obs), actions, batch_dims=1)
            loss = tf.reduce_mean(tf.keras.losses.huber(target_q[:, None], q[:, None]))
        grads, _ = tf.clip_by_global_norm(tape.gradient(loss, self.q_vars), cfg.max_grad_norm)
        self.opt.apply_gradients(zip(grads, self.q_vars, strict=True))
        return tf.stack([loss, tf.reduce_mean(q)])
