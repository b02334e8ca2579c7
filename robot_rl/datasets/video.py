"""Camera streams as H.264 (libx264, yuv420p) mp4 files: encoding with one retry, decoding to uint8 frames."""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.datasets.atomic import commit, tmp_path
from robot_rl.datasets.format import EPISODES_DIR, VIDEO_PATH, DatasetError

DECODE_ATTEMPTS = 3  # decoding is read-only, so trying again is free


def encode_video(path: Path, frames: np.ndarray, fps: int, crf: int, gop: int, fsync: bool) -> None:
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
    tmp = tmp_path(path)
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
    commit(tmp, path, fsync)


def read_video_frames(
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
    # Retries: an ffmpeg child can fail for reasons that are not the file's (seen here: gRPC's fork handler printed
    # an epoll error into the child's stderr between fork and exec, hiding ffmpeg's stream description; under
    # load that happened on two tries in a row).
    for attempt in range(1, DECODE_ATTEMPTS + 1):
        try:
            gen = imageio_ffmpeg.read_frames(str(path), pix_fmt="rgb24")
            meta = next(gen)
            fw, fh = meta["size"]
            frames = [np.frombuffer(buf, dtype=np.uint8).reshape(fh, fw, 3) for buf in gen]
            break
        except (OSError, RuntimeError, StopIteration) as exc:
            if attempt == DECODE_ATTEMPTS:
                raise DatasetError(f"{path}: cannot decode ({exc}); the video is damaged (re-record it)") from None
    if (fh, fw) != (h, w):
        raise DatasetError(f"{path}: frames are {fh}x{fw}, info.json says {h}x{w}")
    return np.stack(frames) if frames else np.zeros((0, h, w, 3), dtype=np.uint8)


