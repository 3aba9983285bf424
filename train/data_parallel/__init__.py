"""A data-parallel on-policy learner on torch.distributed: one process per GPU (or per CPU share), as
torchrun starts them, on one node or several (`rl2edge train --nproc N` starts them itself on one).

How a job of N processes gives the update one process would give over the same global batch:
- the config's n_envs are the job's: process r steps its share of them (train.core.rollout_collector
  with env indices, seeds and sampling noise keyed by env, as the Ray rollout workers do), so `--steps`
  stays the total env steps of the job;
- each rollout is gathered, in env order, onto every process (group.Replicas.gather): every process
  computes the same GAE, the same normalization statistics (global: they travel in the checkpoint) and the
  same minibatch order (one seed);
- each minibatch is split over the processes (sharding.shard): each computes the gradient of its share,
  and the shares' gradients are averaged, weighted by their sizes, with one all-reduce before the clip and
  the optimizer step: the global minibatch's gradient, so the advantage normalization is the global
  minibatch's too;
- the weights start from rank 0's (a broadcast) and stay equal: every process applies the same averaged
  gradient.
Rank 0 evaluates, logs and writes the checkpoint; a stop request on any rank stops all at the same update.
"""
