"""Episodes on disk in the LeRobotDataset v3.0 layout: a crash-safe writer and a reader into torch tensors.

Layout (``root`` is the dataset directory; ``CCC`` = chunk index, ``FFF`` = file index, both 3 digits)::

    meta/info.json                          schema, fps, totals, path templates (codebase_version "v3.0")
    meta/stats.json                         per feature: min / max / mean / std / count over all frames
    meta/tasks.parquet                      task string (pandas index "task") -> task_index
    meta/episodes/chunk-000/file-000.parquet  one row per episode: indices into data/videos + its stats
    data/chunk-CCC/file-FFF.parquet         frames: features + timestamp, frame_index, episode_index, index,
                                            task_index
    videos/<video_key>/chunk-CCC/file-FFF.mp4   one camera stream, H.264 (libx264) yuv420p

This writer stores **one episode per data file and per video file**: episode ``e`` lives in
``file_index = e % chunks_size`` of ``chunk_index = e // chunks_size`` (and its videos start at
``from_timestamp = 0``). v3.0 allows several episodes per file (the episodes table says where each one
starts); LeRobot itself moves to a new file when a file grows past ``data_files_size_in_mb`` or when a
recording is resumed, so files holding a single episode are an ordinary v3.0 dataset. The reader handles
both, so it also reads datasets recorded by LeRobot.

Frame semantics (the LeRobot convention, which is also the RL one): row ``t`` holds ``observation.*`` at
time t, the ``action`` taken there, and ``next.*`` columns describing what that action led to
(``next.reward``, ``next.done``). We add ``next.terminated`` / ``next.truncated`` (bootstrap or not),
``next.success``, ``next.observation.state`` (the true next observation, so the last frame of a
time-limited episode can be bootstrapped) and ``intervention`` (a human took over at this frame). Extra
columns are ordinary features in v3.0.

Crash safety (a recorder may be SIGKILLed at any moment):

* Every file is written under a temporary name in its final directory (``.<name>.tmp-<pid>``, which no
  ``*.parquet`` / ``*.mp4`` glob matches), flushed and fsync'ed, then ``os.replace``'d into place and the
  directory fsync'ed. A file is therefore either absent or complete, never half-written.
* Per episode the order is: videos, data parquet, ``tasks.parquet``, ``stats.json``, then the episodes table
  (**the commit point**), then ``info.json``. ``read_dataset`` trusts the episodes table and ignores files it
  does not list, so after a kill the dataset reads back as exactly the episodes whose commit finished.
* What a kill can leave behind: temp files, and for an episode killed between its data file and its commit,
  a complete data/video file that no episode row points to (plus ``info.json`` / ``stats.json`` one episode
  ahead or behind the table). ``repair(root)`` - which ``DatasetWriter(..., resume=True)`` runs - deletes
  those files and rewrites info/stats from the table, so LeRobot (which globs ``data/*/*.parquet``) sees a
  consistent dataset too.
* One writer per dataset at a time; there is no lock.

What was verified against LeRobot's sources (huggingface/lerobot, read through public code search; we learn
the format only, no code is copied): ``src/lerobot/datasets/utils.py`` - path templates
(``DEFAULT_DATA_PATH`` / ``DEFAULT_VIDEO_PATH`` / ``DEFAULT_EPISODES_PATH`` / ``DEFAULT_TASKS_PATH``),
``DEFAULT_FEATURES`` (timestamp float32, frame_index / episode_index / index / task_index int64, shape [1]),
``create_empty_dataset_info`` (info keys, chunks_size 1000, data 100 MB, video 500 MB), how feature shapes
map to parquet columns (shape [1] -> scalar column, [D] -> fixed-length list), tasks stored as a pandas frame
indexed by task string with a ``task_index`` column, ``update_chunk_file_indices``;
``src/lerobot/datasets/lerobot_dataset.py`` (CODEBASE_VERSION "v3.0") - episodes table columns
(``episode_index``, ``tasks`` list, ``length``, ``dataset_from_index`` / ``dataset_to_index``,
``data/chunk_index`` / ``data/file_index``, ``videos/<key>/{chunk_index,file_index,from_timestamp,
to_timestamp}``, ``meta/episodes/{chunk_index,file_index}``, flattened ``stats/<feature>/<stat>``),
``splits {"train": "0:N"}``, video frames looked up at ``from_timestamp + timestamp``, resumed recordings
starting a new file; ``src/lerobot/datasets/compute_stats.py`` - stats keys min/max/mean/std/count (count
shape [1]), images per channel shaped [3,1,1] in [0, 1] over sampled frames, aggregation by count-weighted
mean and pooled variance; ``src/lerobot/datasets/video_utils.py`` - the ``info`` block of video features
(``video.height``, ``video.width``, ``video.codec``, ``video.pix_fmt``, ``video.is_depth_map``,
``video.fps``, ``video.channels``, ``has_audio``); ``src/lerobot/datasets/v30/convert_dataset_v21_to_v30.py``
- non-video features carry an ``fps`` key, ``total_chunks`` / ``total_videos`` are gone in v3.0.
Not verified by running LeRobot itself (it is not a dependency here).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from torch import Tensor

CODEBASE_VERSION = "v3.0"
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILES_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILES_SIZE_IN_MB = 500

INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"

STATE = "observation.state"
ACTION = "action"
IMAGE_PREFIX = "observation.images."
NEXT_STATE = "next.observation.state"

# Columns every v3.0 dataset has; the writer fills them, callers never pass them (timestamp optionally).
_DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
_NUMERIC_DTYPES = {"float32", "float64", "int32", "int64", "bool"}
_ARROW_TYPES = {
    "float32": pa.float32(),
    "float64": pa.float64(),
    "int32": pa.int32(),
    "int64": pa.int64(),
    "bool": pa.bool_(),
}
_TMP_MARK = ".tmp-"
_STATS_KEYS = ("min", "max", "mean", "std", "count")
_MAX_STAT_FRAMES = 100  # image stats: at most this many frames per episode, like LeRobot's sampling


class DatasetError(ValueError):
    """A dataset on disk is missing, damaged or incompatible; the message names the path and the remedy."""


# --------------------------------------------------------------------------------------------- features


def transition_features(
    state_dim: int,
    action_dim: int,
    *,
    images: Mapping[str, tuple[int, int]] | None = None,
    state_names: Sequence[str] | None = None,
    action_names: Sequence[str] | None = None,
    rl_columns: bool = True,
) -> dict[str, dict[str, Any]]:
    """Feature declarations for RL transitions, in the ``info.json`` form LeRobot uses.

    ``images`` maps a camera name to ``(height, width)``; each becomes ``observation.images.<name>``, an
    RGB uint8 stream stored as MP4. With ``rl_columns`` (default) the RL columns are declared too:
    ``next.reward`` float32, ``next.done`` / ``next.terminated`` / ``next.truncated`` / ``next.success``
    bool, ``next.observation.state`` float32 [state_dim] and ``intervention`` bool.
    """
    feats: dict[str, dict[str, Any]] = {
        STATE: {
            "dtype": "float32",
            "shape": [int(state_dim)],
            "names": list(state_names) if state_names is not None else None,
        },
        ACTION: {
            "dtype": "float32",
            "shape": [int(action_dim)],
            "names": list(action_names) if action_names is not None else None,
        },
    }
    for name, (h, w) in (images or {}).items():
        feats[IMAGE_PREFIX + name] = {
            "dtype": "video",
            "shape": [int(h), int(w), 3],
            "names": ["height", "width", "channels"],
        }
    if rl_columns:
        feats["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
        for key in ("next.done", "next.terminated", "next.truncated", "next.success"):
            feats[key] = {"dtype": "bool", "shape": [1], "names": None}
        feats[NEXT_STATE] = {"dtype": "float32", "shape": [int(state_dim)], "names": feats[STATE]["names"]}
        feats["intervention"] = {"dtype": "bool", "shape": [1], "names": None}
    return feats


def _normalise_features(features: Mapping[str, Any], fps: int) -> dict[str, dict[str, Any]]:
    """Validate user features and return the full ``info.json`` feature dict (defaults appended)."""
    if not features:
        raise ValueError("features must declare at least one feature, e.g. transition_features(D, A)")
    out: dict[str, dict[str, Any]] = {}
    for key, ft in features.items():
        if key in _DEFAULT_FEATURES:
            continue  # written by us; accept them being declared (as LeRobot's info.json does)
        if "/" in key:
            raise ValueError(f"feature name {key!r} must not contain '/' (the episodes table uses it)")
        if isinstance(ft, tuple) and len(ft) == 2:
            ft = {"dtype": ft[0], "shape": ft[1]}
        if not isinstance(ft, Mapping) or "dtype" not in ft or "shape" not in ft:
            raise ValueError(f"feature {key!r} must be a dict with 'dtype' and 'shape', got {ft!r}")
        dtype = str(ft["dtype"])
        shape = [int(s) for s in (ft["shape"] if isinstance(ft["shape"], Sequence) else [ft["shape"]])]
        entry: dict[str, Any] = {"dtype": dtype, "shape": shape, "names": ft.get("names")}
        if dtype == "video":
            if len(shape) != 3 or shape[2] != 3:
                raise ValueError(f"video feature {key!r} needs shape [H, W, 3], got {shape}")
            if shape[0] % 2 or shape[1] % 2:
                raise ValueError(
                    f"video feature {key!r}: H.264 yuv420p needs even height and width, got {shape}"
                )
            if entry["names"] is None:
                entry["names"] = ["height", "width", "channels"]
            entry["info"] = {
                "video.height": shape[0],
                "video.width": shape[1],
                "video.codec": "h264",
                "video.pix_fmt": "yuv420p",
                "video.is_depth_map": False,
                "video.fps": int(fps),
                "video.channels": 3,
                "has_audio": False,
            }
        elif dtype in _NUMERIC_DTYPES:
            if len(shape) != 1 or shape[0] < 1:
                raise ValueError(
                    f"feature {key!r}: only shapes [1] (scalar) or [D] are supported, got {shape}"
                )
            entry["fps"] = int(fps)
        else:
            raise ValueError(
                f"feature {key!r}: dtype {dtype!r} not supported; use one of "
                f"{sorted(_NUMERIC_DTYPES | {'video'})}"
            )
        out[key] = entry
    for key, ft in _DEFAULT_FEATURES.items():
        out[key] = {**ft, "shape": list(ft["shape"]), "fps": int(fps)}
    return out


def _user_features(features: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in features.items() if k not in _DEFAULT_FEATURES}


def _comparable(features: Mapping[str, dict[str, Any]]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in _user_features(features).items()}


# ------------------------------------------------------------------------------------------ atomic I/O


def _tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}")


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _commit(tmp: Path, path: Path, fsync: bool) -> None:
    """fsync ``tmp``, rename it onto ``path`` and fsync the directory: ``path`` is old or new, never torn."""
    if fsync:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


def _write_bytes(path: Path, data: bytes, fsync: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    with open(tmp, "wb") as f:
        f.write(data)
    _commit(tmp, path, fsync)


def _write_json(path: Path, obj: Any, fsync: bool) -> None:
    _write_bytes(path, (json.dumps(obj, indent=4, ensure_ascii=False) + "\n").encode("utf-8"), fsync)


def _write_table(path: Path, table: pa.Table, fsync: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    pq.write_table(table, tmp, compression="snappy")
    _commit(tmp, path, fsync)


def _is_tmp(path: Path) -> bool:
    return path.name.startswith(".") and _TMP_MARK in path.name


# --------------------------------------------------------------------------------------------- stats


def _feature_stats(array: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-episode stats of a [T] or [T, D] column: each stat shaped [1] or [D]."""
    a = array.reshape(len(array), -1)
    work = a.astype(np.float64)
    mn, mx = a.min(axis=0), a.max(axis=0)
    return {
        "min": mn,
        "max": mx,
        "mean": work.mean(axis=0),
        "std": work.std(axis=0),
        "count": np.array([len(a)], dtype=np.int64),
    }


def _image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 [T, H, W, 3] frames in [0, 1], shaped [3, 1, 1] (count [1]).

    Like LeRobot, only a subset of frames (evenly spaced, at most ``_MAX_STAT_FRAMES``) and, for large
    images, a strided subset of pixels enter the statistics; count is the number of frames used.
    """
    t = len(frames)
    idx = np.unique(np.round(np.linspace(0, t - 1, min(t, _MAX_STAT_FRAMES))).astype(int))
    sample = frames[idx]
    h, w = sample.shape[1:3]
    if max(h, w) >= 300:
        step = max(1, int(max(h, w) / 150))
        sample = sample[:, ::step, ::step]
    x = sample.astype(np.float64) / 255.0
    axes = (0, 1, 2)
    return {
        "min": x.min(axis=axes).reshape(3, 1, 1),
        "max": x.max(axis=axes).reshape(3, 1, 1),
        "mean": x.mean(axis=axes).reshape(3, 1, 1),
        "std": x.std(axis=axes).reshape(3, 1, 1),
        "count": np.array([len(sample)], dtype=np.int64),
    }


def _aggregate_stats(per_episode: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, dict]:
    """Combine per-episode stats: global min/max, count-weighted mean, pooled variance (exact)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    keys: list[str] = []
    for ep in per_episode:
        keys.extend(k for k in ep if k not in keys)
    for key in keys:
        items = [ep[key] for ep in per_episode if key in ep]
        counts = np.array([float(s["count"][0]) for s in items])
        total = counts.sum()
        means = np.stack([np.asarray(s["mean"], dtype=np.float64) for s in items])
        variances = np.stack([np.asarray(s["std"], dtype=np.float64) ** 2 for s in items])
        w = counts.reshape((-1,) + (1,) * (means.ndim - 1))
        mean = (means * w).sum(axis=0) / total
        var = ((variances + (means - mean) ** 2) * w).sum(axis=0) / total
        out[key] = {
            "min": np.min(np.stack([np.asarray(s["min"]) for s in items]), axis=0),
            "max": np.max(np.stack([np.asarray(s["max"]) for s in items]), axis=0),
            "mean": mean,
            "std": np.sqrt(np.maximum(var, 0.0)),
            "count": np.array([int(total)], dtype=np.int64),
        }
    return out


def _stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in stats.items()}


# ------------------------------------------------------------------------------------------- tables


def _tasks_table(tasks: Sequence[str]) -> pa.Table:
    """``meta/tasks.parquet`` as pandas would write ``DataFrame({"task_index": ...}, index=tasks)``.

    LeRobot reads it with ``pandas.read_parquet`` and looks tasks up by index; pandas is not a dependency
    here, so we write the ``pandas`` schema metadata that makes the ``task`` column the frame's index.
    """
    table = pa.table(
        {
            "task_index": pa.array(range(len(tasks)), type=pa.int64()),
            "task": pa.array(list(tasks), type=pa.string()),
        }
    )
    pandas_meta = {
        "index_columns": ["task"],
        "column_indexes": [
            {
                "name": None,
                "field_name": None,
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": {"encoding": "UTF-8"},
            }
        ],
        "columns": [
            {
                "name": "task_index",
                "field_name": "task_index",
                "pandas_type": "int64",
                "numpy_type": "int64",
                "metadata": None,
            },
            {
                "name": "task",
                "field_name": "task",
                "pandas_type": "unicode",
                "numpy_type": "object",
                "metadata": None,
            },
        ],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.0",
    }
    return table.replace_schema_metadata({b"pandas": json.dumps(pandas_meta).encode()})


def _read_tasks(root: Path) -> list[str]:
    path = root / TASKS_PATH
    try:
        table = pq.read_table(path)
    except FileNotFoundError:
        raise DatasetError(
            f"{path}: missing; the dataset is incomplete (re-record it or restore meta/)"
        ) from None
    except Exception as exc:
        raise DatasetError(
            f"{path}: unreadable ({exc}); the dataset is damaged (re-record or restore it)"
        ) from None
    cols = table.column_names
    name_col = next((c for c in ("task", "__index_level_0__", "tasks") if c in cols), None)
    if name_col is None or "task_index" not in cols:
        raise DatasetError(f"{path}: expected a task_index column and the task strings, found {cols}")
    names = table.column(name_col).to_pylist()
    index = table.column("task_index").to_pylist()
    tasks = [""] * (max(index) + 1 if index else 0)
    for i, name in zip(index, names, strict=True):
        tasks[i] = name
    return tasks


def _episodes_table(rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    return pa.Table.from_pylist(list(rows))


def _read_episode_rows(root: Path) -> list[dict[str, Any]]:
    files = sorted((root / EPISODES_DIR).glob("*/*.parquet"))
    if not files:
        return []
    rows: list[dict[str, Any]] = []
    for path in files:
        try:
            rows.extend(pq.read_table(path).to_pylist())
        except Exception as exc:
            raise DatasetError(
                f"{path}: unreadable episodes table ({exc}); the dataset is damaged (re-record or restore it)"
            ) from None
    rows.sort(key=lambda r: int(r["episode_index"]))
    return rows


def _stats_from_row(row: Mapping[str, Any], features: Mapping[str, dict]) -> dict[str, dict[str, np.ndarray]]:
    stats: dict[str, dict[str, np.ndarray]] = {}
    for key in features:
        cols = {s: row.get(f"stats/{key}/{s}") for s in _STATS_KEYS}
        if any(v is None for v in cols.values()):
            continue
        stats[key] = {s: np.asarray(v) for s, v in cols.items()}
    return stats


def _load_info(root: Path) -> dict[str, Any]:
    path = root / INFO_PATH
    if not root.is_dir():
        raise DatasetError(
            f"{root}: no such directory; record a dataset there with DatasetWriter or fix the path"
        )
    if not path.is_file():
        raise DatasetError(
            f"{root}: not a LeRobot dataset ({INFO_PATH} missing); record one with DatasetWriter or fix the path"
        )
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(
            f"{path}: not valid JSON ({exc}); the dataset is damaged (re-record or restore it)"
        ) from None
    if not isinstance(info, dict) or "features" not in info or "fps" not in info:
        raise DatasetError(f"{path}: lacks 'features'/'fps'; not a LeRobot v3.0 info.json")
    version = str(info.get("codebase_version", "?"))
    if not version.startswith("v3."):
        raise DatasetError(
            f"{root}: codebase_version {version}, expected {CODEBASE_VERSION}; convert it with LeRobot's "
            "lerobot/datasets/v30/convert_dataset_v21_to_v30.py"
        )
    return info


# -------------------------------------------------------------------------------------------- writer


class DatasetWriter:
    """Append finished episodes to a LeRobotDataset v3.0 directory, one committed episode at a time.

    ``features`` is the ``info.json`` feature dict without the default columns (``transition_features``
    builds the usual one); a value may also be a ``(dtype, shape)`` tuple. Numeric features have shape [1]
    or [D]; ``dtype="video"`` features are uint8 RGB [H, W, 3] streams encoded to MP4 (libx264, yuv420p,
    ``video_crf``, keyframe every ``video_gop`` frames - LeRobot's choice for fast random access).

    ``resume=True`` appends to an existing dataset (its features must match) after ``repair``-ing it;
    ``overwrite=True`` deletes an existing dataset first. Without either, an existing dataset is an error.
    ``fsync=False`` skips the fsyncs (faster; a power cut may then lose more than the episode in flight,
    a killed process still cannot tear a file). ``extra_info`` adds top-level keys to a new dataset's
    ``info.json`` (e.g. where the data came from; LeRobot ignores keys it does not know).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        fps: int,
        features: Mapping[str, Any],
        robot_type: str | None = "sim",
        task: str | None = None,
        overwrite: bool = False,
        resume: bool = False,
        chunks_size: int = DEFAULT_CHUNKS_SIZE,
        video_crf: int = 23,
        video_gop: int = 2,
        fsync: bool = True,
        extra_info: Mapping[str, Any] | None = None,
    ) -> None:
        if overwrite and resume:
            raise ValueError("pass at most one of overwrite=True and resume=True")
        if not (isinstance(fps, int) and fps > 0):
            raise ValueError(f"fps must be a positive int, got {fps!r}")
        if chunks_size < 1:
            raise ValueError(f"chunks_size must be >= 1, got {chunks_size}")
        self.root = Path(root)
        self.fps = int(fps)
        self.task = task
        self.video_crf = int(video_crf)
        self.video_gop = int(video_gop)
        self._fsync = bool(fsync)
        self._closed = False
        features_full = _normalise_features(features, self.fps)

        exists = (self.root / INFO_PATH).exists()
        if exists and overwrite:
            shutil.rmtree(self.root)
            exists = False
        elif not exists and overwrite and self.root.is_dir() and any(self.root.iterdir()):
            raise DatasetError(
                f"{self.root}: refusing to overwrite a non-empty directory that is not a LeRobot dataset"
            )

        if exists:
            if not resume:
                raise DatasetError(
                    f"{self.root}: a dataset already exists; pass resume=True to append or overwrite=True to replace it"
                )
            repair(self.root, fsync=self._fsync)
            info = _load_info(self.root)
            if _comparable(info["features"]) != _comparable(features_full):
                raise DatasetError(
                    f"{self.root}: features differ from the existing dataset's "
                    f"({_comparable(info['features'])} vs {_comparable(features_full)}); "
                    "write to a new root or pass the same features"
                )
            if int(info["fps"]) != self.fps:
                raise DatasetError(f"{self.root}: existing dataset has fps={info['fps']}, not {self.fps}")
            self.info = info
            self._rows = _read_episode_rows(self.root)
            self._tasks = _read_tasks(self.root) if (self.root / TASKS_PATH).exists() else []
            self._ep_stats = [_stats_from_row(r, info["features"]) for r in self._rows]
        else:
            self.root.mkdir(parents=True, exist_ok=True)
            has_video = any(ft["dtype"] == "video" for ft in features_full.values())
            self.info = {
                "codebase_version": CODEBASE_VERSION,
                "robot_type": robot_type,
                "total_episodes": 0,
                "total_frames": 0,
                "total_tasks": 0,
                "chunks_size": int(chunks_size),
                "data_files_size_in_mb": DEFAULT_DATA_FILES_SIZE_IN_MB,
                "video_files_size_in_mb": DEFAULT_VIDEO_FILES_SIZE_IN_MB,
                "fps": self.fps,
                "splits": {},
                "data_path": DATA_PATH,
                "video_path": VIDEO_PATH if has_video else None,
                "features": features_full,
            }
            for key, value in (extra_info or {}).items():
                if key in self.info:
                    raise ValueError(f"extra_info may not override the info.json key {key!r}")
                self.info[key] = value
            self._rows = []
            self._tasks = []
            self._ep_stats = []
            self._write_meta(episodes_changed=True)
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self._schema = _data_schema(self.features)

    # -- public ------------------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return len(self._rows)

    @property
    def num_frames(self) -> int:
        return int(self._rows[-1]["dataset_to_index"]) if self._rows else 0

    @property
    def video_keys(self) -> list[str]:
        return [k for k, ft in self.features.items() if ft["dtype"] == "video"]

    def write_episode(self, frames: Mapping[str, Any], task: str | None = None) -> int:
        """Write one finished episode (arrays with leading dim T, keyed by feature) and return its index.

        Every declared feature must be present; ``timestamp`` is optional (default ``frame_index / fps``).
        When this returns the episode is committed: a kill afterwards cannot lose it.
        """
        if self._closed:
            raise RuntimeError(f"{self.root}: writer is closed")
        task = task if task is not None else self.task
        if task is None:
            task = "default"
        arrays, length = self._check_frames(frames)
        ep = len(self._rows)
        chunk, file = divmod(ep, int(self.info["chunks_size"]))
        start = self.num_frames

        # 1. videos (each atomically), collecting image stats on the way
        stats: dict[str, dict[str, np.ndarray]] = {}
        row: dict[str, Any] = {"episode_index": ep, "tasks": [task], "length": length}
        row.update({"data/chunk_index": chunk, "data/file_index": file})
        row.update({"dataset_from_index": start, "dataset_to_index": start + length})
        for key in self.video_keys:
            path = self.root / VIDEO_PATH.format(video_key=key, chunk_index=chunk, file_index=file)
            _encode_video(path, arrays[key], self.fps, self.video_crf, self.video_gop, self._fsync)
            stats[key] = _image_stats(arrays[key])
            row.update(
                {
                    f"videos/{key}/chunk_index": chunk,
                    f"videos/{key}/file_index": file,
                    f"videos/{key}/from_timestamp": 0.0,
                    f"videos/{key}/to_timestamp": length / self.fps,
                }
            )

        # 2. the frames
        if task not in self._tasks:
            self._tasks.append(task)
            tasks_changed = True
        else:
            tasks_changed = False
        frame_index = np.arange(length, dtype=np.int64)
        columns = dict(arrays)
        if "timestamp" not in columns:
            columns["timestamp"] = (frame_index / self.fps).astype(np.float32)
        columns["frame_index"] = frame_index
        columns["episode_index"] = np.full(length, ep, dtype=np.int64)
        columns["index"] = start + frame_index
        columns["task_index"] = np.full(length, self._tasks.index(task), dtype=np.int64)
        table = _to_table(columns, self.features, self._schema)
        _write_table(self.root / DATA_PATH.format(chunk_index=chunk, file_index=file), table, self._fsync)
        for key, ft in self.features.items():
            if ft["dtype"] != "video":
                stats[key] = _feature_stats(columns[key])

        # 3. metadata; the episodes table is the commit point
        for key, st in stats.items():
            for s, v in st.items():
                row[f"stats/{key}/{s}"] = np.asarray(v).tolist()
        row["meta/episodes/chunk_index"] = 0
        row["meta/episodes/file_index"] = 0
        self._rows.append(row)
        self._ep_stats.append(stats)
        try:
            self._write_meta(episodes_changed=True, tasks_changed=tasks_changed)
        except BaseException:
            self._rows.pop()
            self._ep_stats.pop()
            raise
        return ep

    def close(self) -> None:
        """Nothing is buffered (every episode is committed by ``write_episode``); marks the writer closed."""
        self._closed = True

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"DatasetWriter({str(self.root)!r}, episodes={self.num_episodes}, frames={self.num_frames})"

    # -- internals ---------------------------------------------------------------------------------

    def _check_frames(self, frames: Mapping[str, Any]) -> tuple[dict[str, np.ndarray], int]:
        missing = [k for k, ft in self.features.items() if k not in _DEFAULT_FEATURES and k not in frames]
        if missing:
            raise ValueError(f"episode lacks declared feature(s) {missing}")
        extra = [k for k in frames if k not in self.features]
        if extra:
            raise ValueError(f"episode has undeclared feature(s) {extra}; declare them in features")
        arrays: dict[str, np.ndarray] = {}
        length: int | None = None
        for key, value in frames.items():
            if key in _DEFAULT_FEATURES and key != "timestamp":
                raise ValueError(f"{key!r} is filled by the writer; do not pass it")
            ft = self.features[key]
            arr = value.detach().cpu().numpy() if isinstance(value, Tensor) else np.asarray(value)
            if ft["dtype"] == "video":
                want = tuple(ft["shape"])
                if arr.dtype != np.uint8 or arr.ndim != 4 or tuple(arr.shape[1:]) != want:
                    raise ValueError(
                        f"{key}: expected uint8 [T, {', '.join(map(str, want))}], "
                        f"got {arr.dtype} {list(arr.shape)}"
                    )
            else:
                shape = tuple(ft["shape"])
                if shape == (1,) and arr.ndim == 2 and arr.shape[1] == 1:
                    arr = arr[:, 0]
                want_ndim = 1 if shape == (1,) else 2
                if arr.ndim != want_ndim or (want_ndim == 2 and arr.shape[1] != shape[0]):
                    raise ValueError(
                        f"{key}: expected shape [T{'' if shape == (1,) else f', {shape[0]}'}], "
                        f"got {list(arr.shape)}"
                    )
                arr = arr.astype(ft["dtype"], copy=False)
                if arr.dtype.kind == "f" and not np.isfinite(arr).all():
                    raise ValueError(f"{key}: contains NaN or inf")
            if length is None:
                length = len(arr)
            elif len(arr) != length:
                raise ValueError(f"{key}: has {len(arr)} frames, other features have {length}")
            arrays[key] = arr
        if not length:
            raise ValueError("an episode needs at least one frame")
        return arrays, int(length)

    def _write_meta(self, *, episodes_changed: bool, tasks_changed: bool = True) -> None:
        n = len(self._rows)
        self.info["total_episodes"] = n
        self.info["total_frames"] = self.num_frames
        self.info["total_tasks"] = len(self._tasks)
        self.info["splits"] = {"train": f"0:{n}"} if n else {}
        if tasks_changed:
            _write_table(self.root / TASKS_PATH, _tasks_table(self._tasks), self._fsync)
        _write_json(self.root / STATS_PATH, _stats_to_json(_aggregate_stats(self._ep_stats)), self._fsync)
        if episodes_changed and n:
            _write_table(
                self.root / EPISODES_PATH.format(chunk_index=0, file_index=0),
                _episodes_table(self._rows),
                self._fsync,
            )
        _write_json(self.root / INFO_PATH, self.info, self._fsync)


def _data_schema(features: Mapping[str, dict[str, Any]]) -> pa.Schema:
    fields = []
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        base = _ARROW_TYPES[ft["dtype"]]
        shape = tuple(ft["shape"])
        fields.append(pa.field(key, base if shape == (1,) else pa.list_(base, shape[0])))
    return pa.schema(fields)


def _to_table(columns: Mapping[str, np.ndarray], features: Mapping[str, dict], schema: pa.Schema) -> pa.Table:
    arrays = []
    for f in schema:
        arr = np.ascontiguousarray(columns[f.name])
        if pa.types.is_fixed_size_list(f.type):
            flat = pa.array(arr.reshape(-1), type=f.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, f.type.list_size))
        else:
            arrays.append(pa.array(arr.reshape(-1), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def _encode_video(path: Path, frames: np.ndarray, fps: int, crf: int, gop: int, fsync: bool) -> None:
    """Encode ``frames`` to ``path`` (atomically); one retry, since an episode's frames exist only here.

    An ffmpeg child can die under machine pressure (seen once in CI: a broken pipe mid-episode). The frames
    are still in memory, so a second attempt costs little and keeps the episode; a second failure raises
    with both errors.
    """
    try:
        _encode_video_once(path, frames, fps, crf, gop, fsync)
    except OSError as first:
        warnings.warn(f"ffmpeg failed while encoding {path.name}; retrying once ({first})", stacklevel=2)
        try:
            _encode_video_once(path, frames, fps, crf, gop, fsync)
        except OSError as second:
            raise OSError(
                f"could not encode {path} after a retry: {second} (first failure: {first})"
            ) from second


def _encode_video_once(path: Path, frames: np.ndarray, fps: int, crf: int, gop: int, fsync: bool) -> None:
    import imageio_ffmpeg

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_path(path)
    h, w = frames.shape[1:3]
    writer = imageio_ffmpeg.write_frames(
        str(tmp),
        (w, h),
        fps=fps,
        codec="libx264",
        pix_fmt_in="rgb24",
        pix_fmt_out="yuv420p",
        quality=None,
        macro_block_size=1,
        output_params=["-crf", str(crf), "-g", str(gop), "-f", "mp4"],
    )
    try:
        writer.send(None)
        for frame in frames:
            writer.send(np.ascontiguousarray(frame))
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    _commit(tmp, path, fsync)


# -------------------------------------------------------------------------------------------- repair


def repair(root: str | os.PathLike[str], *, fsync: bool = True) -> list[Path]:
    """Make a dataset left by a killed writer fully consistent; return the files it removed.

    Removes temp files and data/video files that no committed episode points to (an episode killed between
    its data file and its commit), and rewrites ``info.json`` totals and ``stats.json`` from the episodes
    table. Not needed before ``read_dataset`` (which already ignores all of that); run it (or resume the
    writer, which runs it) before giving the directory to LeRobot, which globs ``data/*/*.parquet``.
    """
    root = Path(root)
    info = _load_info(root)
    rows = _read_episode_rows(root)
    removed: list[Path] = []
    for path in sorted(p for p in root.rglob("*") if p.is_file() and _is_tmp(p)):
        path.unlink(missing_ok=True)
        removed.append(path)
    keep = {(int(r["data/chunk_index"]), int(r["data/file_index"])) for r in rows}
    for path in sorted((root / "data").glob("chunk-*/file-*.parquet")):
        if _chunk_file(path) not in keep:
            path.unlink()
            removed.append(path)
    for key, ft in info["features"].items():
        if ft["dtype"] != "video":
            continue
        keep_v = {
            (int(r[f"videos/{key}/chunk_index"]), int(r[f"videos/{key}/file_index"]))
            for r in rows
            if r.get(f"videos/{key}/chunk_index") is not None
        }
        for path in sorted((root / "videos" / key).glob("chunk-*/file-*.mp4")):
            if _chunk_file(path) not in keep_v:
                path.unlink()
                removed.append(path)
    total_frames = int(rows[-1]["dataset_to_index"]) if rows else 0
    n = len(rows)
    tasks = _read_tasks(root) if (root / TASKS_PATH).exists() else []
    fixed = dict(info)
    fixed.update(
        {
            "total_episodes": n,
            "total_frames": total_frames,
            "total_tasks": len(tasks),
            "splits": {"train": f"0:{n}"} if n else {},
        }
    )
    if fixed != info:
        _write_json(root / INFO_PATH, fixed, fsync)
    ep_stats = [_stats_from_row(r, info["features"]) for r in rows]
    if not rows or all(ep_stats):  # foreign datasets may lack per-episode stats: keep theirs
        _write_json(root / STATS_PATH, _stats_to_json(_aggregate_stats(ep_stats)), fsync)
    return removed


def _chunk_file(path: Path) -> tuple[int, int]:
    chunk = int(path.parent.name.split("-")[-1])
    file = int(path.stem.split("-")[-1])
    return chunk, file


# -------------------------------------------------------------------------------------------- reader


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
class Transitions:
    """Every frame of a dataset as one transition, episodes concatenated in order (M frames in all).

    ``obs`` / ``next_obs`` float32 [M, D]; ``action`` float32 [M, A]; ``reward`` float32 [M];
    ``terminated`` / ``truncated`` / ``success`` / ``intervention`` bool [M]; ``episode_index`` /
    ``frame_index`` int64 [M]. ``images`` maps each video feature to uint8 [M, H, W, 3] when read with
    ``load_images=True`` (else it is empty). ``info`` is ``meta/info.json``; ``tasks`` is the task list
    (``task_index`` -> string).
    """

    obs: Tensor
    action: Tensor
    reward: Tensor
    next_obs: Tensor
    terminated: Tensor
    truncated: Tensor
    success: Tensor
    episode_index: Tensor
    frame_index: Tensor
    intervention: Tensor
    episodes: EpisodesMeta
    info: dict[str, Any]
    tasks: list[str] = field(default_factory=list)
    images: dict[str, Tensor] = field(default_factory=dict)

    def __len__(self) -> int:
        return int(self.obs.shape[0])

    @property
    def done(self) -> Tensor:
        return self.terminated | self.truncated


def read_dataset(
    root: str | os.PathLike[str],
    *,
    load_images: bool = False,
    state_key: str = STATE,
    action_key: str = ACTION,
) -> Transitions:
    """Read a LeRobotDataset v3.0 directory into ``Transitions`` (torch tensors on CPU).

    Only episodes listed in ``meta/episodes`` are read (a killed writer's leftovers are ignored); within a
    data file rows are matched to episodes by ``episode_index`` and ordered by ``frame_index``, so files
    holding several episodes (as LeRobot writes them) work too.

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
    info = _load_info(root)
    features: dict[str, dict[str, Any]] = info["features"]
    for key in (state_key, action_key):
        if key not in features:
            raise DatasetError(
                f"{root}: has no {key!r} feature (features: {sorted(features)}); pass state_key/"
                "action_key naming the columns to use"
            )
    rows = _read_episode_rows(root)
    tasks = _read_tasks(root) if (root / TASKS_PATH).exists() else []
    if not rows and int(info.get("total_episodes", 0)) > 0:
        raise DatasetError(
            f"{root}: info.json lists {info['total_episodes']} episodes but {EPISODES_DIR} has none; "
            "the dataset is damaged (re-record or restore meta/)"
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

    def flag(key: str) -> np.ndarray | None:
        return cat(key).reshape(m).astype(bool) if key in features else None

    if NEXT_STATE in features:
        next_obs = cat(NEXT_STATE).reshape(m, d).astype(np.float32)
    else:
        next_obs = obs.copy()
        if m:
            next_obs[:-1][~last[:-1]] = obs[1:][~last[:-1]]
    terminated = flag("next.terminated")
    if terminated is None:
        terminated = flag("next.done")
    if terminated is None:
        terminated = np.zeros(m, dtype=bool)
    truncated = flag("next.truncated")
    if truncated is None:
        truncated = last & ~terminated
    reward = (
        cat("next.reward").reshape(m).astype(np.float32)
        if "next.reward" in features
        else np.zeros(m, np.float32)
    )
    success = flag("next.success")
    intervention = flag("intervention")

    images: dict[str, Tensor] = {}
    if load_images:
        for key, ft in features.items():
            if ft["dtype"] == "video":
                images[key] = torch.from_numpy(_read_video_frames(root, info, rows, key))

    episodes = EpisodesMeta(
        index=torch.tensor(order, dtype=torch.int64),
        length=torch.from_numpy(lengths),
        start=torch.tensor([int(r["dataset_from_index"]) for r in rows], dtype=torch.int64),
        task=[(list(r.get("tasks") or [""]) or [""])[0] for r in rows],
    )
    return Transitions(
        obs=torch.from_numpy(obs),
        action=torch.from_numpy(action),
        reward=torch.from_numpy(reward),
        next_obs=torch.from_numpy(next_obs),
        terminated=torch.from_numpy(terminated),
        truncated=torch.from_numpy(truncated),
        success=torch.from_numpy(success if success is not None else np.zeros(m, dtype=bool)),
        episode_index=torch.from_numpy(episode_index),
        frame_index=torch.from_numpy(frame_index),
        intervention=torch.from_numpy(intervention if intervention is not None else np.zeros(m, dtype=bool)),
        episodes=episodes,
        info=info,
        tasks=tasks,
        images=images,
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


def _read_video_frames(
    root: Path, info: Mapping[str, Any], rows: Sequence[Mapping[str, Any]], key: str
) -> np.ndarray:
    """Decode the frames of every episode of one camera, in episode order, as uint8 [M, H, W, 3]."""
    fps = float(info["fps"])
    h, w = (int(s) for s in info["features"][key]["shape"][:2])
    template = info.get("video_path") or VIDEO_PATH
    cache: dict[Path, np.ndarray] = {}
    out = []
    for r in rows:
        path = root / template.format(
            video_key=key,
            chunk_index=int(r[f"videos/{key}/chunk_index"]),
            file_index=int(r[f"videos/{key}/file_index"]),
        )
        if path not in cache:
            cache.clear()  # files are visited in episode order; keep one decoded file at a time
            cache[path] = _decode_video(path, h, w)
        frames = cache[path]
        first = int(round(float(r[f"videos/{key}/from_timestamp"]) * fps))
        length = int(r["length"])
        if first + length > len(frames):
            raise DatasetError(
                f"{path}: has {len(frames)} frames, episode {r['episode_index']} needs "
                f"[{first}, {first + length}); the video is damaged (re-record it)"
            )
        out.append(frames[first : first + length])
    return np.concatenate(out) if out else np.zeros((0, h, w, 3), dtype=np.uint8)


def _decode_video(path: Path, h: int, w: int) -> np.ndarray:
    import imageio_ffmpeg

    if not path.is_file():
        raise DatasetError(
            f"{path}: listed in {EPISODES_DIR} but missing; the dataset is damaged (re-record it)"
        )
    try:
        gen = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
        meta = next(gen)
        fw, fh = meta["size"]
        frames = [np.frombuffer(buf, dtype=np.uint8).reshape(fh, fw, 3) for buf in gen]
    except (OSError, RuntimeError, StopIteration) as exc:
        raise DatasetError(f"{path}: cannot decode ({exc}); the video is damaged (re-record it)") from None
    if (fh, fw) != (h, w):
        raise DatasetError(f"{path}: frames are {fh}x{fw}, info.json says {h}x{w}")
    return np.stack(frames) if frames else np.zeros((0, h, w, 3), dtype=np.uint8)


# ------------------------------------------------------------------------------------- returns


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
