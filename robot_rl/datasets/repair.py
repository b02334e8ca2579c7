"""`repair(root)`: bring a dataset a killed recorder left behind back to exactly its committed episodes."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from robot_rl.datasets.atomic import is_tmp, write_json
from robot_rl.datasets.feature_stats import write_total_stats
from robot_rl.datasets.format import (
    INFO_PATH,
    STAGING_DIR,
    STATS_PATH,
    TASKS_PATH,
    chunk_file,
    load_info,
    read_episode_rows,
    read_tasks,
    stats_from_row,
)


def repair(root: str | os.PathLike[str], *, fsync: bool = True) -> list[Path]:
    """Make a dataset left by a killed writer fully consistent; return the files it removed.

    Deletes the staging area (``.staging/``: the episode that was being written when the writer died, or the
    ``meta/`` it had just replaced; never visible to readers) and temp files. A kill between publishing an
    episode's data / video files and committing its ``meta/`` leaves files after the last listed ones, which no
    episode points to: they are removed. Where ``meta/`` cannot be swapped in one step (see ``writer``), a kill
    can also leave ``info.json`` / ``stats.json`` behind the episodes table: they are rewritten from it. Not
    needed before ``read_dataset`` or LeRobot; the writer runs it when it resumes.
    """
    root = Path(root)
    info = load_info(root)
    rows = read_episode_rows(root)
    removed: list[Path] = []
    stage = root / STAGING_DIR
    if stage.is_dir():
        removed += sorted(p for p in stage.rglob("*") if p.is_file())
        shutil.rmtree(stage)
    for path in sorted(p for p in root.rglob("*") if p.is_file() and is_tmp(p)):
        path.unlink(missing_ok=True)
        removed.append(path)
    keep = {(int(r["data/chunk_index"]), int(r["data/file_index"])) for r in rows}
    for path in sorted((root / "data").glob("chunk-*/file-*.parquet")):
        if chunk_file(path) not in keep:
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
            if chunk_file(path) not in keep_v:
                path.unlink()
                removed.append(path)
    total_frames = int(rows[-1]["dataset_to_index"]) if rows else 0
    n = len(rows)
    tasks = read_tasks(root) if (root / TASKS_PATH).exists() else []
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
        write_json(root / INFO_PATH, fixed, fsync)
    ep_stats = [stats_from_row(r, info["features"]) for r in rows]
    if not rows or all(ep_stats):  # foreign datasets may lack per-episode stats: keep theirs
        write_total_stats(root / STATS_PATH, ep_stats, fsync)
    return removed
