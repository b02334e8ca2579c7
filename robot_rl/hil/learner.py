"""The learner side of human-in-the-loop RL (HIL-SERL): SAC with RLPD-mixed replay, fed by robot actors.

Actors (beside the robot, at a fixed control rate) send chunks of consecutive transitions; the learner keeps two
single-env replay buffers:

* the **online** buffer gets every transition;
* the **prior** buffer gets the demonstrations (optionally pre-filled from a dataset, ``LearnerConfig.demo_path``)
  and, as HIL-SERL prescribes, every transition in which a human intervened, so the prior half of each RLPD
  batch grows with the corrections.

Training is paid for in transitions: ``LearnerConfig.utd`` agent updates per received transition once the online
buffer holds ``learning_starts`` of them (the same rule as ``robot_rl.trainer``), each update doing
``sac.optimiser.utd`` critic steps and one actor/temperature step. ``HILLearner.add`` accrues that credit and
``train_due`` spends it, so a synchronous link (``LocalLink``) and a background training thread
(``robot_rl.hil.distributed``) follow the same schedule.

A chunk on the wire is a dict of numpy arrays with leading dim n (see ``TRANSITION_KEYS``); ``check_transitions``
validates one, so an actor can reject a malformed chunk locally before it ever reaches the learner.

Cameras (HIL-SERL from pixels): a learner with ``LearnerConfig.cameras`` (camera group ``pixels/<camera>`` ->
[H, W, 3]) is a DrQ pixel agent (``SAC(cameras=...)``). Its chunks carry each camera's uint8 frames [n, H, W, 3]
under ``obs/<group>`` and ``next_obs/<group>`` (``frame_keys``) beside the float32 state in ``obs``/``next_obs``, and
its buffers are frame buffers (``ReplayBuffer(frames=...)``: each frame stored once). Frame buffers take rows one at
a time and are not cut at every chunk end (each cut would keep a frame twice): a row that does not follow the stored
one (a gap between chunks or intervention runs) is found by comparing observations and closed as a truncation
(``ReplayBuffer.close_broken_episodes``). What the robot acts with is then the ``ActorPolicy`` of actor and encoder
(``build_policy``, whose weights ``actor_state`` gives). Mirror images (``mirror_demos``, ``mirror_online``) flip
every camera's frames left to right, so a camera learner takes them only when the robot declares all its cameras
mirrored (``mirror_cameras``); a mirrored run never follows its original (its state and frames differ), so it is
closed as one too.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from robot_rl.agents.sac import SAC, SACConfig, actor_policy_kwargs, build_actor, policy_state_dict
from robot_rl.envs.core import Reflection
from robot_rl.fields import help_field as _help
from robot_rl.logger import MetricMean
from robot_rl.observations import Mirror, ObservationPipeline
from robot_rl.replay import PRIOR_FRACTION_RANGE, Batch, ReplayBuffer, prior_fraction_ok
from robot_rl.transitions import FRAME_PREFIXES, Transitions, frame_keys, from_chunk

__all__ = [
    "TRANSITION_KEYS", "HILLearner", "LearnerConfig", "LocalLink", "agent_weights", "build_policy", "check_transitions",
    "frame_keys", "frozen_prefixes", "load_acting_weights",
]

# key -> (dtype, trailing dims); "obs"/"action" are [n, D] / [n, A], the rest [n].
TRANSITION_KEYS: dict[str, tuple[np.dtype, int]] = {
    "obs": (np.dtype(np.float32), 1),
    "action": (np.dtype(np.float32), 1),
    "reward": (np.dtype(np.float32), 0),
    "next_obs": (np.dtype(np.float32), 1),
    "terminated": (np.dtype(np.bool_), 0),
    "truncated": (np.dtype(np.bool_), 0),
    "intervention": (np.dtype(np.bool_), 0),
}

LEARNER_STATE_FORMAT = 1


def _is_camera_group(group: str) -> bool:
    return group == "pixels" or (group.startswith("pixels/") and len(group) > len("pixels/"))


def _frame_group(key: str) -> str | None:
    """The camera group of a frame key (``obs/pixels/front`` -> ``pixels/front``), None for any other key."""
    for prefix in FRAME_PREFIXES:
        if key.startswith(prefix) and _is_camera_group(key[len(prefix):]):
            return key[len(prefix):]
    return None


def check_transitions(
    transitions: Any,
    obs_dim: int | None = None,
    action_dim: int | None = None,
    cameras: Mapping[str, Sequence[int]] | None = None,
) -> int:
    """Validate a chunk of transitions and return its length n; raise ValueError naming the offending key.

    Strict on purpose (exact key set, exact dtypes, finite floats): a float64 observation or a NaN reward that is
    silently accepted ends up in every later batch, and a typo'd key would otherwise drop a column. With
    ``obs_dim``/``action_dim`` left None only the structure is checked (what an actor can check without knowing
    the learner's dimensions). Camera frames (``frame_keys``) must be uint8 [n, H, W, 3], ``obs/`` and ``next_obs/``
    alike; ``cameras`` (group -> (H, W, C), the learner's; ``{}`` for a state learner) also fixes which groups
    and sizes, while None accepts any groups that come in such pairs.
    """
    if not isinstance(transitions, dict):
        raise ValueError(f"transitions must be a dict of numpy arrays, got {type(transitions).__name__}")
    missing = [k for k in TRANSITION_KEYS if k not in transitions]
    if missing:
        raise ValueError(f"transitions: missing key {missing[0]!r} (needs {sorted(TRANSITION_KEYS)})")
    frames = {k: g for k in transitions if k not in TRANSITION_KEYS and (g := _frame_group(k)) is not None}
    unknown = [k for k in transitions if k not in TRANSITION_KEYS and k not in frames]
    if unknown:
        raise ValueError(f"transitions: unknown key {unknown[0]!r} (expects exactly {sorted(TRANSITION_KEYS)}, plus "
                         f"camera frames as {FRAME_PREFIXES[0]}pixels/<camera> and {FRAME_PREFIXES[1]}pixels/<camera>)")
    n: int | None = None
    widths = {"obs": obs_dim, "next_obs": obs_dim, "action": action_dim}
    for key, (dtype, trailing) in TRANSITION_KEYS.items():
        value = transitions[key]
        if not isinstance(value, np.ndarray):
            raise ValueError(f"transitions[{key!r}]: expected a numpy array, got {type(value).__name__}")
        if value.dtype != dtype:
            raise ValueError(f"transitions[{key!r}]: expected dtype {dtype}, got {value.dtype}")
        if value.ndim != 1 + trailing:
            raise ValueError(f"transitions[{key!r}]: expected {1 + trailing} dims, got shape {value.shape}")
        if n is None:
            n = int(value.shape[0])
        elif value.shape[0] != n:
            raise ValueError(f"transitions[{key!r}]: leading dim {value.shape[0]} != {n} (from 'obs')")
        width = widths.get(key)
        if trailing and width is not None and value.shape[1] != width:
            raise ValueError(f"transitions[{key!r}]: expected shape ({n}, {width}), got {value.shape}")
        if dtype.kind == "f" and not np.isfinite(value).all():
            raise ValueError(f"transitions[{key!r}]: contains NaN or infinite values")
    if transitions["obs"].shape[1] != transitions["next_obs"].shape[1]:
        raise ValueError(
            f"transitions['next_obs']: width {transitions['next_obs'].shape[1]} != obs width "
            f"{transitions['obs'].shape[1]}"
        )
    assert n is not None
    _check_frames(transitions, frames, n, cameras)
    return n


def _check_frames(
    transitions: dict[str, Any], frames: dict[str, str], n: int, cameras: Mapping[str, Sequence[int]] | None
) -> None:
    """The camera frames of a chunk (`frames`: key -> group); see `check_transitions`."""
    groups = sorted(set(frames.values())) if cameras is None else sorted(cameras)
    reads = ", ".join(groups) if cameras is not None and groups else "no cameras"
    for key in frames:  # frames of a camera the learner does not read
        if cameras is not None and frames[key] not in cameras:
            raise ValueError(f"transitions: unknown key {key!r} (this learner reads {reads})")
    for group in groups:
        pair = frame_keys(group)
        for key in pair:
            if key not in transitions:
                raise ValueError(f"transitions: missing key {key!r} (camera frames come as {pair[0]!r} and "
                                 f"{pair[1]!r}, uint8 [n, H, W, 3])")
        want = None if cameras is None else tuple(int(v) for v in cameras[group])
        for key in pair:
            value = transitions[key]
            if not isinstance(value, np.ndarray):
                raise ValueError(f"transitions[{key!r}]: expected a numpy array, got {type(value).__name__}")
            if value.dtype != np.uint8:
                raise ValueError(f"transitions[{key!r}]: expected dtype uint8 (RGB frames), got {value.dtype}")
            if value.ndim != 4 or value.shape[0] != n or value.shape[3] != 3:
                raise ValueError(f"transitions[{key!r}]: expected frames of shape ({n}, H, W, 3), got {value.shape}")
            if want is None:
                want = tuple(value.shape[1:])
            elif tuple(value.shape[1:]) != want:
                raise ValueError(f"transitions[{key!r}]: expected shape {(n, *want)}, got {value.shape}")


@dataclass
class LearnerConfig:
    """Everything that fixes a learner: its networks, buffers, data mixing and update schedule.

    A checkpoint only fits a learner built from the same dimensions, cameras, SAC networks and buffer capacities.
    """

    obs_dim: int = field(metadata={"help": "size of the flat state observation the actor sends"})
    action_dim: int = field(metadata={"help": "size of the action vector (normalised to [-1, 1])"})
    sac: SACConfig = field(
        default_factory=SACConfig, metadata={"help": "SAC/RLPD networks, optimisers, batch size, n-step, gamma"}
    )
    capacity: int = _help(1_000_000, "online replay capacity (transitions); oldest are overwritten")
    prior_capacity: int = _help(
        200_000, "prior (demo + intervention) replay capacity; must hold the whole demo dataset"
    )
    prior_fraction: float = _help(
        0.5, "share of each minibatch drawn from the prior buffer when it has data (RLPD: 0.5; 0 disables)"
    )
    learning_starts: int = _help(100, "online transitions received before the first update")
    utd: float = _help(
        1.0,
        "agent updates per received transition (each does sac.optimiser.utd critic steps); may be fractional, e.g. 0.5",
    )
    seed: int = _help(0, "seeds network initialisation and minibatch sampling")
    device: str = _help("cpu", "torch device of the networks and replay buffers, e.g. 'cuda'")
    demo_path: str | None = _help(None, "dataset directory (LeRobot v3.0) to pre-fill the prior buffer with")
    demo_max_episodes: int | None = _help(None, "use only the first N episodes of demo_path")
    cameras: dict[str, list[int]] = _help(
        {}, "camera group (pixels/<camera>) -> frame shape [H, W, 3] the agent reads beside the state (a DrQ pixel "
            "agent; demo_path then needs those videos); empty: state only"
    )
    mirror_state_sign: list[float] = _help(
        [], "the task's mirror symmetry (RobotSpec.mirror_state_sign): +-1 per state entry; empty: none"
    )
    mirror_action_sign: list[float] = _help([], "the symmetry's +-1 per action entry (RobotSpec.mirror_action_sign)")
    mirror_cameras: list[str] = _help(
        [], "the camera groups (pixels/<camera>) whose frames flipped left to right are the mirror image's "
            "(RobotSpec.mirror_cameras); a camera learner mirrors only if it reads none but these"
    )
    mirror_demos: bool = _help(
        False, "also put the demos' mirror images into the prior buffer (as train's data.mirror)"
    )
    mirror_online: bool = _help(
        False, "also store every received transition's mirror image, in the prior buffer too for interventions (as "
               "train's train.mirror_online); updates are still earned by received transitions only"
    )

    def validate(self) -> None:
        """Raise ValueError naming the first bad field (before any memory is allocated)."""
        self.sac.validate()
        unmirrored = sorted(set(self.cameras) - set(self.mirror_cameras))
        checks = [
            (self.obs_dim >= 1, "obs_dim must be >= 1"),
            (self.action_dim >= 1, "action_dim must be >= 1"),
            (self.capacity >= 1, "capacity must be >= 1"),
            (self.prior_capacity >= 1, "prior_capacity must be >= 1"),
            (prior_fraction_ok(self.prior_fraction), f"prior_fraction must be in {PRIOR_FRACTION_RANGE}"),
            (self.learning_starts >= 0, "learning_starts must be >= 0"),
            (self.learning_starts <= self.capacity, "learning_starts must be <= capacity"),
            (math.isfinite(self.utd) and self.utd > 0, "utd must be > 0"),
            (self.demo_max_episodes is None or self.demo_max_episodes >= 1, "demo_max_episodes must be >= 1"),
            *(
                (_is_camera_group(g) and len(s) == 3 and int(s[2]) == 3 and min(int(v) for v in s) >= 1,
                 f"cameras: {g!r} must be pixels/<camera> -> [H, W, 3], got {list(s)}")
                for g, s in self.cameras.items()
            ),
            (len(self.mirror_state_sign) in (0, self.obs_dim),
             "mirror_state_sign must be empty or have obs_dim entries"),
            (len(self.mirror_action_sign) == (self.action_dim if self.mirror_state_sign else 0),
             "mirror_action_sign must have action_dim entries with mirror_state_sign, none without"),
            (all(v in (-1.0, 1.0) for v in (*self.mirror_state_sign, *self.mirror_action_sign)),
             "mirror_state_sign and mirror_action_sign entries must be +1 or -1"),
            (not (self.mirror_demos or self.mirror_online) or self.mirror_state_sign,
             "mirror_demos and mirror_online need the robot's mirror_state_sign (it declares no symmetry)"),
            (not self.mirror_cameras or self.mirror_state_sign,
             "mirror_cameras needs mirror_state_sign (the symmetry they belong to)"),
            (not (self.mirror_demos or self.mirror_online) or not unmirrored,
             f"mirror_demos and mirror_online: the robot declares no mirror image for camera "
             f"{unmirrored[0] if unmirrored else ''} (mirror_cameras: {', '.join(self.mirror_cameras) or 'none'}): "
             f"set both false, or learn from the state (hil-train pixels=false)"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"LearnerConfig.{message}")


def _cut(truncated: Tensor, terminated: Tensor, ends: np.ndarray) -> Tensor:
    """The stored truncation flags: also True where a run of stored rows ends without terminating."""
    return truncated | (torch.from_numpy(ends) & ~terminated)


def _segment_ends(mask: np.ndarray) -> np.ndarray:
    """True at the last row of every maximal run of True in `mask` (the row after it is False or absent)."""
    after = np.append(mask[1:], False)
    return mask & ~after


class HILLearner:
    """SAC agent plus the online and prior replay buffers of one HIL-SERL run. Not thread-safe: one caller at a
    time (``robot_rl.hil.distributed.LearnerActor`` serialises its threads with a lock).

    ``version`` increases whenever the weights change (an update or a ``load_state_dict``), so an actor can ask
    for weights only when they are newer than its own.
    """

    def __init__(self, cfg: LearnerConfig, *, load_demos: bool = True) -> None:
        cfg.validate()
        self.cfg = cfg
        self.device = torch.device(cfg.device)
        sac = cfg.sac
        #: camera group -> (H, W, C) of a pixel learner; empty for a state learner
        self.cameras: dict[str, tuple[int, ...]] = {g: tuple(int(v) for v in s) for g, s in cfg.cameras.items()}
        # Seeded initialisation without reseeding the caller's global RNG (SAC's updates still draw from it).
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.seed)
            self.agent = SAC(cfg.obs_dim, cfg.action_dim, sac, device=self.device, cameras=self.cameras or None)
        # the task's mirror symmetry (sign vectors on the CPU, where chunks arrive) for mirror_online, mirror_demos
        mirror = [Mirror(Reflection.from_signs(cfg.mirror_state_sign, cfg.mirror_action_sign, cfg.mirror_cameras))
                  ] if cfg.mirror_state_sign else []
        self.pipeline = ObservationPipeline(self.agent, ("state", *self.cameras), mirror if cfg.mirror_online else (),
                                            mirror if cfg.mirror_demos else ())
        spec = {"state": ((cfg.obs_dim,), torch.float32), **{g: (s, torch.uint8) for g, s in self.cameras.items()}}
        spec = self.pipeline.replay_spec(spec)  # frames, or with sac.encoder.cache_embeddings their backbone features

        def buffer(capacity: int, key: str) -> ReplayBuffer:
            # episode_steps=None: truncations (early failures, lost steps, gaps between chunks and intervention
            # runs) may come at any rate, so the side ring of last frames must be able to hold one per row.
            return ReplayBuffer(
                capacity, 1, spec, cfg.action_dim, device=self.device, gamma=sac.critic.gamma,
                n_step=sac.critic.n_step, capacity_key=key, frames=tuple(self.cameras), episode_steps=None,
            )

        self.online = buffer(cfg.capacity, "capacity")
        self.prior = buffer(cfg.prior_capacity, "prior_capacity")
        self._gen = torch.Generator(device=self.device).manual_seed(cfg.seed)
        #: where the frozen backbones' tensors sit in `actor_state` (pretrained encoders only): they never change, so
        #: an actor that has them once is sent only the rest (`actor_state(frozen=False)`)
        self.frozen_prefixes = frozen_prefixes(self.agent.encoder, "encoder.") if self.cameras else ()
        self.version = 0
        self.transitions = 0  # received through add()
        self.interventions = 0
        self.episodes = 0  # terminated or truncated rows received
        self.updates = 0  # agent.update calls
        self.demo_transitions = 0  # put into the prior buffer by load_demos/add_prior
        self._credit = 0.0  # updates owed under the utd schedule, spent by train_due
        if load_demos and cfg.demo_path:
            self.load_demos(cfg.demo_path, cfg.demo_max_episodes)

    # -- data -----------------------------------------------------------------------------------------------
    def load_demos(self, path: str | Path, max_episodes: int | None = None) -> int:
        """Append a dataset's transitions to the prior buffer (via ``OfflineData``; a pixel learner decodes its
        cameras' videos, and leaves out a truncated episode's last step, which has no next frame); returns how
        many."""
        from robot_rl.prior_data import OfflineData

        data = OfflineData.load(path, self.cfg.sac.critic.gamma, max_episodes, self.device, cameras=tuple(self.cameras))
        data.check_fits(self.cfg.obs_dim, self.cfg.action_dim, f"demo dataset {path}", self.cameras or None)
        if (count := len(data) * (1 + len(self.pipeline.prior))) > self.prior.capacity:
            raise ValueError(
                f"demo dataset {path} has {count:,} transitions"
                f"{' with their mirror images' if self.cfg.mirror_demos else ''} but prior_capacity is "
                f"{self.prior.capacity:,}: raise prior_capacity or set demo_max_episodes"
            )
        data = self.pipeline.prior_data(data)  # mirror_demos' reflections, the statistics, cached embeddings
        stored = data.add_to(self.prior)
        self.demo_transitions += stored
        return stored

    def add(self, transitions: dict[str, np.ndarray]) -> None:
        """Store a chunk of consecutive transitions from one actor: all rows online, intervention rows also prior.

        Stored copies get ``truncated`` set on the last row of the chunk and of each intervention run (unless it
        terminates): the buffers are single-env, so without that an n-step window could run from the end of this
        chunk into the next chunk (another actor's, or after a gap) or across the autonomous steps between two
        interventions. Truncation makes the window stop there and bootstrap from that row's own ``next_obs``,
        which is always correct; with ``sac.critic.n_step == 1`` it changes nothing. A pixel learner's frame buffers
        instead close such a run when the next row stored does not follow it (module docstring).
        """
        n = check_transitions(transitions, self.cfg.obs_dim, self.cfg.action_dim, self.cameras)
        if n == 0:
            return
        t = from_chunk(transitions, self.cameras)
        terminated, truncated, intervention = t.terminated, t.truncated, transitions["intervention"]
        # The statistics, then with mirror_online each store followed by the same rows reflected: a separate run of
        # rows, cut at its end like the original, so no n-step window joins an episode to its mirror image.
        copies = [self.pipeline.chunk_for_replay(c) for c in self.pipeline.chunk(t)]  # as stored, for both buffers
        cut_online = _cut(truncated, terminated, np.arange(n) == n - 1)
        for c in copies:
            self._extend(self.online, c, cut_online)
        if intervention.any():
            rows = torch.from_numpy(np.flatnonzero(intervention))
            cut_prior = _cut(truncated, terminated, _segment_ends(intervention))
            for c in copies:
                self._extend(self.prior, c.rows(rows), cut_prior[rows])

        # Only transitions from the `learning_starts`-th on earn updates, as in robot_rl.trainer (no catch-up for
        # the warm-up). Counted on transitions received, which equals the online buffer's fill until it is full.
        before, after = self.transitions, self.transitions + n
        self._credit += self.cfg.utd * max(0, after - max(before, self.cfg.learning_starts))
        self.transitions = after
        self.interventions += int(intervention.sum())
        self.episodes += int((terminated | truncated).sum())

    def add_prior(self, transitions: dict[str, np.ndarray]) -> None:
        """Store demonstrations (same chunk format) in the prior buffer only, with their mirror images under
        mirror_demos; they earn no updates."""
        n = check_transitions(transitions, self.cfg.obs_dim, self.cfg.action_dim, self.cameras)
        if n == 0:
            return
        t = from_chunk(transitions, self.cameras)
        cut = _cut(t.truncated, t.terminated, np.arange(n) == n - 1)
        for c in self.pipeline.chunk(t, online=False):
            self._extend(self.prior, self.pipeline.chunk_for_replay(c), cut)
            self.demo_transitions += n

    def _extend(self, buffer: ReplayBuffer, t: Transitions, truncated: Tensor) -> None:
        """Store transitions already as the replay stores them (`ObservationPipeline.chunk_for_replay`)."""
        if not self.cameras:
            buffer.extend(t.obs, t.action, t.reward, t.next_obs, t.terminated, truncated)
            return
        # A frame buffer: row by row, with the chunk's own flags (no cut at its end, see the module docstring).
        for i in range(t.reward.shape[0]):
            row = t.rows(slice(i, i + 1))
            buffer.close_broken_episodes(row.obs)
            buffer.add(*row)

    # -- training -------------------------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Whether the online buffer holds `learning_starts` transitions (and at least one)."""
        return len(self.online) >= max(1, self.cfg.learning_starts)

    @property
    def pending_updates(self) -> int:
        """Updates owed under the utd schedule and not yet made."""
        return int(self._credit + 1e-9)  # 0.1 * 10 must give 1, not 0

    def sample(self) -> Batch:
        """One update's batch, [sac.optimiser.utd, batch_size]; with prior data each minibatch mixes both buffers (RLPD)."""
        return self.agent.sample(self.online, self.prior, self.cfg.prior_fraction, self._gen)

    def train(self, num_updates: int) -> dict[str, float]:
        """Make `num_updates` agent updates (none before `ready`) and return their mean metrics ({} if none).

        Metrics are summed on the device and read back once at the end, so the updates never wait on the host.
        """
        if num_updates <= 0 or not self.ready:
            return {}
        means = MetricMean()
        for _ in range(num_updates):
            # `SAC.learn` = `update(sample)` with the batch's prior-row count (agent.optimiser.bc_weight reads it)
            metrics = self.agent.learn(self.online, self.prior, self.cfg.prior_fraction, generator=self._gen)
            means.add({k: v.detach().float() for k, v in metrics.items()})
            self.updates += 1
        self.version += 1
        return means.means()

    def train_due(self, max_updates: int | None = None) -> dict[str, float]:
        """Make the updates owed under the utd schedule (at most `max_updates`) and return their mean metrics."""
        n = self.pending_updates if max_updates is None else min(self.pending_updates, max_updates)
        if n <= 0 or not self.ready:
            return {}
        metrics = self.train(n)
        self._credit -= n
        return metrics

    # -- weights and checkpoints ----------------------------------------------------------------------------
    def actor_state(self, frozen: bool = True) -> dict[str, Tensor]:
        """CPU copies of the acting weights (what `build_policy` builds): all an actor process needs, safe to ship
        while training goes on. A state learner's actor; a pixel learner's actor, encoder and state statistics.

        ``frozen=False`` leaves out a pretrained encoder's frozen backbone (`frozen_prefixes`), the same in every
        version: what the links send once an actor has it (`load_acting_weights`). It is most of the bytes (ResNet-10
        under two cameras: 39 of 42 MB) and copying it took ~40 ms per sync, most of a 20 Hz control tick."""
        weights = self.agent.actor.state_dict()
        if self.cameras:
            agent = {"actor": weights, "encoder": self.agent.encoder.state_dict()}
            if self.agent.obs_norm is not None:
                agent["obs_norm"] = self.agent.obs_norm.state_dict()
            weights = policy_state_dict(agent)
        skip = () if frozen else self.frozen_prefixes
        return {k: v.detach().to("cpu", copy=True) for k, v in weights.items() if not k.startswith(skip)}

    def counters(self) -> dict[str, int]:
        """Progress counters (what a dashboard or a restarted learner needs to know)."""
        return {
            "version": self.version,
            "transitions": self.transitions,
            "interventions": self.interventions,
            "episodes": self.episodes,
            "updates": self.updates,
            "pending_updates": self.pending_updates,
            "online_size": len(self.online),
            "prior_size": len(self.prior),
            "demo_transitions": self.demo_transitions,
        }

    def state_dict(self) -> dict[str, Any]:
        """Agent, both buffers, sampling RNG and counters (CPU tensors and plain types), for a checkpoint."""
        return {
            "format": LEARNER_STATE_FORMAT,
            "config": asdict(self.cfg),
            "agent": self.agent.state_dict(),
            "online": self.online.state_dict(),
            "prior": self.prior.state_dict(),
            "rng": self._gen.get_state(),
            "credit": self._credit,
            "counters": {
                "version": self.version,
                "transitions": self.transitions,
                "interventions": self.interventions,
                "episodes": self.episodes,
                "updates": self.updates,
                "demo_transitions": self.demo_transitions,
            },
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`; the version ends up above the saved one, since the weights changed."""
        if state.get("format") != LEARNER_STATE_FORMAT:
            raise ValueError(f"learner state format {state.get('format')!r} is not {LEARNER_STATE_FORMAT}")
        self.agent.load_state_dict(state["agent"])
        self.online.load_state_dict(state["online"])
        self.prior.load_state_dict(state["prior"])
        self._gen.set_state(state["rng"])
        self._credit = float(state["credit"])
        c = state["counters"]
        self.transitions, self.interventions, self.episodes = c["transitions"], c["interventions"], c["episodes"]
        self.updates, self.demo_transitions = c["updates"], c["demo_transitions"]
        self.version = max(self.version, int(c["version"])) + 1


def build_policy(cfg: LearnerConfig) -> torch.nn.Module:
    """The untrained network an actor process acts with, which `HILLearner.actor_state` weights load into: a state
    learner's bare actor (`build_actor`), or a pixel learner's `ActorPolicy` (actor + camera encoder + state
    statistics, as `deploy` rebuilds it), whose `act` takes the observation dict of `RobotObservation.as_dict`."""
    if not cfg.cameras:
        return build_actor(cfg.obs_dim, cfg.action_dim, cfg.sac)
    from robot_rl.policies.actor_policy import ActorPolicy

    cameras = {g: tuple(int(v) for v in s) for g, s in cfg.cameras.items()}
    return ActorPolicy(**actor_policy_kwargs(cfg.obs_dim, cfg.action_dim, cfg.sac, cameras=cameras))


def frozen_prefixes(module: torch.nn.Module, root: str = "") -> tuple[str, ...]:
    """The state-dict prefixes (under `root`) of the frozen backbones (and readouts) of the pretrained encoders in
    `module`: one per camera, though the cameras share one backbone, since a state dict names a shared module under
    each owner."""
    from robot_rl.policies.encoders import PretrainedEncoder

    encoders = [(name, m) for name, m in module.named_modules() if isinstance(m, PretrainedEncoder)]
    return tuple(f"{root}{name}.{part}." for name, m in encoders
                 for part in ("backbone", "readout") if getattr(m, part) is not None)


def load_acting_weights(policy: torch.nn.Module, weights: Mapping[str, Tensor]) -> None:
    """Load `HILLearner.actor_state` weights into `build_policy`'s network: all of them, or all but the frozen
    backbone's (what a link sends after the first weights; those loaded first stay). Anything else missing, or a
    name the policy does not have, is an error."""
    missing, unexpected = policy.load_state_dict(weights, strict=False)
    frozen = frozen_prefixes(policy)
    missing = [k for k in missing if not k.startswith(frozen)]
    if missing or unexpected:
        raise RuntimeError(f"acting weights do not fit the policy: missing {missing[:3]}, unexpected {unexpected[:3]}")


def agent_weights(cfg: LearnerConfig, weights: Mapping[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    """Acting weights (`HILLearner.actor_state`) in the layout of an agent's `state_dict` (``actor``, and for a
    pixel learner ``encoder``, ``obs_norm``): what a checkpoint holds, so `robot_rl.export` reads a run whose
    learner ran elsewhere (Ray) like one whose learner ran here. The inverse of `policy_state_dict`."""
    if not cfg.cameras:
        return {"actor": dict(weights)}
    out: dict[str, dict[str, Tensor]] = {"actor": {}, "encoder": {}}
    names = {"actor.": "actor", "encoder.": "encoder", "state_norm.": "obs_norm"}
    for key, value in weights.items():
        prefix = next(p for p in names if key.startswith(p))
        out.setdefault(names[prefix], {})[key[len(prefix):]] = value
    return out


class LocalLink:
    """The actor-learner link within one process (single-process mode, the default in simulation).

    Same interface as ``robot_rl.hil.distributed.RayLink``: ``push`` hands over a chunk, ``poll_weights`` returns new
    actor weights or None, ``alive`` says whether the learner is reachable, plus ``stats`` and ``flush``. Here
    ``push`` trains synchronously, so the control loop pays for the updates; that is the point of running
    everything in one process. The learner is checkpointed by the run (``robot_rl.hil.method.HILMethod``).
    """

    def __init__(self, learner: HILLearner) -> None:
        self.learner = learner
        self.weights_version = -1  # the learner version last handed out by poll_weights
        self._metrics = MetricMean(on_host=True)  # of the updates since the last take_metrics

    @property
    def alive(self) -> bool:
        return True

    def push(self, transitions: dict[str, np.ndarray]) -> None:
        """Add the chunk, then make the updates it earned (utd * n once learning has started)."""
        self.learner.add(transitions)
        metrics = self.learner.train_due()
        if metrics:
            self._metrics.add(metrics)

    def take_metrics(self) -> dict[str, float]:
        """Mean update metrics (losses, Q) since the last call, and start a new mean; {} if no update was made."""
        means = self._metrics.means()
        self._metrics.reset()
        return means

    def poll_weights(self) -> dict[str, Tensor] | None:
        """The learner's actor weights if they changed since the last call, else None; after the first call without
        the frozen backbone (`HILLearner.actor_state`), which the actor then has."""
        if self.learner.version <= self.weights_version:
            return None
        first = self.weights_version < 0
        self.weights_version = self.learner.version
        return self.learner.actor_state(frozen=first)

    def flush(self, timeout_s: float = 5.0) -> bool:
        """Nothing is ever pending here (``RayLink.flush`` waits for its queue); True."""
        return True

    def stats(self) -> dict[str, Any]:
        return {"alive": True, "weights_version": self.weights_version, **self.learner.counters()}
