"""PyTorch's RMSprop in TensorFlow, for A2C's parity across backends.

torch.optim.RMSprop (SB3's A2C optimizer): v <- alpha v + (1 - alpha) g^2; p <- p - lr g / (sqrt(v) + eps).
Keras's RMSprop puts eps inside the square root, lr g / sqrt(v + eps) (TF1's form, which SB3 offers as
RMSpropTFLike): with eps 1e-5 the two differ most on the first steps, where v is small, so the same
hyperparameters would train differently in the two backends. This is the torch formula, op for op.
"""

from __future__ import annotations

from typing import Any

import tensorflow as tf


class TorchRMSprop:
    def __init__(self, variables: list[tf.Variable], learning_rate: float, alpha: float, eps: float):
        self.alpha, self.eps = float(alpha), float(eps)
        self.learning_rate = tf.Variable(learning_rate, dtype=tf.float32, trainable=False, name="lr")
        self.square_avgs = [
            tf.Variable(tf.zeros(v.shape, tf.float32), trainable=False, name=f"square_avg_{i}")
            for i, v in enumerate(variables)
        ]
        self._ids = [id(v) for v in variables]  # Keras 3 variables have no .ref()

    @property
    def variables(self) -> list[tf.Variable]:
        return [self.learning_rate, *self.square_avgs]

    def apply_gradients(self, grads_and_vars: Any) -> None:
        """Graph or eager; the variables in the order given at construction (checked at trace time)."""
        pairs = list(grads_and_vars)
        if [id(v) for _, v in pairs] != self._ids:
            raise ValueError("TorchRMSprop.apply_gradients: variables differ from those it was built for")
        for (grad, var), avg in zip(pairs, self.square_avgs, strict=True):
            avg.assign(self.alpha * avg + (1.0 - self.alpha) * tf.square(grad))
            var.assign_sub(self.learning_rate * grad / (tf.sqrt(avg) + self.eps))
