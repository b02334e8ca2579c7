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

Cameras. ``pixels=True`` serves the ``front`` and ``wrist`` cameras of ``ArmEnv(pixels=True)`` (``PIXEL_CAMERAS``) at
``pixel_size`` (height, width), rendered by the env's own pixel renderer after every tick, and the state becomes
what the simulated ``<task>-pixels`` tasks observe: proprioception only (``PROPRIO_KEYS``: ``ee_pos``, ``ee_vel``,
``gripper``, 7 numbers), so a pixel policy trained in simulation sees the same observation groups here.
Each observation then also carries the scene's full 29-number state as ``RobotObservation.privileged_state``
(``ArmEnv.privileged_state``), for the simulated operators (scripted, person), who watch the scene as a person
would; learners never receive it. ``full_state=True`` serves the 29-number state as the state itself beside the
frames (a privileged variant). Without ``pixels`` nothing changes: the 29-number state, no frames. An OpenGL context belongs
to the thread that made it current, and the server calls the driver from its control thread after building it in
another one, so with cameras every env call runs on one thread of the driver's own (a hop of a few tens of
microseconds per call). Rendering two 84x84 frames costs about 11 ms per tick on a software renderer (llvmpipe,
the shared 2-core machine), inside the tick: fine at 20 Hz (50 ms), tight at 50 Hz.

Symmetry. ``push`` and ``pick_place`` declare their y -> -y reflection in the spec (``mirror_state_sign`` and
``mirror_action_sign`` for the state served; with cameras ``mirror_cameras``: both, which lie in the mirror plane),
what ``hil-train mirror_demos=true mirror_online=true`` learns from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import (
    CONTROL_DT,
    PIXEL_CAMERAS,
    PROPRIO_DIM,
    PROPRIO_KEYS,
    STATE_DIM,
    STATE_LAYOUT,
    TIME_LIMITS,
    WORKSPACE_HIGH,
    WORKSPACE_LOW,
)

from ..robot import CameraSpec, CartesianLimits, Robot, RobotObservation, RobotSpec

log = logging.getLogger(__name__)


class SimArm(Robot):
    """The simulated arm.

    Args:
        task: ``reach``, ``push``, ``pick_place`` or ``track`` (the target moves: the dynamic task).
        reward: ``dense`` or ``sparse`` (see ``robot_rl.envs.arm.tasks``).
        control_hz: control rate (20 Hz is the tasks' own; 50 Hz for the latency bench). A given action is the same
            hand speed at any rate.
        max_speed_mps: hand speed limit enforced by the server's safety filter.
        seed: seeds the first episode; later resets continue the env's random stream unless given a seed.
        pixels: serve the ``front`` and ``wrist`` cameras; the state is then proprioception only (see the module
            docstring).
        pixel_size: (height, width) of both cameras' frames.
        full_state: with ``pixels``, keep the full 29-number state instead of proprioception.
        practice: autonomous practice (``robot_rl.envs.arm.ArmEnv``'s ``practice``): a reset without a seed keeps the
            cube where it is (the reset motion takes the hand home) and draws a new target; only a stuck scene is put
            back, logged as a human reset and counted in ``human_resets``.
        practice_reset: with ``practice``, ``"expert"`` (a scripted reset controller moves the cube to a fresh start
            first, simulated in the reset) or ``"home"`` (the cube stays); ``ArmEnv``'s ``practice_reset``.
    """

    def __init__(
        self,
        task: str = "reach",
        reward: str = "dense",
        control_hz: float = 1.0 / CONTROL_DT,
        max_speed_mps: float = 1.0,
        seed: int | None = 0,
        pixels: bool = False,
        pixel_size: Sequence[int] = (84, 84),
        full_state: bool = False,
        practice: bool = False,
        practice_reset: str = "expert",
    ) -> None:
        size = tuple(int(v) for v in pixel_size)
        if len(size) != 2:
            raise ValueError(f"pixel_size must be (height, width), got {pixel_size!r}")
        self.pixels, self.full_state = bool(pixels), bool(full_state)
        cameras = tuple(CameraSpec(name, *size) for name in PIXEL_CAMERAS) if self.pixels else ()
        # With cameras, the env lives on one thread of its own: its OpenGL context must only be current there.
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="sim-arm-gl") if self.pixels else None
        try:
            self.env = self._call(ArmEnv, task, reward, control_hz=control_hz, pixels=self.pixels, pixel_size=size,
                                  full_state=self.full_state, practice=practice,
                                  practice_reset=practice_reset)
        except BaseException:
            if self._thread is not None:
                self._thread.shutdown(wait=False)
            raise
        self.task, self._seed = task, seed
        d = self.env.max_delta
        proprio = self.pixels and not self.full_state
        layout = STATE_LAYOUT if not proprio else _proprio_layout()
        # The task's y -> -y symmetry (push, pick_place): the served state's signs (the env's: the full state's also
        # beside the frames) and, with cameras, both of them (they lie in the mirror plane: MIRROR_CAMERAS).
        signs = self.env.reflection()
        self.spec = RobotSpec(
            name=f"sim_arm:{task}" + ("-sparse" if reward == "sparse" else "") + ("-pixels" if self.pixels else ""),
            state_dim=PROPRIO_DIM if proprio else STATE_DIM,
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
            state_layout={k: (s.start, s.stop) for k, s in layout.items()},
            cameras=cameras,
            mirror_state_sign=() if signs is None else tuple(float(v) for v in signs[0]),
            mirror_action_sign=() if signs is None else tuple(float(v) for v in signs[1]),
            mirror_cameras=() if signs is None else tuple(g.removeprefix("pixels/") for g in signs[2]),
        )
        self._obs: RobotObservation | None = None
        self._gripper = -1.0
        self._clock0 = time.monotonic()
        self._sim_s = 0.0  # simulated seconds since connect (reset does not rewind it)

    def connect(self) -> None:
        self._clock0, self._sim_s = time.monotonic(), 0.0
        self.reset(self._seed)

    def disconnect(self) -> None:
        self._call(self.env.close)
        if self._thread is not None:
            self._thread.shutdown(wait=True)
            self._thread = None

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """``fn(*args, **kwargs)``, on the env's own thread when there are cameras (see the module docstring)."""
        if self._thread is None:
            return fn(*args, **kwargs)
        return self._thread.submit(fn, *args, **kwargs).result()

    def _split(self, obs: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
        """(state, frames by camera name) from the env's observation."""
        if not self.pixels:
            return obs, {}
        return obs["state"], {name: obs[f"pixels/{name}"] for name in PIXEL_CAMERAS}

    def _stamp(self) -> float:
        return self._clock0 + self._sim_s

    @property
    def human_resets(self) -> int:
        """``practice``: scenes that were put back because the arm could not go on from them."""
        return self.env.human_resets

    def reset(self, seed: int | None = None) -> RobotObservation:
        obs, info = self._call(self.env.reset, seed=seed)
        if info.get("human_reset"):
            log.info("practice: the scene was stuck and was put back (human reset %d)", self.env.human_resets)
        state, images = self._split(obs)
        self._gripper = -1.0
        self._obs = RobotObservation(state, 0.0, bool(info["success"]), self._stamp(), images, self._scene())
        return self._obs

    def reset_position(self, seed: int | None = None) -> np.ndarray:
        """The grip position ``reset(seed)`` will start from; this env's random stream is untouched."""
        return self._call(self.env.reset_position, seed)

    def stop(self) -> None:
        """Freeze the servo targets on the measured pose (see the module docstring); time does not advance."""
        self._call(self.env.hold)

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
        obs, reward, _, _, info = self._call(self.env.step, action)
        state, images = self._split(obs)
        self._sim_s += self.env.control_dt
        self._obs = RobotObservation(state, float(reward), bool(info["success"]), self._stamp(), images, self._scene())

    def _scene(self) -> np.ndarray | None:
        """From cameras with proprioception only, the scene's full state for a simulated operator (who watches the
        scene as a person would); otherwise the served state already is the full one."""
        return self._call(self.env.privileged_state) if self.pixels and not self.full_state else None


def _proprio_layout() -> dict[str, slice]:
    """Where each proprioceptive quantity sits in the proprioception-only state (``PROPRIO_KEYS`` order)."""
    out, i = {}, 0
    for key in PROPRIO_KEYS:
        n = STATE_LAYOUT[key].stop - STATE_LAYOUT[key].start
        out[key] = slice(i, i + n)
        i += n
    return out
