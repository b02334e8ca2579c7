"""``SimArm``: the MuJoCo tabletop arm of ``robot_rl.envs.arm`` behind the ``Robot`` interface.

It stands in for a physical arm everywhere a real one would be: ``robot-rl serve-robot driver=sim_arm`` serves it
with the same server, safety filter and watchdog, and the learner talks to it over the network. Time advances only
when the server ticks it, once per control period, so on the server it runs in real time. The task (``reach``,
``push``, ``pick_place``) supplies the reward and success a real cell would get from a classifier or the operator.

Like a real servoed arm, the simulated one does not follow commands exactly: the env's desired grip position may
lead the hand by up to 5 cm and the servos overshoot, which is what the server's supervisor watches (measured
state). Three things make it behave as the server needs a robot to:

* ``stop()`` freezes the servo targets (desired grip position and joint targets) on the measured pose, so the hand
  decelerates where it is instead of travelling on to a target that leads it; it does not advance time;
* ``reset_position(seed)`` previews where ``reset(seed)`` will put the hand (the same draw from a copy of the env's
  random stream), so that the server can drive the hand there at the speed limit before the scene is reset;
* observation stamps are on the simulated clock (time at ``connect`` plus simulated seconds), so measured speeds
  are true simulated speeds even when the host stalls the control loop.
"""

from __future__ import annotations

import time

import numpy as np
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import (
    CONTROL_DT,
    STATE_DIM,
    STATE_LAYOUT,
    TIME_LIMITS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)

from ..robot import CartesianLimits, Robot, RobotObservation, RobotSpec


class SimArm(Robot):
    """The simulated arm.

    Args:
        task: ``reach``, ``push`` or ``pick_place``.
        reward: ``dense`` or ``sparse`` (see ``robot_rl.envs.arm.tasks``).
        control_hz: control rate (20 Hz is the tasks' own; 50 Hz for the latency bench). A given action is the same
            hand speed at any rate.
        max_speed_mps: hand speed limit enforced by the server's safety filter.
        seed: seeds the first episode; later resets continue the env's random stream unless given a seed.
    """

    def __init__(
        self,
        task: str = "reach",
        reward: str = "dense",
        control_hz: float = 1.0 / CONTROL_DT,
        max_speed_mps: float = 1.0,
        seed: int | None = 0,
    ) -> None:
        self.env = ArmEnv(task, reward, control_hz=control_hz)
        self.task, self._seed = task, seed
        d = self.env.max_delta
        self.spec = RobotSpec(
            name=f"sim_arm:{task}" + ("-sparse" if reward == "sparse" else ""),
            state_dim=STATE_DIM,
            action_dim=4,
            control_hz=control_hz,
            action_low=(-1.0,) * 4,
            action_high=(1.0,) * 4,
            cartesian=CartesianLimits(
                workspace_low=tuple(WORKSPACE_LOW.tolist()),
                workspace_high=tuple(WORKSPACE_HIGH.tolist()),
                metres_per_unit=d,
                # A full diagonal action is allowed; the speed limit is the binding one.
                max_step_m=float(np.sqrt(3.0) * d) * (1 + 1e-9),
                max_speed_mps=max_speed_mps,
            ),
            time_limit=int(round(TIME_LIMITS[task] * control_hz * CONTROL_DT)),
            state_layout={k: (s.start, s.stop) for k, s in STATE_LAYOUT.items()},
        )
        self._obs: RobotObservation | None = None
        self._gripper = -1.0
        self._clock0 = time.monotonic()
        self._sim_s = 0.0  # simulated seconds since connect (reset does not rewind it)

    def connect(self) -> None:
        self._clock0, self._sim_s = time.monotonic(), 0.0
        self.reset(self._seed)

    def disconnect(self) -> None:
        self.env.close()

    def _stamp(self) -> float:
        return self._clock0 + self._sim_s

    def reset(self, seed: int | None = None) -> RobotObservation:
        state, info = self.env.reset(seed=seed)
        self._gripper = -1.0
        self._obs = RobotObservation(state, 0.0, bool(info["success"]), self._stamp())
        return self._obs

    def reset_position(self, seed: int | None = None) -> np.ndarray:
        """The grip position ``reset(seed)`` will start from; this env's random stream is untouched."""
        return self.env.reset_position(seed)

    def stop(self) -> None:
        """Freeze the servo targets on the measured pose (see the module docstring); time does not advance."""
        self.env.hold()

    def observe(self) -> RobotObservation:
        if self._obs is None:
            return self.reset(self._seed)
        return self._obs

    def command(self, action: np.ndarray) -> None:
        self._gripper = float(action[3])
        self._advance(action)

    def hold(self) -> None:
        # Time goes on while the arm holds: the servos keep the last target and the gripper its last command.
        self._advance(np.array([0.0, 0.0, 0.0, self._gripper]))

    def _advance(self, action: np.ndarray) -> None:
        state, reward, _, _, info = self.env.step(action)
        self._sim_s += self.env.control_dt
        self._obs = RobotObservation(state, float(reward), bool(info["success"]), self._stamp())
