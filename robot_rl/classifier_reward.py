"""`ClassifierReward`: a batched env whose reward and success come from a saved success classifier.

HIL-SERL's learned reward: after each step the classifier (`robot_rl.classifier`) looks at the observation the
action led to (`info["final_obs"]`, which is the true last observation where an episode ended) and the reward
becomes 1.0 when its probability has been >= `threshold` for `consecutive` steps in a row of this episode, else
0.0; `info["success"]` is that flag. With `terminate` the episode ends there (`terminated=True`): a sub-env that
did not end by itself is reset on the spot (`SyncBatchedEnv.reset_envs`), as autoreset would have.
The env's own success flag, where it has one, is kept as `info["env_success"]` and the probability as
`info["classifier_prob"]`. The env's own terminations and time limits still apply (a simulated task that
terminates at its own success therefore still ends there; its reward is the classifier's verdict on that frame).

`robot-rl train env.reward_classifier=<dir>` wraps its training envs with this (`robot_rl.trainer.make_env`);
evaluation envs keep the task's own reward and success, so evaluations measure what the learned reward led to.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from robot_rl.classifier import ClassifierError, load_classifier
from robot_rl.envs.core import BackendStep, BatchedEnv, Obs

__all__ = ["ClassifierReward"]


class ClassifierReward(BatchedEnv):
    """`env` with the classifier in `classifier_dir` as its reward (module docstring).

    Raises ClassifierError when the directory is missing or not a classifier, or when the classifier's cameras
    (or state size) are not the env's; ValueError for a bad threshold or count, or for `terminate=True` on an env
    whose sub-envs cannot be reset one at a time.
    """

    def __init__(
        self,
        env: BatchedEnv,
        classifier_dir: str | os.PathLike[str],
        threshold: float = 0.5,
        consecutive: int = 1,
        terminate: bool = True,
    ) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"threshold must be in (0, 1], got {threshold}")
        if consecutive < 1:
            raise ValueError(f"consecutive must be >= 1, got {consecutive}")
        if terminate and not hasattr(env, "reset_envs"):
            raise ValueError(f"{env.spec}: ending episodes on the classifier's success needs sub-envs that reset one "
                             f"at a time (gym:, dmc:, arm: specs); use terminate=False")
        self.classifier = load_classifier(classifier_dir, device=env.device)
        self.classifier.check_observation_spec(env.observation_spec, f"{classifier_dir} on {env.spec}")
        self.env, self.threshold, self.consecutive, self.terminate = env, float(threshold), int(consecutive), terminate
        self.num_envs, self.device, self.spec = env.num_envs, env.device, env.spec
        self.observation_spec, self.action_dim = env.observation_spec, env.action_dim
        self.max_episode_steps, self.control_dt = env.max_episode_steps, env.control_dt
        self.single_observation_space, self.single_action_space = env.single_observation_space, env.single_action_space
        self._streak = torch.zeros(env.num_envs, dtype=torch.int64, device=env.device)

    def _reset(self, seed: int | None) -> Obs:
        self._streak.zero_()
        return self.env.reset(seed=seed)

    def _step(self, action: torch.Tensor) -> BackendStep:
        obs, _, terminated, truncated, info = self.env.step(action)
        final = info["final_obs"]
        prob = self.classifier.probability(final).to(self.device)
        self._streak = torch.where(prob >= self.threshold, self._streak + 1, 0)
        success = self._streak >= self.consecutive
        if self.terminate:
            extra = success & ~(terminated | truncated)  # ended by the classifier alone
            terminated = terminated | success
            truncated = truncated & ~terminated
            if bool(extra.any()):
                fresh = self.env.reset_envs(extra)  # type: ignore[attr-defined]
                obs = {k: v.clone() for k, v in obs.items()}
                for k, v in fresh.items():
                    obs[k][extra] = v.to(obs[k].device)
        self._streak = self._streak.masked_fill(terminated | truncated, 0)
        out: dict[str, Any] = {
            k: v for k, v in info.items() if k not in ("final_obs", "episode_return", "episode_length")
        }
        if "success" in info:
            out["env_success"] = info["success"]
        out.update(success=success, classifier_prob=prob)
        return BackendStep(obs, success.to(torch.float32), terminated, truncated, final, out)

    def render(self, index: int = 0) -> np.ndarray:
        return self.env.render(index)

    def close(self) -> None:
        self._closed = True
        self.env.close()


def wrap_if_configured(env: BatchedEnv, classifier_dir: str | None, threshold: float, consecutive: int) -> BatchedEnv:
    """`env` with `ClassifierReward` when `classifier_dir` is set (the `env.reward_classifier*` keys of
    `robot-rl train`); a bad directory closes the env and raises ClassifierError naming the key."""
    if not classifier_dir:
        return env
    try:
        return ClassifierReward(env, classifier_dir, threshold, consecutive)
    except (ClassifierError, ValueError) as e:
        env.close()
        raise ClassifierError(f"env.reward_classifier: {e}") from None
