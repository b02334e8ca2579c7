"""The LeRobotDataset v3.0 layout on disk: paths, features, and the meta tables (info, tasks, episodes).

Layout (``root`` is the dataset directory; ``CCC`` = chunk index, ``FFF`` = file index, both 3 digits)::

    meta/info.json                          schema, fps, totals, path templates (codebase_version "v3.0")
    meta/stats.json                         per feature: min / max / mean / std / count over all frames
    meta/tasks.parquet                      task string (pandas index "task") -> task_index
    meta/episodes/chunk-000/file-000.parquet  one row per episode: indices into data/videos + its stats
    data/chunk-CCC/file-FFF.parquet         frames: features + timestamp, frame_index, episode_index, index,
                                            task_index
    videos/<video_key>/chunk-CCC/file-FFF.mp4   one camera stream, H.264 (libx264) yuv420p

This writer stores **one episode per data file and per video file**: each episode goes into the file after the
previous episode's (LeRobot's ``update_chunk_file_indices``; in a dataset only we wrote, episode ``e`` lives in
``file_index = e % chunks_size`` of ``chunk_index = e // chunks_size``), and its videos start at
``from_timestamp = 0``. v3.0 allows several episodes per file (the episodes table says where each one
starts); LeRobot itself moves to a new file when a file grows past ``data_files_size_in_mb`` or when a
recording is resumed, so files holding a single episode are an ordinary v3.0 dataset. The reader handles
both, so it also reads datasets recorded by LeRobot. A writer appending to an existing dataset starts its own
``meta/episodes`` file after the last one, in that file's schema (see ``episodes_table``). The episode being
written is staged under ``STAGING_DIR`` (``.staging/``), outside every path LeRobot reads.

Frame semantics (the LeRobot convention, which is also the RL one): row ``t`` holds ``observation.*`` at
time t, the ``action`` taken there, and ``next.*`` columns describing what that action led to
(``next.reward``, ``next.done``). We add ``next.terminated`` / ``next.truncated`` (bootstrap or not),
``next.success``, ``next.observation.state`` (the true next observation, so the last frame of a
time-limited episode can be bootstrapped) and ``intervention`` (a human took over at this frame). Extra
columns are ordinary features in v3.0.

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
mean and pooled variance; ``lerobot_dataset.py`` of 0.4.x again - ``_save_episode_metadata`` /
``_flush_metadata_buffer`` (episode dicts to ``pa.Table.from_pydict``, one new episodes / data / video file
per resumed recording), ``_save_episode_data`` (several episodes per data file, ``pq.ParquetWriter``);
``src/lerobot/datasets/compute_stats.py`` (0.4.x, ``RunningQuantileStats``) - quantile keys q01/q10/q50/q90/q99,
min/max in the data's dtype, mean/std/quantiles float64; ``src/lerobot/datasets/video_utils.py`` - the ``info`` block of video features
(``video.height``, ``video.width``, ``video.codec``, ``video.pix_fmt``, ``video.is_depth_map``,
``video.fps``, ``video.channels``, ``has_audio``); ``src/lerobot/datasets/v30/convert_dataset_v21_to_v30.py``
- ``total_chunks`` / ``total_videos`` are gone in v3.0.

Feature dicts are written as LeRobot's own recorder writes them (``LeRobotDatasetMetadata.create``: the caller's
features, then ``DEFAULT_FEATURES``), with no per-feature ``fps`` key: only datasets converted from v2.1 carry one
on their non-video features, and LeRobot's ``aggregate.validate_all_metadata`` merges datasets only when their
``features`` are equal, so an ``fps`` key would keep ours from merging with anything LeRobot recorded. Datasets an
earlier version of this module wrote do have it; they are read as they are, and appending to one keeps its
feature dicts unchanged (``DatasetWriter`` never rewrites an existing dataset's ``features``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from robot_rl.errors import UserError

CODEBASE_VERSION = "v3.0"
DEFAULT_CHUNKS_SIZE = 1000
DEFAULT_DATA_FILES_SIZE_IN_MB = 100
DEFAULT_VIDEO_FILES_SIZE_IN_MB = 500

META_DIR = "meta"  # every file below is replaced together when an episode is committed (writer._commit_meta)
INFO_PATH = "meta/info.json"
STATS_PATH = "meta/stats.json"
TASKS_PATH = "meta/tasks.parquet"
EPISODES_DIR = "meta/episodes"
EPISODES_PATH = EPISODES_DIR + "/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
DATA_PATH = "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
VIDEO_PATH = "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
# The episode being written is staged here and published at its end; LeRobot reads only the paths above (and
# `tempfile.mkdtemp(dir=root)` directories of its own), so nothing under a dot-directory is ever part of its view.
STAGING_DIR = ".staging"

STATE = "observation.state"
ACTION = "action"
IMAGE_PREFIX = "observation.images."
NEXT_STATE = "next.observation.state"

# Columns every v3.0 dataset has; the writer fills them, callers never pass them (timestamp optionally).
DEFAULT_FEATURES: dict[str, dict[str, Any]] = {
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
_STATS_KEYS = ("min", "max", "mean", "std", "count")
MAX_STAT_FRAMES = 100  # image stats: at most this many frames per episode, like LeRobot's sampling


class DatasetError(UserError, ValueError):
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


CAMERA_GROUP_PREFIX = "pixels/"  # env camera groups: "pixels/<camera>" (arm -pixels), or one "pixels" group


def camera_feature(group: str) -> str:
    """The dataset feature of an env camera group: ``pixels/front`` -> ``observation.images.front`` (LeRobot's
    naming; no slash in a video key, so each camera's videos sit in one directory), ``pixels`` ->
    ``observation.images.pixels``."""
    name = group[len(CAMERA_GROUP_PREFIX) :] if group.startswith(CAMERA_GROUP_PREFIX) else group
    if not name or "/" in name:
        raise ValueError(f"camera group {group!r} has no dataset feature name (use 'pixels/<camera>')")
    return IMAGE_PREFIX + name


def camera_group(name: str) -> str:
    """The observation group of a dataset camera (``observation.images.<name>``): ``front`` -> ``pixels/front``;
    names that already are groups (``pixels``, ``pixels/front``) stay. The inverse of `camera_feature`."""
    return name if name == "pixels" or name.startswith(CAMERA_GROUP_PREFIX) else CAMERA_GROUP_PREFIX + name


def normalise_features(features: Mapping[str, Any], fps: int) -> dict[str, dict[str, Any]]:
    """Validate user features and return the full ``info.json`` feature dict (defaults appended), each entry as
    LeRobot's recorder writes it: ``dtype``, ``shape``, ``names`` and, for videos, the ``info`` block (the only
    place the frame rate appears besides the top-level ``fps``; see the module docstring for why no feature
    carries an ``fps`` key)."""
    if not features:
        raise ValueError("features must declare at least one feature, e.g. transition_features(D, A)")
    out: dict[str, dict[str, Any]] = {}
    for key, ft in features.items():
        if key in DEFAULT_FEATURES:
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
        else:
            raise ValueError(
                f"feature {key!r}: dtype {dtype!r} not supported; use one of "
                f"{sorted(_NUMERIC_DTYPES | {'video'})}"
            )
        out[key] = entry
    for key, ft in DEFAULT_FEATURES.items():
        out[key] = {**ft, "shape": list(ft["shape"])}
    return out


def _user_features(features: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {k: v for k, v in features.items() if k not in DEFAULT_FEATURES}


def comparable(features: Mapping[str, dict[str, Any]]) -> dict[str, tuple[str, tuple[int, ...]]]:
    return {k: (v["dtype"], tuple(v["shape"])) for k, v in _user_features(features).items()}


def tasks_table(tasks: Sequence[str]) -> pa.Table:
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


def read_tasks(root: Path) -> list[str]:
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


def episodes_table(rows: Sequence[Mapping[str, Any]], schema: pa.Schema | None = None) -> pa.Table:
    """Episode rows as one ``meta/episodes`` file. Without ``schema`` the column types are those pyarrow infers
    from Python values, as LeRobot's ``pa.Table.from_pydict`` of its episode dicts does (int64 indices and
    lengths, ``list<string>`` tasks, ``list<double>`` / ``list<int64>`` / ``list<bool>`` stats). With ``schema`` (an
    existing file's, when appending) the rows take exactly its columns, order and types: a column they lack is
    null, one it lacks is left out, so every file of the directory concatenates into one table."""
    if schema is None:
        return pa.Table.from_pylist(list(rows))
    return pa.Table.from_pylist(list(rows), schema=schema)


def episodes_files(root: Path) -> list[Path]:
    """The ``meta/episodes`` files in (chunk, file) order, as LeRobot's ``load_nested_dataset`` globs them."""
    return sorted((root / EPISODES_DIR).glob("*/*.parquet"))


def next_file(chunk: int, file: int, chunks_size: int) -> tuple[int, int]:
    """The (chunk, file) after ``(chunk, file)``: LeRobot's ``update_chunk_file_indices``."""
    return (chunk + 1, 0) if file == chunks_size - 1 else (chunk, file + 1)


def read_episode_rows(root: Path) -> list[dict[str, Any]]:
    files = episodes_files(root)
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


def stats_from_row(row: Mapping[str, Any], features: Mapping[str, dict]) -> dict[str, dict[str, np.ndarray]]:
    """An episode's statistics from its `meta/episodes` row: every `stats/<feature>/<stat>` column it has
    (quantiles and statistics other tools added included), for the features with the five basic ones."""
    stats: dict[str, dict[str, np.ndarray]] = {}
    for key in features:
        prefix = f"stats/{key}/"
        cols = {c[len(prefix):]: v for c, v in row.items() if c.startswith(prefix) and v is not None}
        if all(s in cols for s in _STATS_KEYS):
            stats[key] = {s: np.asarray(v) for s, v in cols.items()}
    return stats


def load_info(root: Path) -> dict[str, Any]:
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


def data_schema(features: Mapping[str, dict[str, Any]]) -> pa.Schema:
    fields = []
    for key, ft in features.items():
        if ft["dtype"] == "video":
            continue
        base = _ARROW_TYPES[ft["dtype"]]
        shape = tuple(ft["shape"])
        fields.append(pa.field(key, base if shape == (1,) else pa.list_(base, shape[0])))
    return pa.schema(fields)


def to_table(columns: Mapping[str, np.ndarray], features: Mapping[str, dict], schema: pa.Schema) -> pa.Table:
    arrays = []
    for f in schema:
        arr = np.ascontiguousarray(columns[f.name])
        if pa.types.is_fixed_size_list(f.type):
            flat = pa.array(arr.reshape(-1), type=f.type.value_type)
            arrays.append(pa.FixedSizeListArray.from_arrays(flat, f.type.list_size))
        else:
            arrays.append(pa.array(arr.reshape(-1), type=f.type))
    return pa.Table.from_arrays(arrays, schema=schema)


def chunk_file(path: Path) -> tuple[int, int]:
    chunk = int(path.parent.name.split("-")[-1])
    file = int(path.stem.split("-")[-1])
    return chunk, file


