"""`DatasetWriter`: appends finished episodes to a LeRobotDataset v3.0 directory, crash-safely.

Crash safety (a recorder may be SIGKILLed at any moment):

* The episode being written is **staged** in ``<root>/.staging/``: its videos and data parquet, and a complete
  new ``meta/`` (the new ``tasks.parquet`` / ``meta/episodes`` file / ``stats.json`` / ``info.json``, each
  written under a temporary name, fsync'ed and renamed by ``robot_rl.datasets.atomic``, beside hard links to the
  other files of the current ``meta/``). Nothing there is on a path LeRobot (or our reader) looks at, so a kill
  while an episode is being encoded or written leaves the visible dataset exactly as it was.
* At the episode's end the videos and the data file are **published**, each by one rename into its place after
  every file the dataset lists, and then ``meta/`` is swapped for the staged one in a single step
  (``atomic.exchange``: Linux ``renameat2(RENAME_EXCHANGE)``): **the commit point**. ``info.json`` totals, the
  episodes table, ``stats.json`` and ``tasks.parquet`` therefore change together; no kill can leave LeRobot's
  ``info.json`` counting one episode fewer than ``meta/episodes`` lists (LeRobot's resume takes the next
  episode index from ``info.json`` and the next file from the episodes table, so such a state made it write an
  episode index twice). A kill between the publishing renames and the swap leaves a data / video file after the
  last listed one, which nobody indexes (LeRobot's length is ``info.json``'s ``total_frames``, and its resume
  writes that very path) and ``repair`` deletes.
* Where the swap is unavailable (not Linux, or a file system without ``RENAME_EXCHANGE``) the staged meta files
  are renamed one by one, back to back (``tasks.parquet``, the episodes file, ``info.json``, ``stats.json``;
  directory fsyncs after the last): a kill in those microseconds can leave ``info.json`` / ``stats.json``
  behind the episodes table, which is then the authority: ``read_dataset`` reads what it lists, and
  ``repair(root)`` (which ``DatasetWriter(..., resume=True)`` runs) rewrites the other two from it.
* One writer per dataset at a time; there is no lock.

LeRobot interoperability (appending in both directions): like LeRobot's ``save_episode``, a writer that
resumes a dataset starts a new ``meta/episodes`` file after the last one (the existing files, LeRobot's or
ours, are never rewritten) and puts its first episode in the data / video file after the last episode's
(``update_chunk_file_indices``). Its episode rows take the exact schema of the existing episodes file
(``episodes_table``), so LeRobot's ``load_nested_dataset`` concatenates every file; on a new dataset the rows
have the column order and types of LeRobot's own episode dicts (see ``format.py``).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
from torch import Tensor

from robot_rl.datasets import atomic
from robot_rl.datasets.atomic import publish, write_json, write_table
from robot_rl.datasets.feature_stats import feature_stats, image_stats, write_total_stats
from robot_rl.datasets.format import (
    CODEBASE_VERSION,
    DATA_PATH,
    DEFAULT_CHUNKS_SIZE,
    DEFAULT_DATA_FILES_SIZE_IN_MB,
    DEFAULT_FEATURES,
    DEFAULT_VIDEO_FILES_SIZE_IN_MB,
    EPISODES_PATH,
    INFO_PATH,
    META_DIR,
    STAGING_DIR,
    STATS_PATH,
    TASKS_PATH,
    VIDEO_PATH,
    DatasetError,
    chunk_file,
    comparable,
    data_schema,
    episodes_files,
    episodes_table,
    load_info,
    next_file,
    normalise_features,
    read_episode_rows,
    read_tasks,
    stats_from_row,
    tasks_table,
    to_table,
)
from robot_rl.datasets.repair import repair
from robot_rl.datasets.video import encode_video


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
        self._stage = self.root / STAGING_DIR
        self._episodes_file = (0, 0)  # this writer's meta/episodes file (chunk, file)
        self._episodes_schema: Any = None  # the existing episodes files' schema, when appending
        self._first_row = 0  # rows from here on are this writer's, in its own episodes file
        self.fps = int(fps)
        self.task = task
        self.video_crf = int(video_crf)
        self.video_gop = int(video_gop)
        self._fsync = bool(fsync)
        self._closed = False
        features_full = normalise_features(features, self.fps)

        exists = (self.root / INFO_PATH).exists()
        if exists and overwrite:
            shutil.rmtree(self.root)
            exists = False
        elif not exists and overwrite and self.root.is_dir() and any(self.root.iterdir()):
            raise DatasetError(
                f"{self.root}: refusing to overwrite a non-empty directory that is not a LeRobot dataset"
            )
        if not exists and (self.root / META_DIR).exists():
            raise DatasetError(
                f"{self.root}: has a {META_DIR}/ directory but no {INFO_PATH}; remove {self.root / META_DIR} "
                "(an interrupted dataset creation) or write to another root"
            )

        if exists:
            if not resume:
                raise DatasetError(
                    f"{self.root}: a dataset already exists; pass resume=True to append or overwrite=True to replace it"
                )
            repair(self.root, fsync=self._fsync)
            info = load_info(self.root)
            if comparable(info["features"]) != comparable(features_full):
                raise DatasetError(
                    f"{self.root}: features differ from the existing dataset's "
                    f"({comparable(info['features'])} vs {comparable(features_full)}); "
                    "write to a new root or pass the same features"
                )
            if int(info["fps"]) != self.fps:
                raise DatasetError(f"{self.root}: existing dataset has fps={info['fps']}, not {self.fps}")
            self.info = info
            self._rows = read_episode_rows(self.root)
            self._tasks = read_tasks(self.root) if (self.root / TASKS_PATH).exists() else []
            self._ep_stats = [stats_from_row(r, info["features"]) for r in self._rows]
            files = episodes_files(self.root)
            if files:  # a new file of our own, in the existing files' schema (LeRobot's resume does the same)
                self._episodes_file = next_file(*chunk_file(files[-1]), int(info["chunks_size"]))
                self._episodes_schema = pq.read_schema(files[-1]).remove_metadata()
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
            shutil.rmtree(self._stage, ignore_errors=True)
            try:  # meta/ appears whole, by one rename: a kill leaves a dataset or no dataset
                self._commit_meta(self._write_meta(self._stage))
            finally:
                shutil.rmtree(self._stage, ignore_errors=True)
        self._first_row = len(self._rows)
        self.features: dict[str, dict[str, Any]] = self.info["features"]
        self._schema = data_schema(self.features)

    # -- public ------------------------------------------------------------------------------------

    @property
    def num_episodes(self) -> int:
        return len(self._rows)

    @property
    def num_frames(self) -> int:
        return int(self._rows[-1]["dataset_to_index"]) if self._rows else 0

    @property
    def tasks(self) -> list[str]:
        """The task descriptions of the episodes so far (those already in a resumed dataset included)."""
        return list(self._tasks)

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
        start = self.num_frames
        chunks_size = int(self.info["chunks_size"])
        prev = self._rows[-1] if self._rows else {}

        def after(prefix: str) -> tuple[int, int]:
            """The file after the previous episode's (a new dataset: the first one)."""
            if prev.get(f"{prefix}/chunk_index") is None:
                return 0, 0
            return next_file(int(prev[f"{prefix}/chunk_index"]), int(prev[f"{prefix}/file_index"]), chunks_size)

        chunk, file = after("data")
        shutil.rmtree(self._stage, ignore_errors=True)  # what a failed episode of this process left there
        staged: list[str] = []  # paths relative to the root, published in this order

        # 1. videos (each atomically), collecting image stats on the way
        stats: dict[str, dict[str, np.ndarray]] = {}
        row: dict[str, Any] = {"episode_index": ep, "tasks": [task], "length": length}
        row.update({"data/chunk_index": chunk, "data/file_index": file})
        row.update({"dataset_from_index": start, "dataset_to_index": start + length})
        for key in self.video_keys:
            v_chunk, v_file = after(f"videos/{key}")
            rel = VIDEO_PATH.format(video_key=key, chunk_index=v_chunk, file_index=v_file)
            encode_video(self._stage / rel, arrays[key], self.fps, self.video_crf, self.video_gop, self._fsync)
            staged.append(rel)
            stats[key] = image_stats(arrays[key])
            row.update(
                {
                    f"videos/{key}/chunk_index": v_chunk,
                    f"videos/{key}/file_index": v_file,
                    f"videos/{key}/from_timestamp": 0.0,
                    f"videos/{key}/to_timestamp": length / self.fps,
                }
            )

        # 2. the frames
        tasks_before = list(self._tasks)
        if task not in self._tasks:
            self._tasks.append(task)
        frame_index = np.arange(length, dtype=np.int64)
        columns = dict(arrays)
        if "timestamp" not in columns:
            columns["timestamp"] = (frame_index / self.fps).astype(np.float32)
        columns["frame_index"] = frame_index
        columns["episode_index"] = np.full(length, ep, dtype=np.int64)
        columns["index"] = start + frame_index
        columns["task_index"] = np.full(length, self._tasks.index(task), dtype=np.int64)
        table = to_table(columns, self.features, self._schema)
        rel = DATA_PATH.format(chunk_index=chunk, file_index=file)
        write_table(self._stage / rel, table, self._fsync)
        staged.append(rel)
        for key, ft in self.features.items():
            if ft["dtype"] != "video":
                stats[key] = feature_stats(columns[key])

        # 3. metadata, staged; then the videos and data are published and meta/ swapped in: the commit point
        for key in self.features:  # in feature order, as LeRobot flattens its episode stats
            for s, v in stats[key].items():
                row[f"stats/{key}/{s}"] = np.asarray(v).tolist()
        row["meta/episodes/chunk_index"], row["meta/episodes/file_index"] = self._episodes_file
        self._rows.append(row)
        self._ep_stats.append(stats)
        try:
            meta = self._write_meta(self._stage, tasks_changed=self._tasks != tasks_before)
            for rel in staged:
                publish(self._stage / rel, self.root / rel, self._fsync)
            self._commit_meta(meta)
        except BaseException:
            self._rows.pop()
            self._ep_stats.pop()
            self._tasks = tasks_before
            raise
        finally:
            shutil.rmtree(self._stage, ignore_errors=True)
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
        missing = [k for k, ft in self.features.items() if k not in DEFAULT_FEATURES and k not in frames]
        if missing:
            raise ValueError(f"episode lacks declared feature(s) {missing}")
        extra = [k for k in frames if k not in self.features]
        if extra:
            raise ValueError(f"episode has undeclared feature(s) {extra}; declare them in features")
        arrays: dict[str, np.ndarray] = {}
        length: int | None = None
        for key, value in frames.items():
            if key in DEFAULT_FEATURES and key != "timestamp":
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

    def _commit_meta(self, written: list[str]) -> None:
        """Make the staged ``meta/`` the dataset's, in one step where the platform allows (see the module
        docstring); ``written`` are the staged files, relative to the root, in the order of the fallback."""
        staged, live = self._stage / META_DIR, self.root / META_DIR
        if not live.exists():  # a new dataset: its whole meta/ appears by one rename
            if self._fsync:
                atomic.fsync_tree(staged)
            os.replace(staged, live)
            if self._fsync:
                atomic.fsync_dir(self.root)
            return
        atomic.link_tree(live, staged, self._fsync)
        if atomic.exchange(staged, live):  # the old meta/ is now in the staging area, which the caller removes
            if self._fsync:
                atomic.fsync_dir(self.root)
            return
        for rel in written:  # back to back; the episodes file is the commit point here
            (self.root / rel).parent.mkdir(parents=True, exist_ok=True)
            os.replace(self._stage / rel, self.root / rel)
        if self._fsync:
            for directory in sorted({(self.root / rel).parent for rel in written}):
                atomic.fsync_dir(directory)

    def _write_meta(self, base: Path, tasks_changed: bool = True) -> list[str]:
        """Write info, stats, tasks (if changed) and this writer's episodes file under ``base`` (the staging
        area); return their paths relative to it, in the fallback's publishing order (`_commit_meta`)."""
        n = len(self._rows)
        self.info["total_episodes"] = n
        self.info["total_frames"] = self.num_frames
        self.info["total_tasks"] = len(self._tasks)
        self.info["splits"] = {"train": f"0:{n}"} if n else {}
        written = []
        if tasks_changed:
            write_table(base / TASKS_PATH, tasks_table(self._tasks), self._fsync)
            written.append(TASKS_PATH)
        if n > self._first_row:
            chunk, file = self._episodes_file
            rel = EPISODES_PATH.format(chunk_index=chunk, file_index=file)
            table = episodes_table(self._rows[self._first_row:], self._episodes_schema)
            write_table(base / rel, table, self._fsync)
            written.append(rel)
        write_total_stats(base / STATS_PATH, self._ep_stats, self._fsync, existing=self.root / STATS_PATH)
        write_json(base / INFO_PATH, self.info, self._fsync)
        return [*written, INFO_PATH, STATS_PATH]
