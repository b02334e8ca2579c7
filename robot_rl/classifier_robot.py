"""`ClassifierRobot`: a `Robot` whose reward and success are a saved success classifier's verdict on its frames.

`robot-rl serve-robot reward_classifier=<dir>` wraps its driver with this, so that every client (teleop, deploy,
hil-train, a `RobotEnv`) sees the learned reward without knowing about it: the robot-side alternative to
`hil-train reward_classifier=<dir>`, which judges the frames on the client side instead. Same rule as the simulated
envs' `ClassifierReward` (`robot_rl.classifier_reward.SuccessStreak`): reward 1.0 and success once the probability
has been >= threshold for `consecutive` commanded steps in a row of the episode; the first observation of an
episode is not judged (reward 0, no success), as in the envs. Ticks without a command (holds, watchdog, e-stop)
neither count in nor break the streak; their observations repeat the last verdict. Ending the episode on success
is the client's part (`Session` ends it as it does for a driver's own success).

It runs INSIDE the control tick: the server calls `command` and then `observe` from its control thread, and the
classifier's forward pass on the new frames happens in `observe` before the reply is sent, so its cost adds to
every commanded tick (watch the server's jitter and overrun counters; a classifier too slow for the control rate
shows up there). The driver's own reward and success are replaced; they stay visible as `driver_reward` and
`driver_success` for local logging.

Lives in `robot_rl/`, not `real/`: the classifier needs the networks (`robot_rl.policies`), which `real/` must not
import; this module imports torch only through `LearnedReward`.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from robot_rl.classifier_reward import LearnedReward
from robot_rl.real.robot import Robot, RobotObservation

__all__ = ["ClassifierRobot"]


class ClassifierRobot(Robot):
    """`robot` with `reward`'s verdict as the reward and success of each observation (module docstring).

    Raises ClassifierError (one line) when the robot does not serve the classifier's cameras at their sizes or has
    another state size than the classifier reads.
    """

    def __init__(self, robot: Robot, reward: LearnedReward) -> None:
        reward.check_robot(robot.spec.state_dim, {c.group: c.shape for c in robot.spec.cameras},
                           f"reward_classifier={reward.path} on {robot.spec.name}")
        self.robot, self.reward, self.spec = robot, reward, robot.spec
        self._judge = False  # the next observe() follows a command: judge its frames
        self._verdict = (0.0, False)
        self.driver_reward, self.driver_success = 0.0, False

    def connect(self) -> None:
        self.robot.connect()

    def disconnect(self) -> None:
        self.robot.disconnect()

    def reset(self, seed: int | None = None) -> RobotObservation:
        obs = self.robot.reset(seed)
        self.reward.reset()
        self._judge, self._verdict = False, (0.0, False)
        return self._relabel(obs)

    def observe(self) -> RobotObservation:
        obs = self.robot.observe()
        if self._judge:
            self._judge = False
            self._verdict = self.reward(obs.as_dict())
        return self._relabel(obs)

    def command(self, action: np.ndarray) -> None:
        self.robot.command(action)
        self._judge = True

    def hold(self) -> None:
        self.robot.hold()

    def stop(self) -> None:
        self.robot.stop()

    def reset_position(self, seed: int | None = None) -> np.ndarray | None:
        return self.robot.reset_position(seed)

    def _relabel(self, obs: RobotObservation) -> RobotObservation:
        """A copy of `obs` with the classifier's verdict; the driver's is kept on this object."""
        self.driver_reward, self.driver_success = float(obs.reward), bool(obs.success)
        reward, success = self._verdict
        return dataclasses.replace(obs, reward=reward, success=success)
