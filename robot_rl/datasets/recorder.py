"""Record batched environment steps into a ``DatasetWriter``, one episode per sub-env at a time.

The batched env contract (``robot_rl.envs.core.BatchedEnv``) autoresets inside ``step``: when sub-env i finishes, the
observation returned for it already belongs to its next episode and ``info["final_obs"]`` holds the true
last one. The recorder buffers each sub-env's current episode on the CPU, uses ``final_obs`` as the
``next.observation.state`` of the episode's last frame, and hands the episode to the writer the moment it
ends, so a crash loses at most the episodes still in progress (which never finished anyway).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from torch import Tensor

from robot_rl.datasets.format import CAMERA_GROUP_PREFIX, IMAGE_PREFIX, NEXT_STATE, STATE
from robot_rl.datasets.writer import DatasetWriter

__all__ = ["EpisodeRecorder"]


def _np(x: Any, n: int, dtype: Any, name: str) -> np.ndarray:
    arr = x.detach().to("cpu").numpy() if isinstance(x, Tensor) else np.asarray(x)
    arr = arr.reshape(n, *arr.shape[1:]) if arr.ndim else np.full(n, arr)
    if arr.shape[0] != n:
        raise ValueError(f"{name}: expected a leading batch dim of {n}, got shape {list(arr.shape)}")
    return arr.astype(dtype, copy=False) if dtype is not None else arr


class EpisodeRecorder:
    """Buffer the episodes of ``num_envs`` parallel sub-envs and write each one when it ends.

    Call ``record`` once per env step with the observation the action was taken in (``obs``, the one
    returned by the *previous* ``step`` / ``reset``), the action and the step's results. ``obs_keys`` maps
    env observation groups to dataset features; by default ``"state"`` -> ``observation.state`` and, for each
    declared ``observation.images.<name>`` feature, the group ``<name>`` (uint8 [N, H, W, 3]), or where the
    observation has none, the camera group ``pixels/<name>`` (the inverse of ``format.camera_feature``).

    Columns filled when the writer declares them: ``next.reward``, ``next.done`` (terminated or truncated),
    ``next.terminated``, ``next.truncated``, ``next.success`` (``info["success"]``, else False),
    ``next.observation.state`` (the next ``obs`` for ongoing envs, ``info["final_obs"]`` on the last frame)
    and ``intervention`` (``info["intervention"]``, else False). ``next_obs`` may be passed to ``record``
    instead of relying on the next call's ``obs``; either way ``final_obs`` wins where an episode ended.
    """

    def __init__(
        self,
        writer: DatasetWriter,
        num_envs: int,
        task: str | None = None,
        *,
        obs_keys: Mapping[str, str] | None = None,
    ) -> None:
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}")
        self.writer = writer
        self.num_envs = int(num_envs)
        self.task = task
        feats = writer.features
        default_keys = obs_keys is None
        if obs_keys is None:
            obs_keys = {"state": STATE} if STATE in feats else {}
            obs_keys = {
                **obs_keys,
                **{k[len(IMAGE_PREFIX) :]: k for k in feats if k.startswith(IMAGE_PREFIX)},
            }
        unknown = [f for f in obs_keys.values() if f not in feats]
        if unknown:
            raise ValueError(f"obs_keys map to undeclared feature(s) {unknown}")
        self.obs_keys = dict(obs_keys)
        # Default camera groups are settled by the first observation: <name>, else pixels/<name>.
        self._resolve_cameras = default_keys
        self._state_group = next((g for g, f in self.obs_keys.items() if f == STATE), None)
        if NEXT_STATE in feats and self._state_group is None:
            raise ValueError(f"{NEXT_STATE} is declared but no observation group maps to {STATE}")
        self._buffers: list[dict[str, list[np.ndarray]]] = [self._empty() for _ in range(self.num_envs)]
        self.episodes_written: list[int] = []
        self._closed = False

    def _empty(self) -> dict[str, list[np.ndarray]]:
        return {k: [] for k in self.writer.features}

    def record(
        self,
        obs: Mapping[str, Tensor],
        action: Tensor,
        reward: Tensor,
        terminated: Tensor,
        truncated: Tensor,
        info: Mapping[str, Any],
        next_obs: Mapping[str, Tensor] | None = None,
        active: Tensor | np.ndarray | None = None,
    ) -> list[int]:
        """Add one batched step; return the dataset indices of the episodes this step finished and wrote.

        ``active`` (bool [N], default all) leaves out sub-envs whose current episode is not to be recorded, e.g.
        when only a fixed number of episodes is wanted; switch an env's flag only at its episode boundaries.
        """
        if self._closed:
            raise RuntimeError("recorder is closed")
        n = self.num_envs
        feats = self.writer.features
        term = _np(terminated, n, bool, "terminated")
        trunc = _np(truncated, n, bool, "truncated")
        done = term | trunc
        if self._resolve_cameras:
            self._resolve_cameras = False
            self.obs_keys = {(CAMERA_GROUP_PREFIX + g if f.startswith(IMAGE_PREFIX) and g not in obs
                              and CAMERA_GROUP_PREFIX + g in obs else g): f for g, f in self.obs_keys.items()}
        groups = {g: _np(obs[g], n, None, f"obs[{g!r}]") for g in self.obs_keys}
        step = {
            "action": _np(action, n, np.float32, "action"),
            "next.reward": _np(reward, n, np.float32, "reward"),
            "next.done": done,
            "next.terminated": term,
            "next.truncated": trunc,
            "next.success": _np(info["success"], n, bool, "success")
            if "success" in info
            else np.zeros(n, bool),
            "intervention": (
                _np(info["intervention"], n, bool, "intervention")
                if "intervention" in info
                else np.zeros(n, bool)
            ),
        }
        next_state = None
        if NEXT_STATE in feats:
            g = self._state_group
            assert g is not None
            if next_obs is not None:
                next_state = _np(next_obs[g], n, np.float32, f"next_obs[{g!r}]").copy()
            if done.any():
                final = info.get("final_obs")
                if final is None or g not in final:
                    raise ValueError(
                        f"an episode ended but info['final_obs'][{g!r}] is missing; the env must report "
                        "the true last observation of finished sub-envs"
                    )
                final_np = _np(final[g], n, np.float32, f"final_obs[{g!r}]")
                if next_state is None:
                    next_state = np.zeros_like(final_np)
                next_state[done] = final_np[done]

        keep = np.ones(n, bool) if active is None else _np(active, n, bool, "active")
        written: list[int] = []
        for i in range(n):
            if not keep[i]:
                continue
            buf = self._buffers[i]
            if NEXT_STATE in feats and self._state_group is not None:
                # this env's previous frame is still waiting for its next state: it is this step's obs
                if len(buf[NEXT_STATE]) < len(buf["action"]):
                    buf[NEXT_STATE].append(np.array(groups[self._state_group][i], dtype=np.float32))
            for g, f in self.obs_keys.items():
                buf[f].append(np.array(groups[g][i]))
            for key, val in step.items():
                if key in feats:
                    buf[key].append(np.array(val[i]))
            if next_state is not None and (next_obs is not None or done[i]):
                buf[NEXT_STATE].append(next_state[i].copy())
            if done[i]:
                written.append(self._flush(i))
        self.episodes_written.extend(written)
        return written

    def _flush(self, i: int) -> int:
        buf = self._buffers[i]
        frames = {k: np.stack(v) for k, v in buf.items() if v}
        self._buffers[i] = self._empty()
        return self.writer.write_episode(frames, task=self.task)

    @property
    def pending_frames(self) -> list[int]:
        """Frames buffered per sub-env for episodes that have not ended yet."""
        return [len(b["action"]) for b in self._buffers]

    def close(self) -> int:
        """Discard unfinished episodes (they never ended, so they are not data) and return how many frames
        were dropped; finished episodes are already committed by the writer."""
        dropped = sum(self.pending_frames)
        self._buffers = [self._empty() for _ in range(self.num_envs)]
        self._closed = True
        return dropped

    def __enter__(self) -> EpisodeRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
