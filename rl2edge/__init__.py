"""rl2edge: train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.

This package is the leaf that every other package may import: the CLI, the error tree and small file
helpers. It imports nothing heavy (no numpy at import time, no torch, no tensorflow).
"""

__version__ = "0.1.0"
