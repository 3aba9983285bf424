"""TensorFlow 2 backend (Keras 3 layers, tf.GradientTape, tf.function with fixed input signatures).
Importing this package imports tensorflow."""
