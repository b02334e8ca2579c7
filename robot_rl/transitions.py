"""`Transitions`: the one type for a batch of transitions, in the replay's layout, so the dataset reader, prior data,
the HIL learner's chunks and the trainer hand each other the same thing and no stage converts it again.

Observations are dicts of named groups: ``state`` float32 [n, D] and camera groups (``pixels/<camera>``: uint8
[n, H, W, 3], or a frozen backbone's cached features). ``next_obs`` holds the same groups, except where the next
frames are the following rows' own (a dataset, whose recording keeps no frame twice, as a frame replay stores
them): there it holds the non-camera groups only. `from_chunk` is the one conversion of a HIL chunk (numpy arrays on
the wire) into tensors."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import NamedTuple

import numpy as np
import torch
from torch import Tensor

Obs = dict[str, Tensor]

FRAME_PREFIXES = ("obs/", "next_obs/")  # + a camera group: a chunk's frames of obs / next_obs, uint8 [n, H, W, 3]


def frame_keys(group: str) -> tuple[str, str]:
    """The chunk keys of a camera group's frames: (``obs/<group>``, ``next_obs/<group>``)."""
    return FRAME_PREFIXES[0] + group, FRAME_PREFIXES[1] + group


def cat_obs(parts: Sequence[Obs]) -> Obs:
    """Observation dicts with the same groups, one after the other."""
    return {k: torch.cat([p[k] for p in parts]) for k in parts[0]}


class Transitions(NamedTuple):
    """Transitions [n] (module docstring), in `ReplayBuffer.add`'s argument order, so ``buffer.add(*t)`` stores
    them."""

    obs: Obs
    action: Tensor
    reward: Tensor
    next_obs: Obs
    terminated: Tensor
    truncated: Tensor

    @property
    def size(self) -> int:
        """How many transitions (``len`` is the tuple's: 6)."""
        return int(self.reward.shape[0])

    @property
    def cameras(self) -> dict[str, Tensor]:
        """The observation groups other than ``state``: the camera frames (or their cached features)."""
        return {k: v for k, v in self.obs.items() if k != "state"}

    def rows(self, index: slice | Tensor) -> Transitions:
        """The transitions at `index` (rows of every tensor, observation groups included)."""
        return Transitions(*({k: v[index] for k, v in x.items()} if isinstance(x, dict) else x[index] for x in self))

    @staticmethod
    def cat(parts: Sequence[Transitions]) -> Transitions:
        """Transitions with the same groups, one after the other."""
        return Transitions(*(cat_obs(x) if isinstance(x[0], dict) else torch.cat(x) for x in zip(*parts, strict=True)))


def from_chunk(chunk: Mapping[str, np.ndarray], cameras: Iterable[str] = ()) -> Transitions:
    """A HIL chunk (``obs``/``next_obs`` states, `frame_keys` frames of `cameras`, actions, rewards, flags) as
    tensors. Copies: arrays that arrive through Ray are read-only views of its object store, which torch.from_numpy
    warns about; a chunk is small, so the copy costs microseconds."""
    t = {k: torch.tensor(v) for k, v in chunk.items()}
    groups = tuple(cameras)
    return Transitions({"state": t["obs"], **{g: t[frame_keys(g)[0]] for g in groups}}, t["action"], t["reward"],
                       {"state": t["next_obs"], **{g: t[frame_keys(g)[1]] for g in groups}}, t["terminated"],
                       t["truncated"])
