"""rl2edge: train RL policies, export them to verified quantized TFLite artifacts, serve them to a PLC.

Installed, the repository's train/, export/, runtime/ and plc_bridge/ are its subpackages. Its own modules
are of two kinds: the leaves every subpackage may import (errors, fileio, specs, interrupts, tables,
bounded) and the top that imports them all (cli and commands/, each subcommand loading its package only
when it runs).
Importing the package loads nothing (no numpy, no torch, no tensorflow).
"""

__version__ = "0.1.0"
