"""Stable-Baselines3, the peer every benchmark compares against (installed by the `bench` extra only)."""

from __future__ import annotations

import time
from typing import Any

import gymnasium as gym
import numpy as np
from stable_baselines3 import SAC
from stable_baselines3.common.callbacks import BaseCallback
from stable_baselines3.common.evaluation import evaluate_policy
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.monitor import Monitor
from stable_baselines3.common.vec_env import DummyVecEnv

# SB3's SAC defaults (stable_baselines3/sac/sac.py, v2.x), written out so the benchmark states what it ran and
# robot_rl's side can be set to the same values key by key (bench/throughput.py).
SB3_SAC_DEFAULTS: dict[str, Any] = {
    "learning_rate": 3e-4,
    "buffer_size": 1_000_000,
    "learning_starts": 100,
    "batch_size": 256,
    "tau": 0.005,
    "gamma": 0.99,
    "train_freq": 1,
    "gradient_steps": 1,
    "ent_coef": "auto",  # learned, initial value 1.0
    "target_entropy": "auto",  # -|A|
    "policy_kwargs": {"net_arch": [256, 256], "n_critics": 2},
}


def make_sac(env_id: str, seed: int, device: str, **overrides: Any) -> SAC:
    """SB3 SAC with its defaults (asserted explicitly) plus `overrides` (e.g. rl-zoo's hyperparameters)."""
    kwargs = {**SB3_SAC_DEFAULTS, **overrides}
    return SAC("MlpPolicy", gym.make(env_id), seed=seed, device=device, verbose=0, **kwargs)


class Probe(BaseCallback):
    """Clocks an SB3 `learn()` like bench.common.timed_trainer clocks ours: the time at which learning starts,
    evaluations every `eval_every` steps timed apart from training, and a stop at a threshold or budget."""

    def __init__(self, learning_starts: int, env_id: str | None = None, eval_every: int = 0, episodes: int = 0,
                 eval_seed: int = 0, threshold: float | None = None, max_train_s: float | None = None) -> None:
        super().__init__()
        self.learning_starts, self.eval_every, self.episodes, self.eval_seed = (
            learning_starts, eval_every, episodes, eval_seed)
        self.threshold, self.max_train_s = threshold, max_train_s
        self.eval_env = DummyVecEnv([lambda: Monitor(gym.make(env_id))]) if env_id and eval_every else None
        self.learning_start_t: float | None = None
        self.excluded_s = 0.0
        self.curve: list[dict[str, float]] = []
        self.reached: dict[str, float] | None = None

    def _on_training_start(self) -> None:
        self.t0 = time.monotonic()

    def _on_step(self) -> bool:
        # Called after each env step and before that step's gradient update (SB3 trains after collecting).
        if self.num_timesteps == self.learning_starts:
            self.learning_start_t = time.monotonic()
        if self.eval_env is None or self.num_timesteps % self.eval_every:
            return True
        t = time.monotonic()
        train_s = t - self.t0 - self.excluded_s
        self.eval_env.seed(self.eval_seed)  # the same initial states at every evaluation, as robot_rl does
        mean, _ = evaluate_policy(self.model, self.eval_env, n_eval_episodes=self.episodes, deterministic=True)
        self.excluded_s += time.monotonic() - t
        point = {"env_step": self.num_timesteps, "return": float(mean), "train_s": round(train_s, 2),
                 "wall_s": round(time.monotonic() - self.t0, 2)}
        self.curve.append(point)
        if self.threshold is not None and mean >= self.threshold:
            self.reached = point
            return False
        return self.max_train_s is None or train_s < self.max_train_s


def fill_random(model: SAC, n: int) -> None:
    """`n` random transitions in the model's replay buffer, for timing `model.train` without collecting."""
    rng = np.random.default_rng(0)
    obs_dim, act_dim = model.observation_space.shape[0], model.action_space.shape[0]
    for _ in range(n):
        model.replay_buffer.add(rng.standard_normal((1, obs_dim)), rng.standard_normal((1, obs_dim)),
                                rng.uniform(-1, 1, (1, act_dim)), rng.standard_normal(1), rng.random(1) < 0.001,
                                [{}])
    # model.train() records its losses through a logger, which learn() would otherwise have set up.
    model.set_logger(Logger(folder=None, output_formats=[]))
