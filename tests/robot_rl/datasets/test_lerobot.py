"""LeRobotDataset v3.0 writer / reader / recorder: round trips, layout, crash safety, videos, errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from robot_rl.datasets import (
    DatasetError,
    DatasetWriter,
    EpisodeRecorder,
    monte_carlo_returns,
    read_dataset,
    repair,
    transition_features,
)

REPO = Path(__file__).resolve().parents[3]
D, A = 3, 2


def make_episode(
    seed: int, length: int, *, terminated: bool = True, images: tuple[int, int] | None = None
) -> dict:
    """Deterministic episode content: a child process and the test can both rebuild it from the seed."""
    rng = np.random.default_rng(seed)
    last = np.arange(length) == length - 1
    ep = {
        "observation.state": rng.normal(size=(length, D)).astype(np.float32),
        "action": rng.uniform(-1, 1, size=(length, A)).astype(np.float32),
        "next.reward": rng.normal(size=length).astype(np.float32),
        "next.done": last.copy(),
        "next.terminated": last & terminated,
        "next.truncated": last & (not terminated),
        "next.success": last & terminated,
        "next.observation.state": rng.normal(size=(length, D)).astype(np.float32),
        "intervention": rng.uniform(size=length) < 0.3,
    }
    if images is not None:
        ep["observation.images.cam"] = smooth_frames(seed, length, *images)
    return ep


def smooth_frames(seed: int, length: int, h: int, w: int) -> np.ndarray:
    """Gradients plus a moving square: compressible content, so MP4 errors stay small."""
    yy, xx = np.mgrid[0:h, 0:w]
    frames = np.empty((length, h, w, 3), dtype=np.uint8)
    for t in range(length):
        frames[t, ..., 0] = (xx * 255 // (w - 1)).astype(np.uint8)
        frames[t, ..., 1] = (yy * 255 // (h - 1)).astype(np.uint8)
        frames[t, ..., 2] = (40 + 20 * seed) % 256
        y0, x0 = (2 * t) % (h - 8), (3 * t) % (w - 8)
        frames[t, y0 : y0 + 8, x0 : x0 + 8] = 255
    return frames


def write(root: Path, lengths: list[int], tasks: list[str] | None = None, **kw) -> DatasetWriter:
    w = DatasetWriter(root, fps=10, features=transition_features(D, A), task="reach", **kw)
    for i, length in enumerate(lengths):
        w.write_episode(make_episode(i, length, terminated=i % 2 == 0), task=tasks[i] if tasks else None)
    return w


# ------------------------------------------------------------------------------------------ round trip


def test_round_trip_exact_values_stats_and_metadata(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    lengths = [5, 1, 8]
    tasks = ["reach", "push", "reach"]
    w = write(root, lengths, tasks)
    assert (w.num_episodes, w.num_frames) == (3, 14)
    eps = [make_episode(i, n, terminated=i % 2 == 0) for i, n in enumerate(lengths)]

    def cat(key: str) -> np.ndarray:
        return np.concatenate([e[key] for e in eps])

    tr = read_dataset(root)
    assert len(tr) == 14
    torch.testing.assert_close(tr.transitions.obs["state"], torch.from_numpy(cat("observation.state")), rtol=0, atol=0)
    torch.testing.assert_close(tr.transitions.action, torch.from_numpy(cat("action")), rtol=0, atol=0)
    torch.testing.assert_close(tr.transitions.reward, torch.from_numpy(cat("next.reward")), rtol=0, atol=0)
    torch.testing.assert_close(tr.transitions.next_obs["state"], torch.from_numpy(cat("next.observation.state")), rtol=0, atol=0)
    assert torch.equal(tr.transitions.terminated, torch.from_numpy(cat("next.terminated")))
    assert torch.equal(tr.transitions.truncated, torch.from_numpy(cat("next.truncated")))
    assert torch.equal(tr.success, torch.from_numpy(cat("next.success")))
    assert torch.equal(tr.intervention, torch.from_numpy(cat("intervention")))
    assert tr.episode_index.tolist() == [0] * 5 + [1] + [2] * 8
    assert tr.frame_index.tolist() == list(range(5)) + [0] + list(range(8))
    assert tr.transitions.obs["state"].dtype == torch.float32 and tr.transitions.terminated.dtype == torch.bool
    assert tr.episodes.length.tolist() == lengths and tr.episodes.start.tolist() == [0, 5, 6]
    assert tr.episodes.task == tasks and tr.tasks == ["reach", "push"]

    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (3, 14, 2)
    assert info["splits"] == {"train": "0:3"} and info["chunks_size"] == 1000
    assert info["data_path"] == "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet"
    assert info["video_path"] is None
    assert info["features"]["observation.state"]["shape"] == [D]
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert info["features"][key]["shape"] == [1]

    # stats.json against numpy over all frames
    stats = json.loads((root / "meta/stats.json").read_text())
    s = cat("observation.state").astype(np.float64)
    np.testing.assert_allclose(stats["observation.state"]["mean"], s.mean(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["std"], s.std(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["min"], s.min(0), rtol=1e-6)
    np.testing.assert_allclose(stats["observation.state"]["max"], s.max(0), rtol=1e-6)
    assert stats["observation.state"]["count"] == [14]
    np.testing.assert_allclose(
        stats["next.reward"]["mean"], [cat("next.reward").astype(np.float64).mean()], rtol=1e-6
    )
    assert stats["index"]["min"] == [0] and stats["index"]["max"] == [13]
    assert set(stats) == set(info["features"])

    # episodes table: indices consistent with the data files
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert [r["episode_index"] for r in rows] == [0, 1, 2]
    start = 0
    for e, (r, n) in enumerate(zip(rows, lengths, strict=True)):
        assert (r["length"], r["dataset_from_index"], r["dataset_to_index"]) == (n, start, start + n)
        assert (r["data/chunk_index"], r["data/file_index"]) == (0, e)
        assert r["tasks"] == [tasks[e]]
        assert (r["meta/episodes/chunk_index"], r["meta/episodes/file_index"]) == (0, 0)
        np.testing.assert_allclose(
            r["stats/observation.state/mean"], eps[e]["observation.state"].mean(0), rtol=1e-5
        )
        assert r["stats/action/count"] == [n]
        data = pq.read_table(root / f"data/chunk-000/file-{e:03d}.parquet")
        assert data.column("index").to_pylist() == list(range(start, start + n))
        assert data.column("episode_index").to_pylist() == [e] * n
        np.testing.assert_allclose(data.column("timestamp").to_numpy(), np.arange(n) / 10, rtol=1e-6)
        start += n

    # parquet column types as LeRobot's features -> HF features mapping expects
    schema = pq.read_schema(root / "data/chunk-000/file-000.parquet")
    assert schema.field("observation.state").type == pa.list_(pa.float32(), D)
    assert schema.field("action").type == pa.list_(pa.float32(), A)
    assert schema.field("next.reward").type == pa.float32()
    assert schema.field("next.done").type == pa.bool_()
    assert schema.field("timestamp").type == pa.float32()
    for key in ("frame_index", "episode_index", "index", "task_index"):
        assert schema.field(key).type == pa.int64()
    data1 = pq.read_table(root / "data/chunk-000/file-001.parquet")
    assert data1.column("task_index").to_pylist() == [1]


def test_tasks_parquet_is_a_pandas_frame_indexed_by_task(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write(root, [2, 2], ["reach", "push"])
    table = pq.read_table(root / "meta/tasks.parquet")
    meta = json.loads(table.schema.metadata[b"pandas"])
    assert meta["index_columns"] == ["task"]
    assert table.column("task").to_pylist() == ["reach", "push"]
    assert table.column("task_index").to_pylist() == [0, 1]
    pd = pytest.importorskip("pandas")
    df = pd.read_parquet(root / "meta/tasks.parquet")
    assert int(df.loc["push"].task_index) == 1 and df.iloc[0].name == "reach"


def test_resume_appends_and_existing_dataset_needs_a_flag(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write(root, [3, 4])
    with pytest.raises(DatasetError, match="resume=True"):
        DatasetWriter(root, fps=10, features=transition_features(D, A))
    with pytest.raises(DatasetError, match="features differ"):
        DatasetWriter(root, fps=10, features=transition_features(D + 1, A), resume=True)
    w = DatasetWriter(root, fps=10, features=transition_features(D, A), resume=True)
    assert w.write_episode(make_episode(2, 5)) == 2
    tr = read_dataset(root)
    assert tr.episodes.length.tolist() == [3, 4, 5]
    assert tr.episode_index.unique().tolist() == [0, 1, 2]
    torch.testing.assert_close(tr.transitions.obs["state"][7:], torch.from_numpy(make_episode(2, 5)["observation.state"]))
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats["observation.state"]["count"] == [12]
    w2 = DatasetWriter(root, fps=10, features=transition_features(D, A), overwrite=True)
    assert w2.num_episodes == 0 and not (root / "data/chunk-000/file-000.parquet").exists()


def test_chunking_follows_chunks_size(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    write(root, [2, 2, 2], chunks_size=2)
    assert (root / "data/chunk-000/file-001.parquet").is_file()
    assert (root / "data/chunk-001/file-000.parquet").is_file()
    assert read_dataset(root).episodes.length.tolist() == [2, 2, 2]


# ------------------------------------------------------------------------------------------ crash safety

CHILD = """
import sys, time
sys.path.insert(0, {repo!r})
sys.path.insert(0, {testdir!r})
import numpy as np
from robot_rl.datasets import DatasetWriter, transition_features
import robot_rl.datasets.writer as writer_module
from test_lerobot import make_episode

mode = sys.argv[1]
w = DatasetWriter(sys.argv[2], fps=10, features=transition_features(3, 2), task="reach")
if mode == "mid_episode":
    for i in range(3):
        w.write_episode(make_episode(i, 4 + i))
    partial = make_episode(3, 50)          # an episode being recorded frame by frame, never finished
    print("READY", flush=True)
    time.sleep(60)
elif mode == "in_commit":
    real = writer_module.write_table
    def slow(path, table, fsync):
        if "meta/episodes" in str(path) and table.num_rows == 4:
            print("READY", flush=True)     # data file of episode 3 is on disk, its commit is not
            time.sleep(60)
        real(path, table, fsync)
    writer_module.write_table = slow
    for i in range(5):
        w.write_episode(make_episode(i, 4 + i))
elif mode == "in_video":
    w = DatasetWriter(sys.argv[2] + "_video", fps=10, features=transition_features(3, 2, images={{"cam": (16, 16)}}))
    real = writer_module.encode_video
    def slow_video(path, frames, *args):
        real(path, frames, *args)
        if "file-002" in str(path):
            print("READY", flush=True)     # episode 2's video is encoded (staged), its frames are not written
            time.sleep(60)
    writer_module.encode_video = slow_video
    for i in range(3):
        w.write_episode(make_episode(i, 4 + i, images=(16, 16)))
elif mode == "loop":
    i = 0
    while True:
        w.write_episode(make_episode(i, 3 + i % 5))
        i += 1
        print("DONE", i, flush=True)
"""


def spawn(tmp_path: Path, mode: str, root: Path) -> subprocess.Popen:
    script = tmp_path / "child.py"
    script.write_text(CHILD.format(repo=str(REPO), testdir=str(Path(__file__).parent)))
    return subprocess.Popen(
        [sys.executable, str(script), mode, str(root)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


def wait_line(proc: subprocess.Popen, prefix: str, timeout: float = 60.0) -> str:
    deadline = time.monotonic() + timeout
    assert proc.stdout is not None
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if line.startswith(prefix):
            return line
        if not line and proc.poll() is not None:
            raise AssertionError(f"child exited with {proc.returncode} before printing {prefix}")
    raise AssertionError(f"child did not print {prefix} in {timeout}s")


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL


def check_episodes(root: Path, lengths: list[int]) -> None:
    tr = read_dataset(root)
    assert tr.episodes.length.tolist() == lengths
    for i, n in enumerate(lengths):
        sel = tr.episode_index == i
        torch.testing.assert_close(tr.transitions.obs["state"][sel], torch.from_numpy(make_episode(i, n)["observation.state"]))
        torch.testing.assert_close(tr.transitions.action[sel], torch.from_numpy(make_episode(i, n)["action"]))


def lerobot_view(root: Path, *, trailing_ok: bool = False) -> tuple[int, int]:
    """The dataset as LeRobot sees it, read the way LeRobot reads it and with no robot_rl code: ``info.json``
    totals, every row of ``data/*/*.parquet`` (``load_nested_dataset`` globs them all), every row of
    ``meta/episodes/*/*.parquet`` (all files concatenated, so they must share one schema), ``stats.json``
    counts, and every ``videos/*/*/*.mp4``. Asserts that they describe the same episodes; returns
    (episodes, frames).

    ``trailing_ok``: a data / video file that no episode lists is allowed if it sorts after every listed one (a
    kill between publishing an episode's files and committing its meta/). LeRobot never indexes its rows (the
    dataset's length is info.json's total_frames and those rows come last) and its resume writes that very
    path; everything else must still agree."""
    info = json.loads((root / "meta/info.json").read_text())
    files = sorted((root / "meta/episodes").glob("*/*.parquet"))
    episodes = pa.concat_tables([pq.read_table(p) for p in files]).to_pylist() if files else []

    def present(paths: list[Path], listed: set[str]) -> list[Path]:
        """The files LeRobot's view rests on: all of them, or with ``trailing_ok`` all but trailing unlisted ones."""
        names = [str(p.relative_to(root)) for p in sorted(paths)]
        if not trailing_ok:
            return sorted(paths)
        extra = [n for n in names if n not in listed]
        assert all(n > max(listed, default="") for n in extra), (extra, sorted(listed))
        return [root / n for n in names if n in listed]

    listed_data = {info["data_path"].format(chunk_index=e["data/chunk_index"], file_index=e["data/file_index"])
                   for e in episodes}
    data = [pq.read_table(p) for p in present(list((root / "data").glob("*/*.parquet")), listed_data)]
    frames = sum(t.num_rows for t in data)
    assert (info["total_episodes"], info["total_frames"]) == (len(episodes), frames), (info, len(episodes), frames)
    assert info["splits"] == ({"train": f"0:{len(episodes)}"} if episodes else {})
    assert sum(e["length"] for e in episodes) == frames
    in_data = sorted({i for t in data for i in t.column("episode_index").to_pylist()})
    assert in_data == sorted(e["episode_index"] for e in episodes) == list(range(len(episodes)))
    stats = json.loads((root / "meta/stats.json").read_text())
    assert stats.get("index", {}).get("count", [0]) == [frames]
    for key in [k for k, ft in info["features"].items() if ft["dtype"] == "video"]:
        listed = {info["video_path"].format(video_key=key, chunk_index=e[f"videos/{key}/chunk_index"],
                                            file_index=e[f"videos/{key}/file_index"]) for e in episodes}
        on_disk = present(list((root / "videos" / key).glob("*/*.mp4")), listed)
        assert sorted(str(p.relative_to(root)) for p in on_disk) == sorted(listed)
    return len(episodes), frames


def test_sigkill_mid_episode_keeps_every_finished_episode(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    proc = spawn(tmp_path, "mid_episode", root)
    wait_line(proc, "READY")
    kill(proc)
    check_episodes(root, [4, 5, 6])
    assert lerobot_view(root) == (3, 15)


def test_sigkill_while_an_episode_is_written_leaves_only_complete_episodes_visible(tmp_path: Path) -> None:
    """Killed after episode 3's data file and metadata were written, before they were published: without any
    repair, LeRobot's paths describe episodes 0-2 only; episode 3 sits in the staging area."""
    root = tmp_path / "ds"
    proc = spawn(tmp_path, "in_commit", root)
    wait_line(proc, "READY")
    kill(proc)
    staged = root / ".staging/data/chunk-000/file-003.parquet"
    assert staged.is_file() and not (root / "data/chunk-000/file-003.parquet").exists()
    assert lerobot_view(root) == (3, 15)  # before repair
    check_episodes(root, [4, 5, 6])
    removed = repair(root)
    assert staged in removed and not (root / ".staging").exists()
    assert lerobot_view(root) == (3, 15)
    w = DatasetWriter(root, fps=10, features=transition_features(D, A), resume=True)
    assert w.write_episode(make_episode(3, 7)) == 3
    check_episodes(root, [4, 5, 6, 7])
    assert lerobot_view(root) == (4, 22)


def test_sigkill_while_a_video_is_encoded_leaves_no_trace_of_it(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    proc = spawn(tmp_path, "in_video", root)
    wait_line(proc, "READY")
    kill(proc)
    root = tmp_path / "ds_video"
    assert (root / ".staging/videos/observation.images.cam/chunk-000/file-002.mp4").is_file()
    assert lerobot_view(root) == (2, 9)  # before repair: two episodes, their two videos, nothing of the third
    tr = read_dataset(root, load_images=True)
    assert tr.episodes.length.tolist() == [4, 5] and tr.transitions.obs["pixels/cam"].shape[0] == 9
    repair(root)
    assert not (root / ".staging").exists() and lerobot_view(root) == (2, 9)


def test_a_kill_between_the_renames_is_repaired(tmp_path: Path) -> None:
    """A kill after an episode's data file was published but before its meta/ was swapped in: the data file
    trails every listed one (LeRobot never indexes it) and repair() removes it."""
    root = tmp_path / "ds"
    write(root, [4, 5]).close()
    w = DatasetWriter(root, fps=10, features=transition_features(D, A), resume=True)
    import robot_rl.datasets.writer as writer_module

    real = writer_module.publish

    def die_after_data(staged: Path, path: Path, fsync: bool) -> None:
        real(staged, path, fsync)
        if path.parent.parent.name == "data":
            raise KeyboardInterrupt  # stands in for the kill: nothing after this line runs in a killed process

    writer_module.publish = die_after_data
    try:
        with pytest.raises(KeyboardInterrupt):
            w.write_episode(make_episode(2, 6))
    finally:
        writer_module.publish = real
    assert (root / "data/chunk-000/file-002.parquet").is_file()  # published, but not committed
    check_episodes(root, [4, 5])
    assert lerobot_view(root, trailing_ok=True) == (2, 9)
    assert root / "data/chunk-000/file-002.parquet" in repair(root)
    assert lerobot_view(root) == (2, 9)


def test_sigkill_at_arbitrary_moments_leaves_a_readable_prefix(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    for trial in range(2):
        root = tmp_path / f"ds{trial}"
        proc = spawn(tmp_path, "loop", root)
        done = int(wait_line(proc, "DONE 3").split()[1])
        time.sleep(float(rng.uniform(0.0, 0.05)))
        kill(proc)
        assert proc.stdout is not None
        for line in proc.stdout.read().splitlines():
            if line.startswith("DONE"):
                done = int(line.split()[1])
        files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
        tr = read_dataset(root)
        n = len(tr.episodes)
        # killed after a commit but before its print: one more
        assert n in (done, done + 1), (trial, n, done, files)
        check_episodes(root, [3 + i % 5 for i in range(n)])
        assert not [p for p in root.rglob("*.parquet") if p.name.startswith(".")], (trial, files)
        assert lerobot_view(root, trailing_ok=True)[0] == n, (trial, files)  # before any repair
        repair(root)
        assert lerobot_view(root)[0] == n


class Killed(BaseException):
    """Stands in for SIGKILL inside the test process (a BaseException, so no `except Exception` swallows it)."""


def die_after(monkeypatch: pytest.MonkeyPatch, step: int | None) -> list[str]:
    """Count every change the writer makes to the file system (renames, links, unlinks, directory removals, the
    meta/ swap) as one step, and after step ``step`` (never with None) be dead: each later change raises
    `Killed` without being made, as nothing runs after a SIGKILL (temp files written under names no reader
    looks at are not steps). Returns the list of the steps taken, which grows as they happen."""
    import robot_rl.datasets.atomic as atomic_module

    taken: list[str] = []

    def counted(name: str, real):
        def step_fn(*args, **kwargs):
            if step is not None and len(taken) >= step:
                raise Killed(name)
            result = real(*args, **kwargs)
            taken.append(f"{name} {args[-1] if name == 'exchange' else args[0]}")
            return result
        return step_fn

    for name in ("replace", "rename", "link", "unlink", "rmdir"):
        monkeypatch.setattr(os, name, counted(name, getattr(os, name)))
    if hasattr(atomic_module, "exchange"):
        monkeypatch.setattr(atomic_module, "exchange", counted("exchange", atomic_module.exchange))
    return taken


def kill_points(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, images: tuple[int, int] | None):
    """For every step of writing episode 2 into a committed 2-episode dataset: a copy of the dataset killed right
    after that step. Yields (step, steps taken, root)."""
    import shutil

    feats = transition_features(D, A, images={"cam": images} if images else None)
    base = tmp_path / "base"
    w = DatasetWriter(base, fps=10, features=feats, task="reach")
    for i, n in enumerate([4, 5]):
        w.write_episode(make_episode(i, n, images=images))
    total = None
    step = 0
    while total is None or step <= total:
        root = tmp_path / f"k{step}"
        shutil.copytree(base, root)
        w = DatasetWriter(root, fps=10, features=feats, resume=True)
        with monkeypatch.context() as m:
            taken = die_after(m, step if total is not None else None)
            try:
                w.write_episode(make_episode(2, 6, images=images))
            except Killed:
                pass
        if total is None:  # the first pass only counts the steps
            total = len(taken)
            shutil.rmtree(root)
            continue
        yield step, list(taken), root
        step += 1


def test_at_every_kill_point_lerobots_files_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A kill between any two file-system changes of an episode's commit: info.json totals, meta/episodes,
    stats.json and the data / video files LeRobot indexes describe the same episodes (before the fix, a kill
    after the episodes file but before info.json left info.json one episode behind, and LeRobot's resume then
    wrote an episode index twice); our reader reads exactly those; repair() removes the rest; appending goes on."""
    seen = []
    for step, taken, root in kill_points(tmp_path, monkeypatch, images=(16, 16)):
        n, _ = lerobot_view(root, trailing_ok=True)
        assert n in (2, 3), (step, taken)
        assert not seen or n >= seen[-1], (step, taken)  # once committed, committed
        seen.append(n)
        check_episodes(root, [4, 5, 6][:n])
        repair(root)
        assert lerobot_view(root)[0] == n and not (root / ".staging").exists()
        w = DatasetWriter(root, fps=10, features=transition_features(D, A, images={"cam": (16, 16)}), resume=True)
        w.write_episode(make_episode(n, 3, images=(16, 16)))
        assert lerobot_view(root)[0] == n + 1
        check_episodes(root, [4, 5, 6][:n] + [3])
    assert seen[0] == 2 and seen[-1] == 3


def test_without_the_meta_swap_the_reader_and_repair_still_agree(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Where meta/ cannot be swapped in one step (no RENAME_EXCHANGE), its files are renamed back to back; a kill
    between them may leave info.json / stats.json behind the episodes table, which the reader trusts and from
    which repair() rewrites them."""
    import robot_rl.datasets.atomic as atomic_module

    monkeypatch.setattr(atomic_module, "exchange", lambda a, b: False, raising=False)
    behind = 0
    for step, taken, root in kill_points(tmp_path, monkeypatch, images=None):
        n = len(read_dataset(root).episodes)
        assert n in (2, 3), (step, taken)
        check_episodes(root, [4, 5, 6][:n])
        try:
            lerobot_view(root, trailing_ok=True)
        except AssertionError:
            behind += 1
        repair(root)
        assert lerobot_view(root)[0] == n
    assert 1 <= behind <= 2  # only after the episodes file, before info.json / stats.json


# ------------------------------------------------------------------------------------------ recorder


class FakeBatchedStream:
    """3 envs whose episodes end at different steps; state = [env, episode-of-env, t]."""

    ends = {0: {3: "term"}, 1: {5: "trunc"}, 2: {2: "term", 6: "trunc"}}  # env -> {step: how} (1-based t)

    def __init__(self) -> None:
        self.ep = [0, 0, 0]
        self.t = [0, 0, 0]

    def obs(self) -> dict[str, torch.Tensor]:
        return {"state": torch.tensor([[i, self.ep[i], self.t[i]] for i in range(3)], dtype=torch.float32)}

    def step(self, step: int, action: torch.Tensor):
        n = 3
        term, trunc = torch.zeros(n, dtype=torch.bool), torch.zeros(n, dtype=torch.bool)
        final = []
        for i in range(n):
            self.t[i] += 1
            how = self.ends[i].get(step)
            term[i], trunc[i] = how == "term", how == "trunc"
            # the true last observation carries a marker (+100) so the test can tell it from a reset obs
            final.append([i, self.ep[i], self.t[i] + (100 if how else 0)])
            if how:
                self.ep[i] += 1
                self.t[i] = 0
        reward = action[:, 0] * 10
        info = {"final_obs": {"state": torch.tensor(final, dtype=torch.float32)}, "success": term.clone()}
        return self.obs(), reward, term, trunc, info


def test_recorder_separates_envs_and_uses_final_obs(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    writer = DatasetWriter(root, fps=10, features=transition_features(D, A), task="reach")
    rec = EpisodeRecorder(writer, num_envs=3, task="reach")
    env = FakeBatchedStream()
    obs = env.obs()
    written = []
    for step in range(1, 8):
        action = torch.tensor([[0.1 * step + i, -0.1 * i] for i in range(3)], dtype=torch.float32)
        next_obs, reward, term, trunc, info = env.step(step, action)
        written += rec.record(obs, action, reward, term, trunc, info)
        obs = next_obs
    assert written == [0, 1, 2, 3]
    assert rec.pending_frames == [4, 2, 1]
    assert rec.close() == 7
    tr = read_dataset(root)
    # write order: env2 ends at step 2, env0 at 3, env1 at 5, env2 again at 6
    assert tr.episodes.length.tolist() == [2, 3, 5, 4]
    env_of_episode = [2, 0, 1, 2]
    for e, env_id in enumerate(env_of_episode):
        sel = tr.episode_index == e
        s, ns = tr.transitions.obs["state"][sel], tr.transitions.next_obs["state"][sel]
        assert (s[:, 0] == env_id).all() and (s[:, 2] == torch.arange(len(s))).all()
        assert len(s[:, 1].unique()) == 1  # a single episode of that env
        torch.testing.assert_close(ns[:-1], s[1:])  # next obs = following obs inside the episode
        assert ns[-1, 2] == len(s) + 100 and ns[-1, 0] == env_id  # final_obs, not the reset obs
        assert tr.transitions.terminated[sel][:-1].sum() == 0 and tr.transitions.truncated[sel][:-1].sum() == 0
    assert tr.transitions.terminated[tr.episode_index == 1][-1] and not tr.transitions.truncated[tr.episode_index == 1][-1]
    assert tr.transitions.truncated[tr.episode_index == 2][-1] and not tr.transitions.terminated[tr.episode_index == 2][-1]
    assert tr.success.sum() == 2  # env2's first episode and env0's terminated with success
    torch.testing.assert_close(tr.transitions.reward, tr.transitions.action[:, 0] * 10)
    data = pq.read_table(root / "data/chunk-000/file-001.parquet")
    assert data.column("next.done").to_pylist() == [False, False, True]


def test_recorder_accepts_next_obs_and_complains_without_final_obs(tmp_path: Path) -> None:
    writer = DatasetWriter(tmp_path / "ds", fps=10, features=transition_features(D, A))
    rec = EpisodeRecorder(writer, num_envs=1)
    o = {"state": torch.zeros(1, D)}
    o2 = {"state": torch.ones(1, D)}
    done = torch.ones(1, dtype=torch.bool)
    rec.record(o, torch.zeros(1, A), torch.zeros(1), ~done, ~done, {}, next_obs=o2)
    with pytest.raises(ValueError, match="final_obs"):
        rec.record(o2, torch.zeros(1, A), torch.zeros(1), done, ~done, {})


def test_recorder_maps_camera_groups_to_image_features(tmp_path: Path) -> None:
    """`observation.images.<name>` is filled from the group `<name>`, else from the camera group `pixels/<name>`
    (what `format.camera_feature` names it); `collect` writes `pixels/front` as `observation.images.front`."""
    from robot_rl.datasets.format import camera_feature

    assert camera_feature("pixels/front") == "observation.images.front"
    assert camera_feature("pixels") == "observation.images.pixels"
    with pytest.raises(ValueError, match="no dataset feature name"):
        camera_feature("pixels/a/b")
    writer = DatasetWriter(tmp_path / "ds", fps=10, features=transition_features(D, A, images={"front": (16, 16)}),
                           fsync=False)
    rec = EpisodeRecorder(writer, num_envs=1)
    frame = torch.full((1, 16, 16, 3), 7, dtype=torch.uint8)
    o = {"state": torch.zeros(1, D), "pixels/front": frame}
    done = torch.ones(1, dtype=torch.bool)
    rec.record(o, torch.zeros(1, A), torch.zeros(1), done, ~done, {"final_obs": o})
    assert rec.obs_keys == {"state": "observation.state", "pixels/front": "observation.images.front"}
    assert rec.episodes_written == [0]


# ------------------------------------------------------------------------------------------ videos


def test_video_round_trip(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    h, w = 32, 48
    feats = transition_features(D, A, images={"cam": (h, w)})
    writer = DatasetWriter(root, fps=10, features=feats, task="look")
    eps = [make_episode(i, n, images=(h, w)) for i, n in enumerate([6, 9])]
    for ep in eps:
        writer.write_episode(ep)
    info = json.loads((root / "meta/info.json").read_text())
    ft = info["features"]["observation.images.cam"]
    assert (
        ft["dtype"] == "video" and ft["shape"] == [h, w, 3] and ft["names"] == ["height", "width", "channels"]
    )
    assert ft["info"]["video.codec"] == "h264" and ft["info"]["video.pix_fmt"] == "yuv420p"
    assert info["video_path"] == "videos/{video_key}/chunk-{chunk_index:03d}/file-{file_index:03d}.mp4"
    for e in range(2):
        assert (root / f"videos/observation.images.cam/chunk-000/file-{e:03d}.mp4").is_file()
    rows = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    assert rows[1]["videos/observation.images.cam/from_timestamp"] == 0.0
    assert rows[1]["videos/observation.images.cam/to_timestamp"] == pytest.approx(0.9)
    stats = json.loads((root / "meta/stats.json").read_text())["observation.images.cam"]
    assert np.asarray(stats["mean"]).shape == (3, 1, 1) and stats["count"] == [15]
    frames = np.concatenate([e["observation.images.cam"] for e in eps]).astype(np.float64) / 255
    np.testing.assert_allclose(np.asarray(stats["mean"]).reshape(3), frames.mean((0, 1, 2)), atol=1e-9)

    assert "pixels/cam" not in read_dataset(root).transitions.obs
    tr = read_dataset(root, load_images=True)
    img = tr.transitions.obs["pixels/cam"]
    assert img.shape == (15, h, w, 3) and img.dtype == torch.uint8
    original = np.concatenate([e["observation.images.cam"] for e in eps]).astype(np.float64)
    err = np.abs(img.numpy().astype(np.float64) - original)
    assert err.mean() < 4.0, err.mean()
    per_frame = err.mean(axis=(1, 2, 3))
    assert per_frame.max() < 8.0  # frames are in order (a shifted frame would miss the square by far)


def test_video_encode_survives_one_ffmpeg_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An ffmpeg child that dies mid-episode (a broken pipe, seen once in CI) costs a retry, not the episode."""
    import imageio_ffmpeg

    real = imageio_ffmpeg.write_frames
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        gen = real(*args, **kwargs)
        if calls["n"] > 1:
            return gen

        def broken():  # primes the real writer, then fails on the first frame as a dead ffmpeg would
            try:
                gen.send(None)
                yield
                raise OSError("[Errno 32] Broken pipe")
            finally:
                gen.close()

        return broken()

    monkeypatch.setattr(imageio_ffmpeg, "write_frames", flaky)
    root = tmp_path / "ds"
    h, w = 32, 48
    writer = DatasetWriter(root, fps=10, features=transition_features(D, A, images={"cam": (h, w)}), task="t")
    ep = make_episode(0, 5, images=(h, w))
    with pytest.warns(UserWarning, match="retrying once"):
        writer.write_episode(ep)
    assert calls["n"] == 2
    video_dir = root / "videos/observation.images.cam/chunk-000"
    assert sorted(p.name for p in video_dir.iterdir()) == ["file-000.mp4"]  # no temp file left behind
    img = read_dataset(root, load_images=True).transitions.obs["pixels/cam"]
    assert img.shape == (5, h, w, 3)


def test_odd_video_size_is_rejected(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="even"):
        DatasetWriter(tmp_path / "ds", fps=10, features=transition_features(D, A, images={"cam": (31, 48)}))


# ------------------------------------------------------------------------------------------ foreign data


def test_reads_dataset_without_rl_columns_and_multi_episode_files(tmp_path: Path) -> None:
    """Like a LeRobot-recorded dataset: no next.* columns, several episodes in one data file."""
    root = tmp_path / "ds"
    feats = transition_features(D, A, rl_columns=False)
    writer = DatasetWriter(root, fps=10, features=feats)
    lengths = [3, 4]
    eps = [{k: make_episode(i, n)[k] for k in ("observation.state", "action")} for i, n in enumerate(lengths)]
    for ep in eps:
        writer.write_episode(ep)
    # pack both episodes into data file 0, LeRobot style, and point the episodes table at it
    t0 = pq.read_table(root / "data/chunk-000/file-000.parquet")
    t1 = pq.read_table(root / "data/chunk-000/file-001.parquet")
    pq.write_table(pa.concat_tables([t1, t0]), root / "data/chunk-000/file-000.parquet")  # order shuffled
    (root / "data/chunk-000/file-001.parquet").unlink()
    ep_path = root / "meta/episodes/chunk-000/file-000.parquet"
    rows = pq.read_table(ep_path).to_pylist()
    rows[1]["data/file_index"] = 0
    pq.write_table(pa.Table.from_pylist(rows), ep_path)

    tr = read_dataset(root)
    obs = np.concatenate([e["observation.state"] for e in eps])
    torch.testing.assert_close(tr.transitions.obs["state"], torch.from_numpy(obs))
    expected_next = obs.copy()
    expected_next[0:2] = obs[1:3]
    expected_next[3:6] = obs[4:7]  # last frames (2 and 6) keep their own state
    torch.testing.assert_close(tr.transitions.next_obs["state"], torch.from_numpy(expected_next))
    assert tr.transitions.truncated.tolist() == [False, False, True, False, False, False, True]
    assert not tr.transitions.terminated.any() and not tr.success.any() and not tr.intervention.any()
    assert torch.equal(tr.transitions.reward, torch.zeros(7))


def test_next_done_marks_termination_when_no_terminated_column(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    feats = transition_features(D, A, rl_columns=False)
    feats["next.done"] = {"dtype": "bool", "shape": [1], "names": None}
    feats["next.reward"] = {"dtype": "float32", "shape": [1], "names": None}
    writer = DatasetWriter(root, fps=10, features=feats)
    ep = make_episode(0, 4)
    writer.write_episode({k: ep[k] for k in ("observation.state", "action", "next.done", "next.reward")})
    tr = read_dataset(root)
    assert tr.transitions.terminated.tolist() == [False, False, False, True]
    assert not tr.transitions.truncated.any()
    torch.testing.assert_close(tr.transitions.reward, torch.from_numpy(ep["next.reward"]))


# ------------------------------------------------------------------------------------------ errors


def test_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="no such directory"):
        read_dataset(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match=r"info.json missing"):
        read_dataset(tmp_path / "empty")

    root = tmp_path / "ds"
    write(root, [3, 2])
    info_path = root / "meta/info.json"
    good = info_path.read_text()
    info_path.write_text(good[:40])
    with pytest.raises(DatasetError, match="not valid JSON") as exc:
        read_dataset(root)
    assert str(info_path) in str(exc.value) and "\n" not in str(exc.value)
    info_path.write_text(good.replace('"v3.0"', '"v2.1"'))
    with pytest.raises(DatasetError, match="convert_dataset_v21_to_v30"):
        read_dataset(root)
    info_path.write_text(good)
    (root / "data/chunk-000/file-001.parquet").unlink()
    with pytest.raises(DatasetError, match="file-001.parquet: listed in meta/episodes but missing"):
        read_dataset(root)
    (root / "data/chunk-000/file-000.parquet").write_bytes(b"PAR1 garbage")
    with pytest.raises(DatasetError, match="unreadable"):
        read_dataset(root)
    assert issubclass(DatasetError, ValueError)


def test_write_episode_validates(tmp_path: Path) -> None:
    w = DatasetWriter(tmp_path / "ds", fps=10, features=transition_features(D, A))
    ep = make_episode(0, 3)
    with pytest.raises(ValueError, match="lacks declared"):
        w.write_episode({k: v for k, v in ep.items() if k != "action"})
    with pytest.raises(ValueError, match="undeclared"):
        w.write_episode({**ep, "other": np.zeros(3)})
    with pytest.raises(ValueError, match="frames"):
        w.write_episode({**ep, "action": ep["action"][:2]})
    with pytest.raises(ValueError, match="NaN"):
        w.write_episode({**ep, "next.reward": np.full(3, np.nan, np.float32)})
    assert w.num_episodes == 0 and read_dataset(tmp_path / "ds").transitions.obs["state"].shape == (0, D)


# ------------------------------------------------------------------------------------------ returns


def test_monte_carlo_returns_match_python_reference() -> None:
    rng = np.random.default_rng(0)
    lengths = [1, 4, 7, 3]
    reward = rng.normal(size=sum(lengths)).astype(np.float32)
    episode = np.repeat(np.arange(len(lengths)), lengths)
    terminated = np.zeros(len(reward), dtype=bool)
    terminated[np.cumsum(lengths)[[0, 2]] - 1] = True
    gamma = 0.9
    expected = []
    start = 0
    for n in lengths:
        r = reward[start : start + n].astype(np.float64)
        expected += [sum(gamma**k * r[t + k] for k in range(n - t)) for t in range(n)]
        start += n
    got = monte_carlo_returns(
        torch.from_numpy(reward), torch.from_numpy(episode), torch.from_numpy(terminated), gamma
    )
    assert got.dtype == torch.float32 and got.shape == (len(reward),)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-5, atol=1e-6)
    # a terminated frame inside an episode cuts the recursion
    cut = monte_carlo_returns(np.ones(3), np.zeros(3), np.array([False, True, False]), 0.5)
    assert cut.tolist() == [1.5, 1.0, 1.0]
    assert monte_carlo_returns(np.ones(3), np.zeros(3), None, 1.0).tolist() == [3.0, 2.0, 1.0]


def test_video_decode_survives_one_ffmpeg_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A decode whose ffmpeg child fails once (its stream description hidden by a stray stderr line, seen under
    load) costs a retry, not a DatasetError calling a sound video damaged."""
    import imageio_ffmpeg

    root = tmp_path / "ds"
    h, w = 32, 48
    writer = DatasetWriter(root, fps=10, features=transition_features(D, A, images={"cam": (h, w)}), task="t")
    ep = make_episode(0, 5, images=(h, w))
    writer.write_episode(ep)
    real = imageio_ffmpeg.read_frames
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise RuntimeError("Could not load meta information")
        return real(*args, **kwargs)

    monkeypatch.setattr(imageio_ffmpeg, "read_frames", flaky)
    img = read_dataset(root, load_images=True).transitions.obs["pixels/cam"]
    assert calls["n"] == 2 and tuple(img.shape) == (5, h, w, 3)


# ------------------------------------------------------------------------------------------ quantile statistics


def test_quantile_statistics_per_episode_and_in_total(tmp_path: Path) -> None:
    """LeRobot's QUANTILES normalisation reads q01..q99 from stats.json, and its episodes table has them per episode;
    without them LeRobot could neither normalise with our datasets nor append to them."""
    root = tmp_path / "ds"
    write(root, [30, 50]).close()
    rows = pq.read_table(next((root / "meta/episodes").rglob("*.parquet"))).to_pylist()
    episodes = [make_episode(i, n, terminated=i % 2 == 0)["action"].astype(np.float64) for i, n in enumerate([30, 50])]
    for row, actions in zip(rows, episodes, strict=True):
        np.testing.assert_allclose(row["stats/action/q01"], np.quantile(actions, 0.01, axis=0))
        np.testing.assert_allclose(row["stats/action/q99"], np.quantile(actions, 0.99, axis=0))
    total = json.loads((root / "meta/stats.json").read_text())["action"]
    assert {"q01", "q10", "q50", "q90", "q99"} <= total.keys()
    weighted = (30 * np.quantile(episodes[0], 0.5, axis=0) + 50 * np.quantile(episodes[1], 0.5, axis=0)) / 80
    np.testing.assert_allclose(total["q50"], weighted)


def test_statistics_other_tools_added_survive_appending_and_repair(tmp_path: Path) -> None:
    """repair() and appending rewrote stats.json from the episodes and dropped what they did not compute."""
    root = tmp_path / "ds"
    write(root, [5, 6]).close()
    path = root / "meta/stats.json"
    stats = json.loads(path.read_text())
    stats["action"]["q05"] = [0.5, 0.5]
    stats["observation.extra"] = {"mean": [1.0]}
    path.write_text(json.dumps(stats))
    w = DatasetWriter(root, fps=10, features=transition_features(D, A), resume=True)
    w.write_episode(make_episode(2, 4))
    w.close()
    repair(root)
    after = json.loads(path.read_text())
    assert after["action"]["q05"] == [0.5, 0.5] and after["observation.extra"] == {"mean": [1.0]}
    assert after["action"]["count"] == [15] and "q99" in after["action"]
