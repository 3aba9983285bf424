"""Framework-neutral core shared by every backend: envs, spaces, normalization, rollout storage and
GAE, presets, checkpoint metadata, metrics and evaluation. Imports numpy and gymnasium only."""
