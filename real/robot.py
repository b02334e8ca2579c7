"""The ``Robot`` interface: what a driver implements so the bridge can serve it.

A driver is one file in ``real/drivers/`` with one class implementing ``Robot``. The server (``robot_rl.real.server``)
calls it from a single control thread, once per control period, so a driver needs no locking of its own:

* ``reset(seed)`` starts an episode (a real arm moves to its home pose; the simulated arm draws a new scene);
* ``command(action)`` applies one action for one control period. The server has already checked and clamped
  it (``robot_rl.real.safety``): it is finite, the right shape, inside ``spec.action_low/high`` and inside the
  workspace box and step limits. A driver may still refuse (raise) but must never move outside them;
* ``hold()`` keeps the current pose for one control period (no command arrived, the watchdog fired, or the
  e-stop is latched);
* ``stop()`` halts at once (e-stop, a hard supervisor breach, a driver fault): the hand must not keep travelling
  towards an earlier target. The server calls it from the control thread as soon as the e-stop is requested (not
  at the next tick) and answers the ``EStop`` call only after it returned; later ticks call ``hold()`` until the
  latch is cleared, and ``hold()`` after ``stop()`` must keep the robot where ``stop()`` left it;
* ``observe()`` returns the latest ``RobotObservation``;
* ``spec.cameras`` (optional) declares the driver's cameras (``CameraSpec``: name, height, width); every
  observation then carries one uint8 ``(height, width, 3)`` RGB frame per camera in ``RobotObservation.images``,
  keyed by camera name. The server compresses them for the wire (``robot_rl.real.images``) outside the control
  loop, possibly while the next tick runs: give each observation fresh arrays (never refill a buffer that an
  earlier observation returned). A frame of the wrong shape or type fails that reply (never the loop). Clients see them as the observation
  groups ``"pixels/<camera>"`` (``RobotObservation.as_dict``), the layout of the simulated ``-pixels`` tasks;
* ``reset_position(seed)`` (optional) says where ``reset(seed)`` will put the end effector, so that the server can
  first bring the hand there at a limited speed; the default ``None`` means ``reset`` moves the robot itself within
  its limits (or needs an operator).

Actions are normalised to [-1, 1] per dimension. For Cartesian robots (``spec.cartesian`` set) the first three
action dimensions are a displacement of the end effector in the robot's base frame, ``cartesian.metres_per_unit``
metres per control step at 1.0; the safety layer uses that to keep the commanded target inside the workspace
box. Teleop devices produce actions in this same frame (``robot_rl.real.teleop``).
"""

from __future__ import annotations

import abc
import re
from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True)
class CartesianLimits:
    """Where a Cartesian robot's end effector may go and how fast (all in the robot's base frame, metres).

    ``ee_slice`` locates the end-effector position in the state vector; ``metres_per_unit`` converts the first
    three action dimensions into a displacement per control step.
    """

    workspace_low: tuple[float, float, float]
    workspace_high: tuple[float, float, float]
    metres_per_unit: float
    max_step_m: float
    max_speed_mps: float
    ee_slice: tuple[int, int] = (0, 3)

    def __post_init__(self) -> None:
        low, high = np.asarray(self.workspace_low), np.asarray(self.workspace_high)
        if low.shape != (3,) or high.shape != (3,) or not np.all(low < high):
            raise ValueError(f"workspace box must be 3 lows below 3 highs, got {low} and {high}")
        for name in ("metres_per_unit", "max_step_m", "max_speed_mps"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name} must be > 0, got {getattr(self, name)}")


_CAMERA_NAME = re.compile(r"[a-z0-9_]{1,32}")
MAX_CAMERA_SIDE = 4096


@dataclass(frozen=True)
class CameraSpec:
    """One camera of a robot: its frames are uint8 ``(height, width, 3)`` RGB, observation group
    ``"pixels/<name>"``. Names are 1-32 characters of ``a-z0-9_``."""

    name: str
    height: int
    width: int

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not _CAMERA_NAME.fullmatch(self.name):
            raise ValueError(f"camera name must be 1-32 characters of a-z, 0-9 and _, got {self.name!r}")
        for side in ("height", "width"):
            v = getattr(self, side)
            if not isinstance(v, (int, np.integer)) or not 1 <= v <= MAX_CAMERA_SIDE:
                raise ValueError(f"camera {self.name!r}: {side} must be an integer in 1..{MAX_CAMERA_SIDE}, got {v!r}")

    @property
    def shape(self) -> tuple[int, int, int]:
        return (int(self.height), int(self.width), 3)

    @property
    def group(self) -> str:
        """The observation group of this camera's frames (what ``CameraFusion`` reads)."""
        return f"pixels/{self.name}"


@dataclass(frozen=True)
class RobotSpec:
    """Everything a client needs to know about a robot before it sends the first command."""

    name: str
    state_dim: int
    action_dim: int
    control_hz: float
    action_low: tuple[float, ...]
    action_high: tuple[float, ...]
    cartesian: CartesianLimits | None = None
    time_limit: int | None = None  # episode length in control steps, if the task has one
    state_layout: dict[str, tuple[int, int]] = field(default_factory=dict)
    cameras: tuple[CameraSpec, ...] = ()  # every observation carries one frame of each (RobotObservation.images)
    # The task's mirror symmetry, if it has one (``robot_rl.envs.Reflection``): a state times ``mirror_state_sign``
    # and an action times ``mirror_action_sign`` (entries +1 or -1) is again a valid transition with the same
    # reward. Learners may then also learn from each transition's mirror image (``hil-train mirror_demos=true
    # mirror_online=true``). Both empty: none declared.
    mirror_state_sign: tuple[float, ...] = ()
    mirror_action_sign: tuple[float, ...] = ()
    # The cameras (names) whose frames, flipped left to right, are the mirror image's frames: each lies in the mirror
    # plane with its image x axis across it, in a scene that is its own mirror image (``Reflection.cameras``). A
    # camera learner mirrors only when it reads none but these.
    mirror_cameras: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if len(self.action_low) != self.action_dim or len(self.action_high) != self.action_dim:
            raise ValueError("action_low and action_high must have action_dim entries")
        if not self.control_hz > 0:
            raise ValueError(f"control_hz must be > 0, got {self.control_hz}")
        sizes = (len(self.mirror_state_sign), len(self.mirror_action_sign))
        if sizes not in ((0, 0), (self.state_dim, self.action_dim)):
            raise ValueError(f"mirror_state_sign and mirror_action_sign must both be empty or have state_dim "
                             f"({self.state_dim}) and action_dim ({self.action_dim}) entries, got "
                             f"{len(self.mirror_state_sign)} and {len(self.mirror_action_sign)}")
        if any(v not in (-1.0, 1.0) for v in (*self.mirror_state_sign, *self.mirror_action_sign)):
            raise ValueError("mirror_state_sign and mirror_action_sign entries must be +1 or -1")
        names = [c.name for c in self.cameras]
        if len(set(names)) != len(names):
            raise ValueError(f"camera names must be unique, got {names}")
        if self.mirror_cameras and not self.mirror_state_sign:
            raise ValueError("mirror_cameras needs mirror_state_sign and mirror_action_sign (the symmetry they belong to)")
        unknown = [c for c in self.mirror_cameras if c not in names]
        if unknown or len(set(self.mirror_cameras)) != len(self.mirror_cameras):
            raise ValueError(f"mirror_cameras must be distinct names of the robot's cameras ({names or 'none'}), "
                             f"got {list(self.mirror_cameras)}")

    def check_images(self, images: dict[str, np.ndarray]) -> None:
        """Raise ``ValueError`` (one line naming the camera) unless ``images`` holds exactly one uint8 frame of the
        declared shape per camera."""
        names = {c.name for c in self.cameras}
        extra = sorted(set(images) - names)
        if extra:
            raise ValueError(f"frame from undeclared camera {extra[0]!r} (declared: {sorted(names) or 'none'})")
        for c in self.cameras:
            a = images.get(c.name)
            if a is None:
                raise ValueError(f"camera {c.name!r}: no frame in the observation")
            if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.shape != c.shape:
                what = f"{a.dtype} {a.shape}" if isinstance(a, np.ndarray) else type(a).__name__
                raise ValueError(f"camera {c.name!r}: frame must be uint8 {c.shape}, got {what}")


@dataclass
class RobotObservation:
    """One observation. ``reward`` and ``success`` come from the driver when it can compute them (simulation,
    or a reward classifier on hardware); otherwise they stay 0 / False and the operator labels episodes."""

    state: np.ndarray
    reward: float = 0.0
    success: bool = False
    stamp: float = 0.0  # when it was measured (s, the robot's clock: time.monotonic() or a simulated clock); the
    # supervisor's speed check divides by the difference of consecutive stamps
    images: dict[str, np.ndarray] = field(default_factory=dict)  # camera name -> uint8 (H, W, 3) RGB (spec.cameras)
    # A simulated robot's scene state (`ArmEnv.privileged_state`): what a simulated operator watches, as a person
    # sees the scene; None on hardware. Not in `as_dict`: learners, replays and datasets never receive it.
    privileged_state: np.ndarray | None = None

    def as_dict(self) -> dict[str, np.ndarray]:
        """The project's observation layout: ``{"state": ..., "pixels/<camera>": uint8 (H, W, 3), ...}`` (the
        groups ``robot_rl.policies.encoders.CameraFusion`` reads, as ``ArmEnv(pixels=True)`` gives them)."""
        return {"state": self.state, **{f"pixels/{name}": a for name, a in self.images.items()}}


class Robot(abc.ABC):
    """A robot the bridge can serve. See the module docstring for the calling contract."""

    spec: RobotSpec

    def connect(self) -> None:
        """Open the connection to the controller (default: nothing to do)."""
        return None

    def disconnect(self) -> None:
        """Close the connection; safe to call twice (default: nothing to do)."""
        return None

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> RobotObservation:
        """Start an episode and return its first observation."""

    @abc.abstractmethod
    def observe(self) -> RobotObservation:
        """The latest observation."""

    @abc.abstractmethod
    def command(self, action: np.ndarray) -> None:
        """Apply one safe action (float64, shape ``[action_dim]``) for one control period."""

    @abc.abstractmethod
    def hold(self) -> None:
        """Keep the current pose for one control period."""

    def stop(self) -> None:
        """Emergency stop: halt now (default: hold). Override it when ``hold()`` keeps a target that may lead
        the measured pose, as servo drivers do."""
        self.hold()

    def reset_position(self, seed: int | None = None) -> np.ndarray | None:
        """Where ``reset(seed)`` will put the end effector (Cartesian robots), without side effects; ``None`` (the
        default) when ``reset`` moves the robot itself within the limits."""
        return None

    def __enter__(self) -> Robot:
        self.connect()
        return self

    def __exit__(self, *exc: object) -> None:
        self.disconnect()
