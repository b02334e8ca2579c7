"""`read_dataset`: a LeRobotDataset v3.0 directory (ours or recorded by LeRobot) into a `Dataset`, whose
`Transitions` are the replay's, and Monte-Carlo returns of its episodes."""

from __future__ import annotations

import math
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

from robot_rl.datasets.format import (
    ACTION,
    DATA_PATH,
    EPISODES_DIR,
    IMAGE_PREFIX,
    NEXT_STATE,
    STATE,
    TASKS_PATH,
    DatasetError,
    camera_group,
    load_info,
    read_episode_rows,
    read_tasks,
)
from robot_rl.datasets.video import read_video_frames
from robot_rl.transitions import Transitions


@dataclass
class EpisodesMeta:
    """Per-episode metadata, in episode order: index, length, first global frame index, task string."""

    index: Tensor
    length: Tensor
    start: Tensor
    task: list[str]

    def __len__(self) -> int:
        return len(self.task)


@dataclass
class Dataset:
    """A dataset as read: its frames as `Transitions` in the replay's layout (``obs``: ``state`` float32 [M, D] and,
    read with ``load_images=True``, each video as a camera group, uint8 [M, H, W, 3]; ``next_obs``: ``state`` only,
    the next frames being the following rows'), episodes concatenated in order, beside what only a recording has:
    ``success`` / ``intervention`` bool [M], ``episode_index`` / ``frame_index`` int64 [M], the episodes' metadata,
    ``meta/info.json`` as ``info`` and the task list (``task_index`` -> string) as ``tasks``."""

    transitions: Transitions
    success: Tensor
    intervention: Tensor
    episode_index: Tensor
    frame_index: Tensor
    episodes: EpisodesMeta
    info: dict[str, Any]
    tasks: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return self.transitions.size


def read_dataset(
    root: str | os.PathLike[str],
    *,
    load_images: bool = False,
    state_key: str = STATE,
    action_key: str = ACTION,
) -> Dataset:
    """Read a LeRobotDataset v3.0 directory into a ``Dataset`` (torch tensors on CPU); a video feature
    ``observation.images.<camera>`` becomes the camera group ``pixels/<camera>`` (`format.camera_group`), a video
    named otherwise keeps its feature key.

    Only episodes listed in ``meta/episodes`` are read: the episodes table is the authority (``DatasetWriter``
    changes it together with ``info.json``; where it cannot, ``info.json`` may trail it after a kill until
    ``repair``), and a killed writer's leftovers, such as a data file after the last listed one, are ignored.
    An episode index listed twice is an error. Within a data file rows are matched to episodes by
    ``episode_index`` and ordered by ``frame_index``, so files holding several episodes (as LeRobot writes
    them) work too.

    Datasets recorded elsewhere usually lack our RL columns; then, per frame:

    * ``next_obs``: ``next.observation.state`` if present, else the following frame's state in the same
      episode; the last frame of an episode has no successor and gets its own state (an approximation);
    * ``terminated``: ``next.terminated`` if present, else ``next.done``, else False;
    * ``truncated``: ``next.truncated`` if present, else True on an episode's last frame unless it is
      terminated (a recorded episode that did not say it ended is treated as cut off);
    * ``reward``: ``next.reward`` if present, else 0; ``success`` / ``intervention``: ``next.success`` /
      ``intervention`` if present, else False.

    Raises ``DatasetError`` (a ``ValueError``) for a missing, damaged or non-v3.0 dataset.
    """
    root = Path(root)
    info = load_info(root)
    features: dict[str, dict[str, Any]] = info["features"]
    for key in (state_key, action_key):
        if key not in features:
            raise DatasetError(
                f"{root}: has no {key!r} feature (features: {sorted(features)}); pass state_key/"
                "action_key naming the columns to use"
            )
    rows = read_episode_rows(root)
    tasks = read_tasks(root) if (root / TASKS_PATH).exists() else []
    if not rows and int(info.get("total_episodes", 0)) > 0:
        raise DatasetError(
            f"{root}: info.json lists {info['total_episodes']} episodes but {EPISODES_DIR} has none; "
            "the dataset is damaged (re-record or restore meta/)"
        )
    twice = sorted(e for e, n in Counter(int(r["episode_index"]) for r in rows).items() if n > 1)
    if twice:  # the frames of both copies would be read as one episode
        raise DatasetError(
            f"{root}: {EPISODES_DIR} lists episode {twice[0]} more than once (a recording resumed while "
            "info.json counted fewer episodes than the episodes table); keep the episodes before it "
            "(LeRobot's delete_episodes) or re-record"
        )

    wanted = [
        k
        for k in (
            state_key,
            action_key,
            "next.reward",
            "next.done",
            "next.terminated",
            "next.truncated",
            "next.success",
            NEXT_STATE,
            "intervention",
        )
        if k in features
    ]
    data_path = info.get("data_path", DATA_PATH)
    per_file: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in rows:
        per_file.setdefault((int(r["data/chunk_index"]), int(r["data/file_index"])), []).append(r)

    pieces: dict[int, dict[str, np.ndarray]] = {}
    for (chunk, file), eps in per_file.items():
        path = root / data_path.format(chunk_index=chunk, file_index=file)
        try:
            table = pq.read_table(path, columns=[*wanted, "episode_index", "frame_index"])
        except FileNotFoundError:
            raise DatasetError(
                f"{path}: listed in {EPISODES_DIR} but missing; the dataset is damaged "
                "(re-record or restore data/)"
            ) from None
        except Exception as exc:
            raise DatasetError(
                f"{path}: unreadable ({exc}); the dataset is damaged (re-record or restore it)"
            ) from None
        cols = {
            k: _column_to_numpy(k, table.column(k), features.get(k, {"shape": [1]}), path)
            for k in table.column_names
        }
        ep_col = cols["episode_index"]
        for r in eps:
            e = int(r["episode_index"])
            sel = np.nonzero(ep_col == e)[0]
            sel = sel[np.argsort(cols["frame_index"][sel], kind="stable")]
            if len(sel) != int(r["length"]):
                raise DatasetError(
                    f"{path}: episode {e} has {len(sel)} frames, {EPISODES_DIR} says {r['length']}; "
                    "the dataset is damaged"
                )
            pieces[e] = {k: v[sel] for k, v in cols.items()}

    order = [int(r["episode_index"]) for r in rows]
    lengths = np.array([int(r["length"]) for r in rows], dtype=np.int64)

    def cat(key: str) -> np.ndarray:
        return np.concatenate([pieces[e][key] for e in order]) if order else np.zeros((0,))

    d = int(features[state_key]["shape"][0])
    a = int(features[action_key]["shape"][0])
    m = int(lengths.sum())
    obs = cat(state_key).reshape(m, d).astype(np.float32)
    action = cat(action_key).reshape(m, a).astype(np.float32)
    last = np.zeros(m, dtype=bool)
    if m:
        last[np.cumsum(lengths) - 1] = True
    episode_index = np.repeat(np.array(order, dtype=np.int64), lengths)
    frame_index = cat("frame_index").astype(np.int64) if m else np.zeros(0, dtype=np.int64)

    def flag(key: str, default: np.ndarray | None = None) -> np.ndarray:  # else `default`, else all False (its own)
        return cat(key).reshape(m).astype(bool) if key in features else np.zeros(m, bool) if default is None else default

    if NEXT_STATE in features:
        next_obs = cat(NEXT_STATE).reshape(m, d).astype(np.float32)
    else:
        next_obs = obs.copy()
        if m:
            next_obs[:-1][~last[:-1]] = obs[1:][~last[:-1]]
    terminated = flag("next.terminated", flag("next.done"))
    truncated = flag("next.truncated", last & ~terminated)
    reward = cat("next.reward").reshape(m).astype(np.float32) if "next.reward" in features else np.zeros(m, np.float32)
    images = {camera_group(k.removeprefix(IMAGE_PREFIX)) if k.startswith(IMAGE_PREFIX) else k:
              torch.from_numpy(read_video_frames(root, info, rows, k))
              for k, ft in features.items() if load_images and ft["dtype"] == "video"}
    episodes = EpisodesMeta(
        index=torch.tensor(order, dtype=torch.int64),
        length=torch.from_numpy(lengths),
        start=torch.tensor([int(r["dataset_from_index"]) for r in rows], dtype=torch.int64),
        task=[(list(r.get("tasks") or [""]) or [""])[0] for r in rows],
    )
    t = torch.from_numpy
    return Dataset(
        transitions=Transitions({"state": t(obs), **images}, t(action), t(reward), {"state": t(next_obs)},
                                t(terminated), t(truncated)),
        success=t(flag("next.success")), intervention=t(flag("intervention")),
        episode_index=t(episode_index), frame_index=t(frame_index), episodes=episodes, info=info, tasks=tasks,
    )


def _column_to_numpy(name: str, column: pa.ChunkedArray, ft: Mapping[str, Any], path: Path) -> np.ndarray:
    arr = column.combine_chunks()
    shape = tuple(int(s) for s in ft.get("shape", [1]))
    if (
        pa.types.is_list(arr.type)
        or pa.types.is_large_list(arr.type)
        or pa.types.is_fixed_size_list(arr.type)
    ):
        flat = arr.flatten().to_numpy(zero_copy_only=False)
        width = int(np.prod(shape))
        if len(flat) != len(arr) * width:
            raise DatasetError(f"{path}: column {name!r} does not match its declared shape {list(shape)}")
        return flat.reshape(len(arr), width) if width > 1 else flat
    return arr.to_numpy(zero_copy_only=False)


def monte_carlo_returns(
    reward: Tensor | np.ndarray,
    episode_index: Tensor | np.ndarray,
    terminated: Tensor | np.ndarray | None = None,
    gamma: float = 0.99,
) -> Tensor:
    """Discounted return-to-go of every frame within its episode: ``G_t = r_t + gamma * G_{t+1}``.

    Frames must be grouped by episode in time order (as ``read_dataset`` returns them). The recursion stops
    at an episode boundary and after a ``terminated`` frame; a truncated episode simply sums the rewards it
    has (no bootstrap - that is what Cal-QL's Monte-Carlo lower bound uses). Returns float32 [M].
    """
    r = reward.detach().cpu().numpy() if isinstance(reward, Tensor) else np.asarray(reward)
    e = (
        episode_index.detach().cpu().numpy()
        if isinstance(episode_index, Tensor)
        else np.asarray(episode_index)
    )
    r = r.astype(np.float64).reshape(-1)
    e = e.reshape(-1)
    if len(e) != len(r):
        raise ValueError(f"reward has {len(r)} entries, episode_index {len(e)}")
    if terminated is None:
        term = np.zeros(len(r), dtype=bool)
    else:
        term = terminated.detach().cpu().numpy() if isinstance(terminated, Tensor) else np.asarray(terminated)
        term = term.reshape(-1).astype(bool)
    if not 0.0 <= gamma <= 1.0 or math.isnan(gamma):
        raise ValueError(f"gamma must be in [0, 1], got {gamma}")
    cont = np.empty(len(r), dtype=np.float64)
    if len(r):
        cont[:-1] = (e[1:] == e[:-1]) & ~term[:-1]
        cont[-1] = 0.0
    out = np.empty(len(r), dtype=np.float64)
    g = 0.0
    for t in range(len(r) - 1, -1, -1):
        g = r[t] + gamma * cont[t] * g
        out[t] = g
    return torch.from_numpy(out.astype(np.float32))
