"""PyTorch backend. Importing this package imports torch."""
