"""A CleanRL-style agent (cleanrl/ppo_continuous_action.py's layout and wrappers, shortened to a few updates)
for the test of the Python export API: its actor is a plain `nn.Sequential`, and its observation
normalization lives in gymnasium's NormalizeObservation wrapper (then clipped to +-10), whose statistics
CleanRL does not save with the weights (CleanRL issues #425, #532): the exporter must be given them."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.distributions.normal import Normal


def layer_init(layer: nn.Linear, std: float = np.sqrt(2), bias_const: float = 0.0) -> nn.Linear:
    torch.nn.init.orthogonal_(layer.weight, std)
    torch.nn.init.constant_(layer.bias, bias_const)
    return layer


class Agent(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int):
        super().__init__()
        self.critic = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, 1), std=1.0),
        )  # fmt: skip
        self.actor_mean = nn.Sequential(
            layer_init(nn.Linear(obs_dim, 64)), nn.Tanh(), layer_init(nn.Linear(64, 64)), nn.Tanh(),
            layer_init(nn.Linear(64, act_dim), std=0.01),
        )  # fmt: skip
        self.actor_logstd = nn.Parameter(torch.zeros(1, act_dim))


def train(
    env_id: str, updates: int, seed: int = 0, num_envs: int = 4, num_steps: int = 256
) -> tuple[Agent, np.ndarray, np.ndarray]:
    """A few PPO updates as CleanRL's script runs them; (the agent, NormalizeObservation's mean and var)."""
    torch.manual_seed(seed)

    def make() -> gym.Env:
        env = gym.make(env_id)
        env = gym.wrappers.ClipAction(env)
        env = gym.wrappers.NormalizeObservation(env)
        env = gym.wrappers.TransformObservation(env, lambda o: np.clip(o, -10, 10), env.observation_space)
        return gym.wrappers.NormalizeReward(env, gamma=0.99)

    envs = gym.vector.SyncVectorEnv([make for _ in range(num_envs)])
    obs_dim, act_dim = envs.single_observation_space.shape[0], envs.single_action_space.shape[0]
    agent = Agent(obs_dim, act_dim)
    optimizer = torch.optim.Adam(agent.parameters(), lr=3e-4, eps=1e-5)
    next_obs = torch.tensor(envs.reset(seed=seed)[0], dtype=torch.float32)
    for _ in range(updates):
        obs_b, act_b, logp_b, rew_b, val_b = [], [], [], [], []
        for _ in range(num_steps):
            with torch.no_grad():
                mean, std = agent.actor_mean(next_obs), agent.actor_logstd.exp()
                dist = Normal(mean, std)
                action = dist.sample()
                obs_b.append(next_obs)
                act_b.append(action)
                logp_b.append(dist.log_prob(action).sum(1))
                val_b.append(agent.critic(next_obs).squeeze(-1))
            next_obs_np, reward, _, _, _ = envs.step(action.numpy())
            rew_b.append(torch.tensor(reward, dtype=torch.float32))
            next_obs = torch.tensor(next_obs_np, dtype=torch.float32)
        returns = torch.zeros(num_steps, num_envs)
        running = agent.critic(next_obs).squeeze(-1).detach()
        for t in reversed(range(num_steps)):
            running = rew_b[t] + 0.99 * running
            returns[t] = running
        obs, acts, old_logp = torch.cat(obs_b), torch.cat(act_b), torch.cat(logp_b)
        values, ret = torch.cat(val_b), returns.reshape(-1)
        adv = ret - values
        adv = (adv - adv.mean()) / (adv.std() + 1e-8)
        for _ in range(4):
            dist = Normal(agent.actor_mean(obs), agent.actor_logstd.exp())
            ratio = (dist.log_prob(acts).sum(1) - old_logp).exp()
            pg = torch.max(-adv * ratio, -adv * ratio.clamp(0.8, 1.2)).mean()
            v_loss = 0.5 * (agent.critic(obs).squeeze(-1) - ret).pow(2).mean()
            optimizer.zero_grad()
            (pg + 0.5 * v_loss).backward()
            nn.utils.clip_grad_norm_(agent.parameters(), 0.5)
            optimizer.step()
    rms = envs.envs[
        0
    ].env.env.obs_rms  # NormalizeObservation's, under TransformObservation and NormalizeReward
    return agent, np.asarray(rms.mean), np.asarray(rms.var)
