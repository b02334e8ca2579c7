"""Crash-safe file writes: a temporary name in the final directory, fsync, `os.replace`, fsync of the directory.

A file written here is either absent or complete, never half-written; temporary names (``.<name>.tmp-<pid>``)
match no ``*.parquet`` / ``*.mp4`` glob, so readers (ours and LeRobot) never see them. Several files that must
change together (a dataset's ``meta/``) are staged as a complete directory and swapped in by `exchange`."""

from __future__ import annotations

import ctypes
import errno
import functools
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

_TMP_MARK = ".tmp-"

def tmp_path(path: Path) -> Path:
    return path.with_name(f".{path.name}{_TMP_MARK}{os.getpid()}")


def fsync_dir(directory: Path) -> None:
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
        fsync_dir(path.parent)


def publish(staged: Path, path: Path, fsync: bool) -> None:
    """Move a complete, already fsync'ed file from the staging area to its final place (same file system: one
    rename), so it appears there whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    os.replace(staged, path)
    if fsync:
        fsync_dir(path.parent)


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


_AT_FDCWD = -100
_RENAME_EXCHANGE = 2
_UNSUPPORTED = {errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP, errno.ENOTSUP}


@functools.cache
def _renameat2() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2  # glibc >= 2.28
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int
    return fn


def exchange(a: Path, b: Path) -> bool:
    """Swap two existing directories in one step (Linux ``renameat2(RENAME_EXCHANGE)``), so that a reader of
    ``b`` sees all of its old files or all of ``a``'s, never a mix. Returns False, having changed nothing, where
    the platform or the file system cannot (the caller then publishes file by file)."""
    fn = _renameat2()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in _UNSUPPORTED:
        return False
    raise OSError(err, os.strerror(err), str(a), None, str(b))


def link_tree(src: Path, dst: Path, fsync: bool) -> None:
    """Give ``dst`` every file of ``src`` it lacks, as hard links (a copy where the file system has none): the
    staged copy of a directory that `exchange` then swaps in. Files here are only ever replaced by renames, never
    written in place, so sharing them between the two trees is safe."""
    for path in sorted(src.rglob("*")):
        if not path.is_file() or is_tmp(path):
            continue
        target = dst / path.relative_to(src)
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
    if fsync:
        fsync_tree(dst)


def fsync_tree(root: Path) -> None:
    """fsync ``root`` and every directory below it: their entries (new names, links) survive a power cut."""
    for directory in [root, *sorted(p for p in root.rglob("*") if p.is_dir())]:
        fsync_dir(directory)

