"""Training: algorithms in two backends (torch, tf) on one framework-neutral core (`train.core`).

`train` imports neither `export` nor `runtime`. Importing `train` or `train.core` loads no deep-learning
framework; only `train.torch_backend` and `train.tf_backend` do.
The algorithm table (`train.algos`) sits above both: every per-algorithm choice is a row there.
"""
