"""`ClassifierReward`: a batched env whose reward and success come from a saved success classifier.

HIL-SERL's learned reward: after each step the classifier (`robot_rl.classifier`) looks at the observation the
action led to (`info["final_obs"]`, which is the true last observation where an episode ended) and the reward
becomes 1.0 when its probability has been >= `threshold` for `consecutive` steps in a row of this episode, else
0.0; `info["success"]` is that flag. With `terminate` the episode ends there (`terminated=True`): a sub-env that
did not end by itself is reset on the spot (`SyncBatchedEnv.reset_envs`), as autoreset would have.
The env's own success flag, where it has one, is kept as `info["env_success"]` and the probability as
`info["classifier_prob"]`. The env's own terminations and time limits still apply: a simulated task that
terminates at its own success still ends there, with the classifier's verdict on that frame as its reward, unless
the arm task was made with `end_on_success=False` (`robot-rl train env.end_on_task_success=false`), which leaves
the classifier and the time limit as the only ends of an episode, as on a robot.

`robot-rl train env.reward_classifier=<dir>` wraps its training envs with this (`robot_rl.trainer.make_env`);
evaluation envs keep the task's own reward and success, so evaluations measure what the learned reward led to.
On a state task (`arm:<task>` without `-pixels`) the training envs render the classifier's cameras for it
(`classifier_view`: the `-pixels` variant at the classifier's frame size, with the full state) and `hide_frames`
passes on only the state: the learner is the state task's, and only its reward comes from the frames. That
measures a classifier as a reward apart from learning from pixels (the issue's "RLPD on the classifier's reward
against RLPD on the true reward").

The rule itself (threshold, steps in a row, reset at each episode start) lives in `SuccessStreak` only, so that the
simulated envs and the robot commands cannot drift apart: `ClassifierReward` runs it batched, `LearnedReward` on
one robot's observations (`robot-rl hil-train reward_classifier=<dir>` on the client side, and
`robot_rl.classifier_robot.ClassifierRobot` behind `robot-rl serve-robot reward_classifier=<dir>`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from robot_rl.classifier import ClassifierError, load_classifier, read_classifier_config
from robot_rl.envs.core import BackendStep, BatchedEnv, Obs, Reflection

__all__ = ["ClassifierReward", "LearnedReward", "SuccessStreak", "check_streak_settings", "classifier_view"]


def check_streak_settings(threshold: float, consecutive: int) -> None:
    """ValueError unless 0 < threshold <= 1 and consecutive >= 1 (a probability of exactly 1.0 can pass a
    threshold of 1.0; a threshold of 0 would call every frame a success)."""
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    if consecutive < 1:
        raise ValueError(f"consecutive must be >= 1, got {consecutive}")


class SuccessStreak:
    """The one success rule of the learned reward: a step is a success (reward 1.0) when the classifier's
    probability has been >= `threshold` on this step and the `consecutive - 1` steps before it, all within the
    current episode. One counter per env (`num_envs`); `reset` clears them at episode starts, so a streak never
    carries over from one episode into the next. Requiring several steps in a row filters single-frame false
    positives, which would otherwise end an episode (HIL-SERL's actor-side wrapper uses the same idea)."""

    def __init__(self, threshold: float = 0.5, consecutive: int = 1, num_envs: int = 1,
                 device: str | torch.device = "cpu") -> None:
        check_streak_settings(threshold, consecutive)
        self.threshold, self.consecutive = float(threshold), int(consecutive)
        self.count = torch.zeros(num_envs, dtype=torch.int64, device=device)

    def update(self, prob: torch.Tensor) -> torch.Tensor:
        """Count the step whose success probabilities are `prob` [num_envs]; bool [num_envs]: success now."""
        self.count = torch.where(prob.to(self.count.device) >= self.threshold, self.count + 1, 0)
        return self.count >= self.consecutive

    def reset(self, mask: torch.Tensor | None = None) -> None:
        """Start a new episode in every env, or only where `mask` [num_envs] is true."""
        self.count = self.count.masked_fill(mask, 0) if mask is not None else torch.zeros_like(self.count)


class ClassifierReward(BatchedEnv):
    """`env` with the classifier in `classifier_dir` as its reward (module docstring).

    Raises ClassifierError when the directory is missing or not a classifier, or when the classifier's cameras
    (or state size) are not the env's; ValueError for a bad threshold or count, or for `terminate=True` on an env
    whose sub-envs cannot be reset one at a time. With `hide_frames` the observations passed on (and the
    `observation_spec`) hold only `state`: the frames were rendered for the classifier alone.
    """

    def __init__(
        self,
        env: BatchedEnv,
        classifier_dir: str | os.PathLike[str],
        threshold: float = 0.5,
        consecutive: int = 1,
        terminate: bool = True,
        hide_frames: bool = False,
    ) -> None:
        check_streak_settings(threshold, consecutive)
        if terminate and not hasattr(env, "reset_envs"):
            raise ValueError(f"{env.spec}: ending episodes on the classifier's success needs sub-envs that reset one "
                             f"at a time (gym:, dmc:, arm: specs); use terminate=False")
        self.classifier = load_classifier(classifier_dir, device=env.device)
        self.classifier.check_observation_spec(env.observation_spec, f"{classifier_dir} on {env.spec}")
        self.env, self.threshold, self.consecutive, self.terminate = env, float(threshold), int(consecutive), terminate
        self.num_envs, self.device, self.spec = env.num_envs, env.device, env.spec
        self._shown = ("state",) if hide_frames else tuple(env.observation_spec)
        self.observation_spec = {k: env.observation_spec[k] for k in self._shown}
        self.action_dim = env.action_dim
        self.max_episode_steps, self.control_dt = env.max_episode_steps, env.control_dt
        self.can_terminate = terminate or env.can_terminate  # the classifier's success ends episodes too
        space = env.single_observation_space
        if hide_frames and isinstance(space, gym.spaces.Dict):
            space = space["state"]  # what a state task's sub-env observes
        self.single_observation_space, self.single_action_space = space, env.single_action_space
        self._streak = SuccessStreak(threshold, consecutive, env.num_envs, env.device)

    def _reset(self, seed: int | None) -> Obs:
        self._streak.reset()
        return self._show(self.env.reset(seed=seed))

    def _show(self, obs: Obs) -> Obs:
        return obs if len(self._shown) == len(obs) else {k: obs[k] for k in self._shown}

    def _step(self, action: torch.Tensor) -> BackendStep:
        obs, _, terminated, truncated, info = self.env.step(action)
        final = info["final_obs"]
        prob = self.classifier.probability(final).to(self.device)
        success = self._streak.update(prob)
        if self.terminate:
            extra = success & ~(terminated | truncated)  # ended by the classifier alone
            terminated = terminated | success
            truncated = truncated & ~terminated
            if bool(extra.any()):
                fresh = self.env.reset_envs(extra)  # type: ignore[attr-defined]
                obs = {k: v.clone() for k, v in obs.items()}
                for k, v in fresh.items():
                    obs[k][extra] = v.to(obs[k].device)
        self._streak.reset(terminated | truncated)
        out: dict[str, Any] = {
            k: v for k, v in info.items() if k not in ("final_obs", "episode_return", "episode_length")
        }
        if "success" in info:
            out["env_success"] = info["success"]
        out.update(success=success, classifier_prob=prob)
        return BackendStep(self._show(obs), success.to(torch.float32), terminated, truncated, self._show(final), out)

    def reflection(self) -> Reflection | None:
        """The env's symmetry (a reward judged on a frame is the mirror image's reward too), without the cameras
        `hide_frames` hides."""
        signs = self.env.reflection()
        if signs is None or len(self._shown) == len(self.env.observation_spec):
            return signs
        return Reflection(signs.state, signs.action, tuple(c for c in signs.cameras if c in self._shown))

    def render(self, index: int = 0) -> np.ndarray:
        return self.env.render(index)

    def close(self) -> None:
        self._closed = True
        self.env.close()


def classifier_view(spec: str, classifier_dir: str | os.PathLike[str]) -> tuple[str, tuple[int, int]] | None:
    """For a state task whose scene can render (`arm:<task>` without `-pixels`): the spec that renders the
    classifier's cameras and their frame size (module docstring). None for any other spec (its own cameras, if it
    has them, are what the classifier reads), or for a classifier that reads a state (a state task's full state is
    not the proprioception it learned from): `ClassifierReward` then names what is missing. ClassifierError for
    cameras at different sizes."""
    from robot_rl.envs.arm_specs import PREFIX as ARM

    if not spec.startswith(ARM) or spec.endswith("-pixels"):
        return None
    kwargs = read_classifier_config(classifier_dir).get("kwargs", {})
    if kwargs.get("state_dim"):
        return None
    sizes = {tuple(int(v) for v in shape[:2]) for shape in kwargs.get("cameras", {}).values()}
    if len(sizes) != 1:
        raise ClassifierError(f"{classifier_dir}: its cameras have different frame sizes {sorted(sizes)}; the "
                              f"{ARM} tasks render every camera at one size")
    return f"{spec}-pixels", sizes.pop()


def wrap_if_configured(env: BatchedEnv, classifier_dir: str | None, threshold: float, consecutive: int,
                       hide_frames: bool = False) -> BatchedEnv:
    """`env` with `ClassifierReward` when `classifier_dir` is set (the `env.reward_classifier*` keys of
    `robot-rl train`); a bad directory closes the env and raises ClassifierError naming the key."""
    if not classifier_dir:
        return env
    try:
        return ClassifierReward(env, classifier_dir, threshold, consecutive, hide_frames=hide_frames)
    except (ClassifierError, ValueError) as e:
        env.close()
        raise ClassifierError(f"env.reward_classifier: {e}") from None


class LearnedReward:
    """The learned reward of one robot: the classifier in `classifier_dir` judges each observation an action led to
    (numpy frames as `RobotObservation.as_dict()` gives them), through the same `SuccessStreak` rule as
    `ClassifierReward`. Used on the client side by hil-train (the actor judges the frames it receives, as
    HIL-SERL's actor-side reward wrapper does) and on the robot side by `ClassifierRobot`.

    Raises ClassifierError for a missing or damaged directory, ValueError for bad settings.
    """

    def __init__(self, classifier_dir: str | os.PathLike[str], threshold: float = 0.5, consecutive: int = 1,
                 device: str | torch.device = "cpu") -> None:
        check_streak_settings(threshold, consecutive)
        self.path = str(classifier_dir)
        self.classifier = load_classifier(classifier_dir, device=device)
        self.streak = SuccessStreak(threshold, consecutive, 1, self.classifier.device)
        self.keys = [*self.classifier.cameras, *(["state"] if self.classifier.state_dim else [])]
        self.last_prob = 0.0

    def check_robot(self, state_dim: int, cameras: Mapping[str, Sequence[int]], where: str) -> None:
        """ClassifierError (one line starting with `where`) unless the robot serves every camera the classifier
        reads (`cameras`: group -> [H, W, 3]) at its size, and `state_dim` fits a classifier that reads the state."""
        spec: dict[str, tuple[tuple[int, ...], Any]] = {"state": ((int(state_dim),), np.float32)}
        spec.update({k: (tuple(int(v) for v in shape), np.uint8) for k, shape in cameras.items()})
        self.classifier.check_observation_spec(spec, where)

    def reset(self) -> None:
        """A new episode starts: no streak carries over."""
        self.streak.reset()

    def __call__(self, obs: Mapping[str, np.ndarray]) -> tuple[float, bool]:
        """(reward, success) of the observation one action led to; also counts it in the streak. The probability is
        kept as `last_prob`."""
        batch = {k: torch.from_numpy(np.array(obs[k]))[None] for k in self.keys}  # copies: frames may be read-only
        prob = self.classifier.probability(batch)
        success = bool(self.streak.update(prob)[0])
        self.last_prob = float(prob[0])
        return float(success), success
