"""Crash-safe file writes: a temporary name in the final directory, fsync, `os.replace`, fsync of the directory.

A file written here is either absent or complete, never half-written; temporary names (``.<name>.tmp-<pid>``)
match no ``*.parquet`` / ``*.mp4`` glob, so readers (ours and LeRobot) never see them."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_TMP_MARK = ".tmp-"

def tmp_path(path: Path) -> Path:
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


def commit(tmp: Path, path: Path, fsync: bool) -> None:
    """fsync ``tmp``, rename it onto ``path`` and fsync the directory: ``path`` is old or new, never torn."""
    if fsync:
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
    os.replace(tmp, path)
    if fsync:
        _fsync_dir(path.parent)


def publish(staged: Path, path: Path, fsync: bool) -> None:
    """Move a complete, already fsync'ed file from the staging area to its final place (same file system: one
    rename), so it appears there whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, path)
    if fsync:
        _fsync_dir(path.parent)


def _write_bytes(path: Path, data: bytes, fsync: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    with open(tmp, "wb") as f:
        f.write(data)
    commit(tmp, path, fsync)


def write_json(path: Path, obj: Any, fsync: bool) -> None:
    _write_bytes(path, (json.dumps(obj, indent=4, ensure_ascii=False) + "\n").encode("utf-8"), fsync)


def write_table(path: Path, table: pa.Table, fsync: bool) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    pq.write_table(table, tmp, compression="snappy")
    commit(tmp, path, fsync)


def is_tmp(path: Path) -> bool:
    return path.name.startswith(".") and _TMP_MARK in path.name


