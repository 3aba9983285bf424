"""rl2edge: train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.

Installed, the repository's cli/, train/, export/, runtime/ and plc_bridge/ are its subpackages. Its own
modules are the leaves every subpackage may import (errors, fileio, specs, interrupts, tables, bounded,
ports, native_output); the command on top of everything is rl2edge.cli.
Importing the package loads nothing (no numpy, no torch, no tensorflow).
"""

__version__ = "0.1.0"
