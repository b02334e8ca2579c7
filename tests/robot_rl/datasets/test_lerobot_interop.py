"""Appending across tools: our writer appends to a dataset with LeRobot's exact on-disk schema, and LeRobot's
episode-append path (re-enacted here file by file, as LeRobot 0.4.x writes them) appends to ours; afterwards each
dataset reads back with our reader and concatenates the way LeRobot loads it (`lerobot_view`).

LeRobot is not a test dependency, so its files are built here by hand from what its sources write (see
docs/python-api.md, "LeRobot interoperability", for the files and functions this follows):
- `meta/episodes/chunk-C/file-F.parquet`: `pa.Table.from_pydict` of the episode dicts of `save_episode` /
  `_save_episode_metadata` (keys in the order episode_index, tasks, length, data/chunk_index, data/file_index,
  dataset_from_index, dataset_to_index, videos/..., stats/<feature>/<stat>, meta/episodes/chunk_index,
  meta/episodes/file_index; numpy stats `.tolist()`ed), written with `pq.ParquetWriter`; a resumed recording
  starts the next file (`update_chunk_file_indices`);
- `data/...`: the frames of several episodes in one file, typed by `get_hf_features_from_features`
  (shape [1] -> scalar, [D] -> fixed-size list);
- per-episode stats from `compute_episode_stats` (min/max in the data's dtype, mean/std/quantiles float64,
  count int64 [1]);
- `meta/tasks.parquet`: a pandas frame indexed by the task strings (an unnamed index: `__index_level_0__`);
- `meta/info.json`: `create_empty_dataset_info`'s keys, default features without an `fps` key.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import torch
from test_lerobot import A, D, lerobot_view, make_episode, write

from robot_rl.datasets import DatasetWriter, read_dataset

LEROBOT_FEATURES = {
    "observation.state": {"dtype": "float32", "shape": [D], "names": [f"s{i}" for i in range(D)]},
    "action": {"dtype": "float32", "shape": [A], "names": [f"a{i}" for i in range(A)]},
    "next.reward": {"dtype": "float32", "shape": [1], "names": None},
    "next.done": {"dtype": "bool", "shape": [1], "names": None},
    "timestamp": {"dtype": "float32", "shape": [1], "names": None},
    "frame_index": {"dtype": "int64", "shape": [1], "names": None},
    "episode_index": {"dtype": "int64", "shape": [1], "names": None},
    "index": {"dtype": "int64", "shape": [1], "names": None},
    "task_index": {"dtype": "int64", "shape": [1], "names": None},
}
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def lerobot_stats(array: np.ndarray) -> dict[str, np.ndarray]:
    """The dtypes and shapes of LeRobot's `get_feature_stats` (values do not matter for the schema)."""
    a = array.reshape(len(array), -1)
    stats = {"min": a.min(axis=0), "max": a.max(axis=0), "mean": a.mean(axis=0, dtype=np.float64),
             "std": a.std(axis=0, dtype=np.float64), "count": np.array([len(a)])}
    for name, q in QUANTILES.items():
        stats[name] = np.quantile(a.astype(np.float64), q, axis=0)
    return stats


def lerobot_frames(seed: int, length: int) -> dict[str, np.ndarray]:
    ep = make_episode(seed, length)
    return {k: ep[k] for k in ("observation.state", "action", "next.reward", "next.done")}


def arrow_column(values: np.ndarray, ft: dict) -> pa.Array:
    """`get_hf_features_from_features`: Value(dtype) for shape [1], Sequence(length=D) (fixed-size list) else."""
    if list(ft["shape"]) == [1]:
        return pa.array(values.reshape(-1), type=pa.from_numpy_dtype(np.dtype(ft["dtype"])))
    flat = pa.array(values.reshape(-1), type=pa.from_numpy_dtype(np.dtype(ft["dtype"])))
    return pa.FixedSizeListArray.from_arrays(flat, ft["shape"][0])


def lerobot_append(root: Path, episodes: list[dict[str, np.ndarray]], task: str) -> None:
    """LeRobot's recording of `episodes` into `root` (new or resumed): one new data file and one new episodes
    file after the last ones, `info.json` totals, tasks and aggregated stats, as `save_episode` leaves them."""
    info_path = root / "meta/info.json"
    if info_path.exists():
        info = json.loads(info_path.read_text())
        old = pa.concat_tables([pq.read_table(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))])
        last = old.to_pylist()[-1]
        chunks = info["chunks_size"]

        def after(prefix: str) -> tuple[int, int]:
            c, f = last[f"{prefix}/chunk_index"], last[f"{prefix}/file_index"]
            return (c + 1, 0) if f == chunks - 1 else (c, f + 1)

        (data_chunk, data_file), (meta_chunk, meta_file) = after("data"), after("meta/episodes")
        start_ep, start_frame = last["episode_index"] + 1, last["dataset_to_index"]
        tasks_table = pq.read_table(root / "meta/tasks.parquet")
        name_col = next(c for c in ("task", "__index_level_0__") if c in tasks_table.column_names)
        tasks = tasks_table.column(name_col).to_pylist()
        stats = json.loads((root / "meta/stats.json").read_text())
    else:
        info = {"codebase_version": "v3.0", "robot_type": "so100", "total_episodes": 0, "total_frames": 0,
                "total_tasks": 0, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
                "fps": 10, "splits": {}, "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "video_path": None, "features": LEROBOT_FEATURES}
        data_chunk = data_file = meta_chunk = meta_file = start_ep = start_frame = 0
        tasks, stats = [], {}
    features = info["features"]
    if task not in tasks:
        tasks.append(task)
    rows, tables, frame = [], [], start_frame
    for i, ep in enumerate(episodes):
        n = len(ep["action"])
        cols = {**ep, "timestamp": (np.arange(n) / info["fps"]).astype(np.float32), "frame_index": np.arange(n),
                "episode_index": np.full(n, start_ep + i), "index": np.arange(frame, frame + n),
                "task_index": np.full(n, tasks.index(task))}
        missing = [k for k in features if k not in cols and features[k]["dtype"] != "video"]
        assert not missing, f"LeRobot would need frames for {missing}"
        tables.append(pa.table({k: arrow_column(np.asarray(cols[k]), features[k]) for k in features}))
        row = {"episode_index": start_ep + i, "tasks": [task], "length": n, "data/chunk_index": data_chunk,
               "data/file_index": data_file, "dataset_from_index": frame, "dataset_to_index": frame + n}
        for key in features:
            for name, value in lerobot_stats(np.asarray(cols[key])).items():
                row[f"stats/{key}/{name}"] = value.tolist()
        row.update({"meta/episodes/chunk_index": meta_chunk, "meta/episodes/file_index": meta_file})
        rows.append(row)
        frame += n
    data_path = root / info["data_path"].format(chunk_index=data_chunk, file_index=data_file)
    data_path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(data_path, schema=tables[0].schema, compression="snappy", use_dictionary=True) as w:
        for t in tables:
            w.write_table(t)
    combined = {k: [r[k] for r in rows] for k in rows[0]}
    episodes_table = pa.Table.from_pydict(combined)
    ep_path = root / f"meta/episodes/chunk-{meta_chunk:03d}/file-{meta_file:03d}.parquet"
    ep_path.parent.mkdir(parents=True, exist_ok=True)
    with pq.ParquetWriter(ep_path, schema=episodes_table.schema, compression="snappy", use_dictionary=True) as w:
        w.write_table(episodes_table)
    pandas_meta = {"index_columns": ["__index_level_0__"], "column_indexes": [], "columns": [
        {"name": "task_index", "field_name": "task_index", "pandas_type": "int64", "numpy_type": "int64",
         "metadata": None},
        {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode", "numpy_type": "object",
         "metadata": None}], "pandas_version": "2.2.3"}
    tasks_out = pa.table({"task_index": pa.array(range(len(tasks)), pa.int64()), "__index_level_0__": tasks})
    pq.write_table(tasks_out.replace_schema_metadata({"pandas": json.dumps(pandas_meta)}),
                   root / "meta/tasks.parquet")
    info["total_episodes"] = start_ep + len(episodes)
    info["total_frames"] = frame
    info["total_tasks"] = len(tasks)
    info["splits"] = {"train": f"0:{info['total_episodes']}"}
    info_path.write_text(json.dumps(info, indent=4))
    for key in features:  # enough of `aggregate_stats` for the totals lerobot_view checks
        count = stats.get(key, {}).get("count", [0])[0] + sum(len(ep["action"]) for ep in episodes)
        stats.setdefault(key, {})["count"] = [count]
    (root / "meta/stats.json").write_text(json.dumps(stats))


def schema_of(path: Path) -> pa.Schema:
    return pq.read_schema(path).remove_metadata()


def test_we_append_to_a_dataset_lerobot_recorded(tmp_path: Path) -> None:
    root = tmp_path / "ds"
    theirs = [lerobot_frames(i, n) for i, n in enumerate([4, 5, 6])]
    lerobot_append(root, theirs, task="pick")
    lerobot_files = {p: p.read_bytes() for p in root.rglob("*.parquet") if p.name != "tasks.parquet"}
    info = json.loads((root / "meta/info.json").read_text())

    w = DatasetWriter(root, fps=10, features=info["features"], resume=True)
    assert w.write_episode(lerobot_frames(3, 7), task="pick") == 3
    assert w.write_episode(lerobot_frames(4, 3), task="place") == 4

    # LeRobot's data and episodes files are untouched (tasks.parquet gained "place"); ours continue after them,
    # as LeRobot's resume would
    assert {p: p.read_bytes() for p in lerobot_files} == lerobot_files
    assert (root / "data/chunk-000/file-001.parquet").is_file() and (root / "data/chunk-000/file-002.parquet").is_file()
    ours = root / "meta/episodes/chunk-000/file-001.parquet"
    assert schema_of(ours) == schema_of(root / "meta/episodes/chunk-000/file-000.parquet")
    assert lerobot_view(root) == (5, 25)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["features"] == LEROBOT_FEATURES and info["robot_type"] == "so100"
    assert info["total_tasks"] == 2

    tr = read_dataset(root)
    assert tr.episodes.length.tolist() == [4, 5, 6, 7, 3]
    assert tr.episodes.task == ["pick"] * 4 + ["place"]
    expected = np.concatenate([lerobot_frames(i, n)["observation.state"] for i, n in enumerate([4, 5, 6, 7, 3])])
    torch.testing.assert_close(tr.transitions.obs["state"], torch.from_numpy(expected))
    assert tr.transitions.terminated.sum().item() == 5  # next.done stands in for next.terminated

    # and LeRobot can go on appending after us
    lerobot_append(root, [lerobot_frames(5, 2)], task="pick")
    assert lerobot_view(root) == (6, 27)
    assert read_dataset(root).episodes.length.tolist() == [4, 5, 6, 7, 3, 2]


def test_lerobot_appends_to_a_dataset_we_recorded(tmp_path: Path) -> None:
    """Our episodes file has the schema LeRobot's own episode dicts produce, so the file LeRobot adds when it
    resumes our dataset concatenates with ours; both tools then read all episodes."""
    root = tmp_path / "ds"
    write(root, [4, 5]).close()
    ours = schema_of(root / "meta/episodes/chunk-000/file-000.parquet")
    feats = json.loads((root / "meta/info.json").read_text())["features"]
    ep = make_episode(2, 6)
    lerobot_append(root, [{k: ep[k] for k in feats if k in ep}], task="reach")
    assert schema_of(root / "meta/episodes/chunk-000/file-001.parquet") == ours
    assert (root / "data/chunk-000/file-002.parquet").is_file()
    assert lerobot_view(root) == (3, 15)
    tr = read_dataset(root)
    assert tr.episodes.length.tolist() == [4, 5, 6]
    torch.testing.assert_close(tr.transitions.obs["state"][9:], torch.from_numpy(ep["observation.state"]))

    # and we append again after LeRobot: a third episodes file, same schema
    w = DatasetWriter(root, fps=10, features=feats, resume=True)
    assert w.write_episode(make_episode(3, 2)) == 3
    assert schema_of(root / "meta/episodes/chunk-000/file-002.parquet") == ours
    assert lerobot_view(root) == (4, 17)
    assert read_dataset(root).episodes.length.tolist() == [4, 5, 6, 2]


def test_appending_keeps_an_older_schema(tmp_path: Path) -> None:
    """A dataset whose episodes file predates quantile statistics (LeRobot before `RunningQuantileStats`, or
    ours before q01..q99): the appended rows take its schema, so the files still concatenate."""
    root = tmp_path / "ds"
    write(root, [4, 5]).close()
    path = root / "meta/episodes/chunk-000/file-000.parquet"
    table = pq.read_table(path)
    keep = [c for c in table.column_names if c.rsplit("/", 1)[-1] not in QUANTILES]
    pq.write_table(table.select(keep), path)
    w = DatasetWriter(root, fps=10, features=json.loads((root / "meta/info.json").read_text())["features"],
                      resume=True)
    w.write_episode(make_episode(2, 3))
    assert schema_of(root / "meta/episodes/chunk-000/file-001.parquet") == schema_of(path)
    assert lerobot_view(root) == (3, 12)
    assert read_dataset(root).episodes.length.tolist() == [4, 5, 3]
