"""Replay buffer for off-policy learning from batched (vectorised) environments.

Storage is laid out ``[T, num_envs, ...]`` with one circular write position shared by all envs, so an env
step is a single row write and the per-env time order is simply the row order modulo ``T``. n-step returns
are computed at sample time (rather than at insertion) so that windows still in progress are usable
immediately and ``n_step``/``gamma`` never have to be baked into the stored data.

Camera frames (the groups named in ``frames``, e.g. ``pixels/front``) are stored once, not as obs and next_obs:
the next frame of step t is the frame of step t+1, which row t+1 holds anyway. Row ``t`` keeps the obs frame of
transition t, and each ``add`` also writes the next frame into row ``t+1`` (the row the following step starts
from), so the buffer keeps one spare row: ``T = capacity // num_envs + 1`` rows, of which ``T - 1`` are
transitions and the row at the write position holds the newest next frame. Where an episode ended the frame in
row t+1 is the new episode's first frame, not the episode's last, so:

* a truncated step (time limit; bootstrapped) keeps its last frame in a small side ring per env, ``final_frames``
  (``K = (T - 2) // episode_steps + 2`` slots: truncations of one env are at least ``episode_steps`` steps apart,
  so at most K - 1 are among the stored rows; without ``episode_steps`` K = T, which is safe for any env). A
  slot still read by a stored transition is never overwritten: ``add`` raises instead, naming the key;
* a step that did not end its episode but is followed by another obs than its next one (the loop reset the
  env: a resumed run) is marked truncated and its frame kept the same way (one spare slot per such break);
* a terminated step's next frame is not stored at all: its value is multiplied by a discount of 0, and the batch
  gives an all-zero frame there, so that nothing can mistake it for a real one.

A frame then costs one copy per transition plus one per ``episode_steps`` transitions, against two.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from typing import Any

import torch
from torch import Tensor

from robot_rl.errors import UserError

ObsSpec = dict[str, tuple[tuple[int, ...], torch.dtype]]

__all__ = ["PRIOR_FRACTION_RANGE", "Batch", "ObsSpec", "ReplayBuffer", "prior_fraction_ok", "sample_mixed"]


@dataclass
class Batch:
    """A batch of (n-step) transitions; the SAC target is ``reward + discount * V(next_obs)``."""

    obs: dict[str, Tensor]
    action: Tensor
    reward: Tensor
    next_obs: dict[str, Tensor]
    discount: Tensor

    def _map(self, fn: Callable[[Tensor], Tensor]) -> Batch:
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            out[f.name] = {k: fn(v) for k, v in value.items()} if isinstance(value, dict) else fn(value)
        return Batch(**out)

    def reshape(self, *shape: int | tuple[int, ...]) -> Batch:
        """Reshape the leading batch dim only, e.g. ``batch.reshape(utd, B)`` for a batch of ``utd * B``."""
        if len(shape) == 1 and isinstance(shape[0], tuple | list):
            shape = tuple(shape[0])
        lead = tuple(int(s) for s in shape)  # type: ignore[arg-type]
        return self._map(lambda t: t.reshape(*lead, *t.shape[1:]))

    def index(self, i: int) -> Batch:
        """The i-th slice along the leading dim, e.g. one of the ``utd`` minibatches of a reshaped batch."""
        return self._map(lambda t: t[i])

    def to(self, device: str | torch.device, non_blocking: bool = False) -> Batch:
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    @staticmethod
    def cat(batches: list[Batch], dim: int = 0) -> Batch:
        """Concatenate along a batch dim (RLPD mixes a prior and an online batch this way; with batches shaped
        [utd, b_i] use ``dim=1`` so that every one of the ``utd`` minibatches gets its share of both)."""
        first = batches[0]
        return Batch(
            obs={k: torch.cat([b.obs[k] for b in batches], dim) for k in first.obs},
            action=torch.cat([b.action for b in batches], dim),
            reward=torch.cat([b.reward for b in batches], dim),
            next_obs={k: torch.cat([b.next_obs[k] for b in batches], dim) for k in first.next_obs},
            discount=torch.cat([b.discount for b in batches], dim),
        )


def _normalise_spec(obs_spec: ObsSpec) -> ObsSpec:
    if not obs_spec:
        raise ValueError("obs_spec must contain at least one observation group")
    spec: ObsSpec = {}
    for name, (shape, dtype) in obs_spec.items():
        if not isinstance(dtype, torch.dtype):
            raise ValueError(f"obs_spec[{name!r}]: dtype must be a torch.dtype, got {dtype!r}")
        spec[name] = (tuple(int(s) for s in shape), dtype)
    return spec


def _spec_to_plain(obs_spec: ObsSpec) -> dict[str, tuple[list[int], str]]:
    # Plain types only (dtype as its string), so checkpoints load under torch.load(weights_only=True).
    return {name: (list(shape), str(dtype)) for name, (shape, dtype) in obs_spec.items()}


class ReplayMemoryError(UserError, ValueError):
    """The replay buffer would not fit in the device's memory; the message names the key and a size that fits."""


MEMORY_HEADROOM = 0.8  # of the available memory a replay buffer may take: the networks, envs and OS need the rest


def _group_bytes(shape: tuple[int, ...], dtype: torch.dtype) -> int:
    return _numel(shape) * torch.empty((), dtype=dtype).element_size()


def bytes_per_transition(obs_spec: ObsSpec, action_dim: int, frames: Sequence[str] = (),
                         episode_steps: int | None = None) -> int:
    """Bytes one stored transition takes: obs and next_obs groups, action, reward and the two flags.

    Groups in `frames` are stored once (see the module docstring), plus their last frame once per
    `episode_steps` transitions (every transition when `episode_steps` is None) and an 8-byte side-ring index.
    """
    twice = sum(_group_bytes(*obs_spec[k]) for k in obs_spec if k not in frames)
    once = sum(_group_bytes(*obs_spec[k]) for k in frames)
    side = once if episode_steps is None else -(-once // episode_steps)
    return 2 * twice + once + side + (8 if frames else 0) + 4 * action_dim + 4 + 2


def available_memory(device: torch.device) -> int | None:
    """Bytes that can still be allocated on `device` (host: the kernel's MemAvailable); None where unknown."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    if device.type != "cpu":
        return None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def check_fits(capacity: int, obs_spec: ObsSpec, action_dim: int, device: torch.device,
               key: str = "capacity", frames: Sequence[str] = (), episode_steps: int | None = None) -> None:
    """Raise `ReplayMemoryError` before allocating when `capacity` transitions would not fit in `device`'s
    memory (more than `MEMORY_HEADROOM` of what is available): one line with the size needed, where it goes and
    a `key=` value that fits. A run killed by the kernel's OOM killer says nothing; this says what to change."""
    available = available_memory(device)
    per = bytes_per_transition(obs_spec, action_dim, frames, episode_steps)
    need = capacity * per
    if available is None or need <= MEMORY_HEADROOM * available:
        return
    fits = int(MEMORY_HEADROOM * available // per)
    if fits >= 100:  # a round number: two significant digits, rounded down so that it does fit
        step = 10 ** (len(str(fits)) - 2)
        fits = fits // step * step
    groups = ", ".join(f"{k} {_group_bytes(s, d):,} B" for k, (s, d) in obs_spec.items())
    stored = "stored for obs and next_obs" if not frames else f"frames of {', '.join(frames)} stored once"
    raise ReplayMemoryError(
        f"{key}={capacity:,} needs {need / 1e9:.1f} GB of {device.type} memory for the replay buffer ({per:,} bytes "
        f"per transition; observation: {groups}, {stored}) but {available / 1e9:.1f} GB is "
        f"available; {key}={fits:,} fits"
    )


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


class ReplayBuffer:
    """Circular replay buffer over ``num_envs`` parallel envs with n-step returns computed at sample time.

    ``capacity`` counts transitions over all envs; each env gets ``capacity // num_envs`` slots, so the
    effective capacity (``self.capacity``) is that times ``num_envs``. ``frames`` names the observation groups
    (camera images) stored once rather than as obs and next_obs, and ``episode_steps`` is the env's time limit,
    which bounds how many episode-end frames must be kept beside them (see the module docstring).
    """

    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_spec: ObsSpec,
        action_dim: int,
        device: str | torch.device = "cpu",
        gamma: float = 0.99,
        n_step: int = 1,
        capacity_key: str = "capacity",
        frames: Sequence[str] = (),
        episode_steps: int | None = None,
    ) -> None:
        """`capacity_key` is the config key that set `capacity`, for the error when it does not fit in memory."""
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        if capacity < num_envs:
            raise ValueError(f"capacity ({capacity}) must be >= num_envs ({num_envs})")
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim}")
        if n_step < 1:
            raise ValueError(f"n_step must be >= 1, got {n_step}")
        if not 0.0 <= gamma <= 1.0:
            raise ValueError(f"gamma must be in [0, 1], got {gamma}")

        self.num_envs = int(num_envs)
        self.obs_spec = _normalise_spec(obs_spec)
        self.frames = tuple(frames)
        unknown = [k for k in self.frames if k not in self.obs_spec]
        if unknown:
            raise ValueError(f"frames: {unknown[0]!r} is not an observation group ({', '.join(self.obs_spec)})")
        if episode_steps is not None and episode_steps < 1:
            raise ValueError(f"episode_steps must be None or >= 1, got {episode_steps}")
        self.episode_steps = episode_steps if self.frames else None
        # Frame buffers keep one spare row for the newest next frame (module docstring).
        self._max_size = int(capacity) // self.num_envs
        self.T = self._max_size + (1 if self.frames else 0)
        self.capacity = self._max_size * self.num_envs
        self.action_dim = int(action_dim)
        self.device = torch.device(device)
        check_fits(self.capacity, self.obs_spec, self.action_dim, self.device, capacity_key, self.frames,
                   self.episode_steps)
        self.gamma = float(gamma)
        self.n_step = int(n_step)

        T, E, dev = self.T, self.num_envs, self.device
        self.obs = {k: torch.zeros((T, E, *s), dtype=d, device=dev) for k, (s, d) in self.obs_spec.items()}
        self.next_obs = {
            k: torch.zeros((T, E, *s), dtype=d, device=dev) for k, (s, d) in self.obs_spec.items()
            if k not in self.frames
        }
        # Last frames of truncated steps: a ring of K slots per env, its slot per (row, env) in `_final_slot`.
        K = T if self.episode_steps is None else min(T, (T - 2) // self.episode_steps + 2)
        self.final_frames = {k: torch.zeros((K, E, *self.obs_spec[k][0]), dtype=self.obs_spec[k][1], device=dev)
                             for k in self.frames}
        self._final_slot = torch.zeros((T, E) if self.frames else (0, E), dtype=torch.long, device=dev)
        self._final_next = [0] * E  # host: next side-ring slot per env
        self._slot_add = [[-T] * K for _ in range(E)]  # host: the add() number each side-ring slot was written at
        self._adds = 0  # host: add() calls so far
        self.action = torch.zeros((T, E, self.action_dim), dtype=torch.float32, device=dev)
        self.reward = torch.zeros((T, E), dtype=torch.float32, device=dev)
        self.terminated = torch.zeros((T, E), dtype=torch.bool, device=dev)
        self.truncated = torch.zeros((T, E), dtype=torch.bool, device=dev)

        # Host-side counters: they only change on add(), so keeping them as Python ints avoids any
        # device->host sync when turning them into index arithmetic.
        self._pos = 0  # next row to write
        self._size = 0  # filled rows (<= T)

        # gamma^j for j = 0..n_step, precomputed in float64 then cast once so powers are not re-derived per batch.
        self._gamma_pows = torch.tensor(
            [self.gamma**j for j in range(self.n_step + 1)], dtype=torch.float64, device=dev
        ).to(torch.float32)
        self._offsets = torch.arange(self.n_step, device=dev)

    # ------------------------------------------------------------------ writing

    def __len__(self) -> int:
        return self._size * self.num_envs

    @property
    def full(self) -> bool:
        return self._size == self._max_size

    def _check(self, name: str, t: Tensor, shape: tuple[int, ...]) -> None:
        # copy_ would silently broadcast a wrongly shaped input into every env's slot, so check explicitly.
        if tuple(t.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(t.shape)}")

    def _check_step(self, n: int, per: str, obs, action, reward, next_obs, terminated, truncated) -> None:
        """Keys and shapes of `n` transitions against the spec (leading dim n)."""
        for label, group in (("obs", obs), ("next_obs", next_obs)):
            if group.keys() != self.obs_spec.keys():
                raise ValueError(
                    f"{label} keys {sorted(group)} do not match obs_spec keys {sorted(self.obs_spec)}"
                )
            for k, (shape, _) in self.obs_spec.items():
                self._check(f"{label}[{k!r}]", group[k], (n, *shape))
        self._check("action", action, (n, self.action_dim))
        # Rewards/flags are accepted as [n] or [n, 1] since vector envs differ on this.
        for name, t in (("reward", reward), ("terminated", terminated), ("truncated", truncated)):
            if t.numel() != n:
                raise ValueError(f"{name}: expected {n} elements ({per}), got shape {tuple(t.shape)}")

    def add(
        self,
        obs: dict[str, Tensor],
        action: Tensor,
        reward: Tensor,
        next_obs: dict[str, Tensor],
        terminated: Tensor,
        truncated: Tensor,
    ) -> None:
        """Store one batched env step (leading dim ``num_envs``); ``next_obs`` is the true next observation."""
        E = self.num_envs
        self._check_step(E, "one per env", obs, action, reward, next_obs, terminated, truncated)

        p = self._pos
        if self.frames and self._size:
            self._close_broken_episodes(p, obs, {k: self.obs[k][p] for k in self.frames})
        for k in self.obs_spec:
            self.obs[k][p].copy_(obs[k])
            if k in self.next_obs:
                self.next_obs[k][p].copy_(next_obs[k])
        if self.frames:
            self._add_frames(p, next_obs, truncated.reshape(E))
        self.action[p].copy_(action)
        self.reward[p].copy_(reward.reshape(E))
        # copy_ into a bool tensor maps any nonzero flag (float/int envs) to True.
        self.terminated[p].copy_(terminated.reshape(E))
        self.truncated[p].copy_(truncated.reshape(E))

        self._pos = (p + 1) % self.T
        self._size = min(self._size + 1, self._max_size)
        self._adds += 1

    def _add_frames(self, p: int, next_obs: dict[str, Tensor], truncated: Tensor) -> None:
        """Row p+1 gets the next frames (the next step's obs, unless an episode ended); truncated envs' last
        frames also go to their side-ring slot. The flags are read on the host: only camera envs, which run
        there, come this way."""
        nxt = (p + 1) % self.T
        for k in self.frames:
            self.obs[k][nxt].copy_(next_obs[k])
        for e in truncated.to("cpu").bool().nonzero().flatten().tolist():
            self._keep_last_frame(p, e, {k: next_obs[k][e] for k in self.frames}, self._adds)

    def _keep_last_frame(self, row: int, e: int, frames: dict[str, Tensor], add: int, broken: bool = False) -> None:
        """Put env e's last frame of the episode ending at `row` (written by add() number `add`) in the side ring,
        refusing to overwrite a slot that a stored transition still reads."""
        slot = self._final_next[e]
        if self._adds + 1 - self._slot_add[e][slot] <= self._max_size:
            if broken:
                raise ValueError(
                    f"replay: env {e}'s obs is not its previous step's next obs, too often to keep the frames "
                    "(each break costs a side-ring slot); add() wants one env step after another")
            raise ValueError(
                f"replay: env {e} ended more episodes by truncation than a time limit of episode_steps="
                f"{self.episode_steps} allows ({len(self._slot_add[e])} among the stored steps); pass the env's "
                "real time limit")
        for k in self.frames:
            self.final_frames[k][slot, e].copy_(frames[k])
        self._final_slot[row, e] = slot
        self._slot_add[e][slot] = add
        self._final_next[e] = (slot + 1) % len(self._slot_add[e])

    def _close_broken_episodes(self, p: int, obs: dict[str, Tensor], stored: dict[str, Tensor]) -> None:
        """An env whose last step did not end its episode but whose new obs is not that step's next observation
        `stored` (the loop reset it, e.g. when a run resumed from a checkpoint) would otherwise lose its next frame:
        keep it in the side ring and mark the step truncated, which also stops n-step windows at the break."""
        q = (p - 1) % self.T
        open_ = ~(self.terminated[q] | self.truncated[q])
        differs = torch.zeros_like(open_)
        for k, v in stored.items():
            differs |= (obs[k].to(self.device) != v).flatten(1).any(1)
        for e in (open_ & differs).to("cpu").nonzero().flatten().tolist():
            self._keep_last_frame(q, e, {k: self.obs[k][p, e] for k in self.frames}, self._adds - 1, broken=True)
            self.truncated[q, e] = True

    def close_broken_episodes(self, obs: dict[str, Tensor]) -> None:
        """Before an `add` of `obs` that may not follow the stored steps (a learner fed chunks by robot actors,
        with gaps between chunks and between intervention runs): close each env's newest step that is still open
        and whose next observation is not `obs`, comparing every group (`add` itself compares only the frames),
        as a truncation whose next frame is kept. A no-op for buffers without frames (their rows keep next_obs)."""
        if self.frames and self._size:
            q = (self._pos - 1) % self.T
            self._close_broken_episodes(self._pos, {k: obs[k].to(v.dtype) for k, v in self.next_obs.items()},
                                        {k: v[q] for k, v in self.next_obs.items()})

    def extend(
        self,
        obs: dict[str, Tensor],
        action: Tensor,
        reward: Tensor,
        next_obs: dict[str, Tensor],
        terminated: Tensor,
        truncated: Tensor,
    ) -> None:
        """Store M consecutive steps of a single-env buffer at once (leading dim M), e.g. a whole dataset.

        Episodes must be contiguous and each one's last step flagged terminated or truncated, as a dataset read
        by ``robot_rl.datasets`` is; if M exceeds the capacity only the newest steps are kept.
        """
        if self.num_envs != 1:
            raise ValueError(f"extend needs a single-env buffer (num_envs=1), this one has {self.num_envs}")
        if self.frames:
            raise ValueError("extend does not take frame groups (datasets of camera frames): add them step by step")
        m = int(action.shape[0])
        self._check_step(m, "one per step", obs, action, reward, next_obs, terminated, truncated)
        keep = slice(max(0, m - self.T), m)
        n = keep.stop - keep.start
        rows = (self._pos + torch.arange(n, device=self.device)) % self.T
        for k in self.obs_spec:
            self.obs[k][rows, 0] = obs[k][keep].to(self.device, self.obs[k].dtype)
            self.next_obs[k][rows, 0] = next_obs[k][keep].to(self.device, self.next_obs[k].dtype)
        self.action[rows, 0] = action[keep].to(self.device, self.action.dtype)
        self.reward[rows, 0] = reward.reshape(m)[keep].to(self.device, self.reward.dtype)
        self.terminated[rows, 0] = terminated.reshape(m)[keep].to(self.device).bool()
        self.truncated[rows, 0] = truncated.reshape(m)[keep].to(self.device).bool()
        self._pos = (self._pos + n) % self.T
        self._size = min(self._size + n, self.T)

    # ----------------------------------------------------------------- sampling

    def sample_indices(
        self, batch_size: int, generator: torch.Generator | None = None
    ) -> tuple[Tensor, Tensor]:
        """Uniform (row, env) indices over all stored transitions, on the buffer's device."""
        if self._size == 0:
            raise ValueError("cannot sample from an empty replay buffer")
        # Rows [0, size) are exactly the filled ones whether or not the buffer has wrapped.
        n = self._size * self.num_envs
        if generator is None:
            flat = torch.randint(n, (batch_size,), device=self.device)
        else:
            # randint requires the generator's own device; move the indices afterwards.
            flat = torch.randint(n, (batch_size,), device=generator.device, generator=generator).to(
                self.device
            )
        rows = flat // self.num_envs
        if self.frames:  # the spare row at the write position is not a transition: count back from it
            rows = (self._pos - self._size + rows) % self.T
        return rows, flat % self.num_envs

    def sample(self, batch_size: int, generator: torch.Generator | None = None) -> Batch:
        return self._gather(*self.sample_indices(batch_size, generator))

    def _gather(self, t_idx: Tensor, e_idx: Tensor) -> Batch:
        """Build the n-step batch for stored transitions ``(t_idx[i], e_idx[i])`` (physical row, env)."""
        if self.n_step == 1:
            last = t_idx
            reward = self.reward[t_idx, e_idx]
            disc = self._gamma_pows[1]
        else:
            T = self.T
            offsets = self._offsets  # [n]
            rows = (t_idx[:, None] + offsets) % T  # [B, n]
            e2 = e_idx[:, None]
            # Steps from t up to and including the newest written row; Python-style % keeps this in [0, T),
            # which is what stops a window from running across the write head into overwritten/unwritten data.
            avail = (self._pos - 1 - t_idx) % T + 1  # [B], >= 1
            done = self.terminated[rows, e2] | self.truncated[rows, e2]
            # A step belongs to the window iff no earlier step of it ended an episode (the ending one is kept).
            ended_before = (done.cumsum(1) - done.long()) > 0
            include = (offsets < avail[:, None]) & ~ended_before  # a prefix mask, always True at j=0
            k = include.sum(1) - 1
            # where() instead of multiply so stale non-finite data in excluded slots cannot leak in.
            step_r = self.reward[rows, e2] * self._gamma_pows[: self.n_step]
            reward = torch.where(include, step_r, torch.zeros_like(step_r)).sum(1)
            last = rows.gather(1, k[:, None]).squeeze(1)
            disc = self._gamma_pows[k + 1]
        discount = disc * (~self.terminated[last, e_idx]).to(torch.float32)
        next_obs = {k_: v[last, e_idx] for k_, v in self.next_obs.items()}
        if self.frames:
            next_obs.update(self._next_frames(last, e_idx))
        return Batch(
            obs={k_: v[t_idx, e_idx] for k_, v in self.obs.items()},
            action=self.action[t_idx, e_idx],
            reward=reward,
            next_obs={k_: next_obs[k_] for k_ in self.obs},
            discount=discount,
        )

    def _next_frames(self, last: Tensor, e_idx: Tensor) -> dict[str, Tensor]:
        """The next frames of transitions (last, e_idx): row last+1's frame, a truncated step's side-ring frame,
        zeros after a terminal step (whose next value the discount of 0 ignores)."""
        terminated, truncated = self.terminated[last, e_idx], self.truncated[last, e_idx]
        slot = self._final_slot[last, e_idx]
        out = {}
        for k in self.frames:
            following = self.obs[k][(last + 1) % self.T, e_idx]
            shape = (-1,) + (1,) * (following.dim() - 1)
            frame = torch.where(truncated.view(shape), self.final_frames[k][slot, e_idx], following)
            out[k] = torch.where(terminated.view(shape), torch.zeros_like(frame), frame)
        return out

    # -------------------------------------------------------------- checkpoints

    def _config(self) -> dict[str, Any]:
        return {
            "capacity": self.capacity,
            "frames": list(self.frames),
            "episode_steps": self.episode_steps,
            "num_envs": self.num_envs,
            "obs_spec": _spec_to_plain(self.obs_spec),
            "action_dim": self.action_dim,
            "gamma": self.gamma,
            "n_step": self.n_step,
        }

    def state_dict(self) -> dict[str, Any]:
        """Filled rows (physical order, on CPU, copied so later adds don't alias) plus position and config."""
        s = self._rows(self._size)

        def cpu(t: Tensor, rows: int = s) -> Tensor:
            return t[:rows].to("cpu", copy=True)

        state = {
            "config": self._config(),
            "pos": self._pos,
            "size": self._size,
            "obs": {k: cpu(v, self._frame_rows(self._size) if k in self.frames else s) for k, v in self.obs.items()},
            "next_obs": {k: cpu(v) for k, v in self.next_obs.items()},
            "action": cpu(self.action),
            "reward": cpu(self.reward),
            "terminated": cpu(self.terminated),
            "truncated": cpu(self.truncated),
        }
        if self.frames:
            state["frames"] = {
                "final_frames": {k: v.to("cpu", copy=True) for k, v in self.final_frames.items()},
                "final_slot": cpu(self._final_slot),
                "final_next": list(self._final_next),
                "slot_add": [list(v) for v in self._slot_add],
                "adds": self._adds,
            }
        return state

    def _rows(self, size: int) -> int:
        """Rows holding `size` transitions, counted from row 0 (all of them once a frame buffer has wrapped)."""
        return self.T if size == self._max_size and self.frames else size

    def _frame_rows(self, size: int) -> int:
        """Rows holding frames: the transitions' and the spare row with the newest next frame."""
        return size + 1 if size < self._max_size else self.T

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore exactly (same physical layout, so the same generator gives the same samples)."""
        cfg = state["config"]
        mine = self._config()
        for key in ("num_envs", "obs_spec", "action_dim", "n_step", "capacity", "gamma", "frames", "episode_steps"):
            theirs = cfg.get(key, [] if key == "frames" else None)
            if key == "obs_spec" and theirs is not None:
                # Tuples may come back as lists depending on the serialiser; compare structurally.
                theirs = {n: (list(s), str(d)) for n, (s, d) in theirs.items()}
                ours: Any = {n: (list(s), d) for n, (s, d) in mine[key].items()}
            else:
                ours = mine[key]
            if theirs != ours:
                raise ValueError(
                    f"replay buffer config mismatch on {key!r}: checkpoint has {theirs!r}, buffer has {ours!r}"
                )

        size, pos = int(state["size"]), int(state["pos"])
        if not (0 <= size <= self._max_size and 0 <= pos < self.T and (size == self._max_size or pos == size)):
            raise ValueError(f"inconsistent replay buffer state: size={size}, pos={pos}, T={self.T}")
        rows, frame_rows = self._rows(size), self._frame_rows(size)

        def put(dst: Tensor, src: Tensor, name: str, n: int = rows) -> None:
            if tuple(src.shape) != (n, *dst.shape[1:]):
                raise ValueError(f"{name}: checkpoint shape {tuple(src.shape)} != {(n, *dst.shape[1:])}")
            dst[:n].copy_(src)
            dst[n:].zero_()

        for k in self.obs_spec:
            put(self.obs[k], state["obs"][k], f"obs[{k!r}]", frame_rows if k in self.frames else rows)
            if k in self.next_obs:
                put(self.next_obs[k], state["next_obs"][k], f"next_obs[{k!r}]")
        if self.frames:
            side = state["frames"]
            for k in self.frames:
                put(self.final_frames[k], side["final_frames"][k], f"final_frames[{k!r}]",
                    self.final_frames[k].shape[0])
            put(self._final_slot, side["final_slot"], "final_slot")
            self._final_next = [int(v) for v in side["final_next"]]
            self._slot_add = [[int(v) for v in row] for row in side["slot_add"]]
            self._adds = int(side["adds"])
        # put() zeroes the rows past the filled ones: they are never read (sampling and windows stay within
        # filled rows), but a loaded buffer is then indistinguishable from a freshly filled one.
        put(self.action, state["action"], "action")
        put(self.reward, state["reward"], "reward")
        put(self.terminated, state["terminated"], "terminated")
        put(self.truncated, state["truncated"], "truncated")
        self._size, self._pos = size, pos


PRIOR_FRACTION_RANGE = "[0, 1)"  # what every `prior_fraction` setting accepts (0: online data only)


def prior_fraction_ok(fraction: float) -> bool:
    """Whether `fraction` is a valid `prior_fraction`: in [0, 1), 0 meaning no prior data in the batches."""
    return 0.0 <= fraction < 1.0


def prior_rows(prior: ReplayBuffer | None, batch_size: int, prior_fraction: float) -> int:
    """How many leading rows of each `sample_mixed` minibatch come from `prior`: 0 without prior data, else
    max(1, round(batch_size * prior_fraction))."""
    if prior is None or len(prior) == 0 or prior_fraction == 0.0:
        return 0
    return max(1, round(batch_size * prior_fraction))


def sample_mixed(
    online: ReplayBuffer,
    prior: ReplayBuffer | None,
    batch_size: int,
    utd: int,
    prior_fraction: float,
    generator: torch.Generator | None = None,
) -> Batch:
    """`utd` minibatches of `batch_size`, shaped [utd, batch_size]: the one RLPD prior/online mixer.

    Without a prior buffer (or an empty one, or `prior_fraction` 0) every row is online. Otherwise each of the
    `utd` minibatches takes its first `prior_rows(prior, batch_size, prior_fraction)` rows from `prior` and the rest
    from `online`, so every update sees both in a fixed ratio. `prior_fraction` is in `PRIOR_FRACTION_RANGE`.
    """
    n_prior = prior_rows(prior, batch_size, prior_fraction)
    if n_prior == 0:
        return online.sample(batch_size * utd, generator).reshape(utd, batch_size)
    n_online = batch_size - n_prior
    prior_batch = prior.sample(n_prior * utd, generator).reshape(utd, n_prior)
    if n_online == 0:
        return prior_batch
    online_batch = online.sample(n_online * utd, generator).reshape(utd, n_online)
    return Batch.cat([prior_batch, online_batch], dim=1)
