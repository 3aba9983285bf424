"""The TensorFlow 2 backend (Keras 3 layers, tf.GradientTape, tf.function with fixed input signatures): one
agent module per algorithm over shared nets and weight files. Its modules import tensorflow; the package
itself imports nothing."""
