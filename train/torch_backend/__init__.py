"""The PyTorch backend: one agent module per algorithm over shared nets, optimizer steps and weight files.
Its modules import torch; the package itself imports nothing."""
