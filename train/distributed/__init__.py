"""Training beyond one process, on Ray: sweeps (`rl2edge tune`), several seeds at once (`rl2edge train
--seeds`) and PPO/A2C rollouts spread over actors (`--rollout-workers`). Ray is an optional extra
(`pip install 'rl2edge[ray]'`); only these modules import it, and only when such a command runs."""
