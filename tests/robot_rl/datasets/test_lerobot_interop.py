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
- `meta/info.json`: `create_empty_dataset_info`'s keys, default features without an `fps` key;
- the episode index and `index` column of a resumed recording count on from `info.json`'s totals, its episodes
  rows and files from the last episodes row.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from test_lerobot import A, D, lerobot_view, make_episode, write

from robot_rl.datasets import DatasetError, DatasetWriter, read_dataset, repair, transition_features

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
        # the episode index and the frames' `index` column count on from info.json (`create_episode_buffer`,
        # `save_episode`), the episodes rows' dataset_from_index and the files from the last episodes row
        # (`_save_episode_metadata`, `_save_episode_data`): the same numbers in a consistent dataset
        start_ep, start_frame, first_row = info["total_episodes"], info["total_frames"], last["dataset_to_index"]
        tasks_table = pq.read_table(root / "meta/tasks.parquet")
        name_col = next(c for c in ("task", "__index_level_0__") if c in tasks_table.column_names)
        tasks = tasks_table.column(name_col).to_pylist()
        stats = json.loads((root / "meta/stats.json").read_text())
    else:
        info = {"codebase_version": "v3.0", "robot_type": "so100", "total_episodes": 0, "total_frames": 0,
                "total_tasks": 0, "chunks_size": 1000, "data_files_size_in_mb": 100, "video_files_size_in_mb": 500,
                "fps": 10, "splits": {}, "data_path": "data/chunk-{chunk_index:03d}/file-{file_index:03d}.parquet",
                "video_path": None, "features": LEROBOT_FEATURES}
        data_chunk = data_file = meta_chunk = meta_file = start_ep = start_frame = first_row = 0
        tasks, stats = [], {}
    features = info["features"]
    if task not in tasks:
        tasks.append(task)
    rows, tables, frame, row_start = [], [], start_frame, first_row
    for i, ep in enumerate(episodes):
        n = len(ep["action"])
        cols = {**ep, "timestamp": (np.arange(n) / info["fps"]).astype(np.float32), "frame_index": np.arange(n),
                "episode_index": np.full(n, start_ep + i), "index": np.arange(frame, frame + n),
                "task_index": np.full(n, tasks.index(task))}
        missing = [k for k in features if k not in cols and features[k]["dtype"] != "video"]
        assert not missing, f"LeRobot would need frames for {missing}"
        tables.append(pa.table({k: arrow_column(np.asarray(cols[k]), features[k]) for k in features}))
        row = {"episode_index": start_ep + i, "tasks": [task], "length": n, "data/chunk_index": data_chunk,
               "data/file_index": data_file, "dataset_from_index": row_start, "dataset_to_index": row_start + n}
        for key in features:
            for name, value in lerobot_stats(np.asarray(cols[key])).items():
                row[f"stats/{key}/{name}"] = value.tolist()
        row.update({"meta/episodes/chunk_index": meta_chunk, "meta/episodes/file_index": meta_file})
        rows.append(row)
        frame += n
        row_start += n
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


# ------------------------------------------------------------------------------------------ merging with LeRobot's


def validate_all_metadata(*roots: Path) -> None:
    """LeRobot's `aggregate.validate_all_metadata`, the check `merge_datasets` / `aggregate_datasets` run first:
    every dataset's fps, robot_type and `features` equal to the first's."""
    infos = [json.loads((r / "meta/info.json").read_text()) for r in roots]
    for info in infos[1:]:
        for key in ("fps", "robot_type", "features"):
            assert info[key] == infos[0][key], (key, info[key], infos[0][key])


def test_features_are_written_as_lerobots_recorder_writes_them(tmp_path: Path) -> None:
    """No per-feature `fps` key (only datasets converted from v2.1 have one): a dataset we record with the features
    of one LeRobot recorded passes LeRobot's merge check against it; before, every non-video feature of ours
    carried `fps`, so merging ours with LeRobot's raised."""
    theirs, ours = tmp_path / "theirs", tmp_path / "ours"
    lerobot_append(theirs, [lerobot_frames(0, 4)], task="pick")
    w = DatasetWriter(ours, fps=10, features=LEROBOT_FEATURES, robot_type="so100", task="pick")
    w.write_episode(lerobot_frames(1, 5))
    validate_all_metadata(theirs, ours)
    assert json.loads((ours / "meta/info.json").read_text())["features"] == LEROBOT_FEATURES

    rl = tmp_path / "rl"
    DatasetWriter(rl, fps=10, features=transition_features(D, A, images={"cam": (16, 16)})).close()
    feats = json.loads((rl / "meta/info.json").read_text())["features"]
    for key, ft in feats.items():
        assert set(ft) == ({"dtype", "shape", "names", "info"} if ft["dtype"] == "video" else
                           {"dtype", "shape", "names"}), (key, ft)
    for key in ("timestamp", "frame_index", "episode_index", "index", "task_index"):
        assert feats[key] == LEROBOT_FEATURES[key]


def test_appending_to_a_dataset_with_per_feature_fps_keeps_its_features(tmp_path: Path) -> None:
    """A dataset an earlier version wrote (an `fps` key on every non-video feature) is read as it is, and appending
    to it, by us or by LeRobot, leaves its feature dicts exactly as they were."""
    root = tmp_path / "ds"
    write(root, [4, 5]).close()
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    for ft in info["features"].values():
        ft["fps"] = 10
    path.write_text(json.dumps(info, indent=4))
    old_features = info["features"]

    w = DatasetWriter(root, fps=10, features=transition_features(D, A), resume=True)
    assert w.write_episode(make_episode(2, 3)) == 2
    assert json.loads(path.read_text())["features"] == old_features
    ep = make_episode(3, 2)
    lerobot_append(root, [{k: ep[k] for k in old_features if k in ep}], task="reach")
    assert json.loads(path.read_text())["features"] == old_features
    assert lerobot_view(root) == (4, 14)
    assert read_dataset(root).episodes.length.tolist() == [4, 5, 3, 2]


def stat_kind(dtype: str, stat: str) -> set[str]:
    """The element types LeRobot 0.4.4's stats have for a feature of `dtype` (compute_stats.get_feature_stats /
    RunningQuantileStats / _compute_basic_stats, then aggregate_stats): min / max in the data's own dtype (bool,
    integer, float), count an integer, mean / std / quantiles float64; images float64 [3, 1, 1]."""
    if stat == "count":
        return {"int"}
    if stat in ("min", "max") and dtype == "bool":
        return {"bool"}
    if stat in ("min", "max") and dtype.startswith("int"):
        return {"int"}
    return {"float"}


def leaves(value) -> list:
    return [x for v in value for x in leaves(v)] if isinstance(value, list) else [value]


def test_statistics_have_lerobots_types(tmp_path: Path) -> None:
    """The element types of every statistic, per episode (`stats/<feature>/<stat>` columns) and in stats.json, are
    those of LeRobot's own: LeRobot's merge concatenates the episodes tables of all datasets with pandas and writes
    them back with pyarrow, which refuses a column mixing NumPy dtypes ("Cannot mix NumPy dtypes bool and
    float64"), and its aggregate_stats stacks our stats.json with its episodes'. Episodes of 1 frame take
    LeRobot's `_compute_basic_stats` path."""
    py_type = {bool: "bool", int: "int", float: "float"}
    for images in (None, (16, 16)):
        root = tmp_path / f"ds{images is not None}"
        w = DatasetWriter(root, fps=10, features=transition_features(D, A, images={"cam": images} if images else None),
                          task="reach")
        for i, n in enumerate([1, 2, 5]):
            w.write_episode(make_episode(i, n, images=images))
        features = json.loads((root / "meta/info.json").read_text())["features"]
        if images is None:  # LeRobot appends (its re-enactment here writes no videos)
            ep = make_episode(3, 4)
            lerobot_append(root, [{k: ep[k] for k in features if k in ep}], task="reach")
        stats_json = json.loads((root / "meta/stats.json").read_text())
        tables = [pq.read_table(p) for p in sorted((root / "meta/episodes").glob("*/*.parquet"))]
        for key, ft in features.items():
            for stat in ("min", "max", "mean", "std", "count", *QUANTILES):
                want = stat_kind(ft["dtype"], stat)
                column = f"stats/{key}/{stat}"
                for table in tables:
                    got = {py_type[type(x)] for row in table.column(column).to_pylist() for x in leaves(row)}
                    assert got == want, (column, got, want)
                got = {py_type[type(x)] for x in leaves(stats_json[key][stat])}
                assert got == want, (key, stat, got, want)
                if ft["dtype"] == "video":
                    assert np.asarray(stats_json[key][stat]).shape == ((1,) if stat == "count" else (3, 1, 1))
                    continue
                # LeRobot's merge: each file's column as pandas holds it (one NumPy array per row), concatenated,
                # then written back through pyarrow
                cells = [c for t in tables for c in t.column(column).to_numpy(zero_copy_only=False)]
                assert len({c.dtype for c in cells}) == 1, (column, {c.dtype for c in cells})
                pa.array(cells)


def test_an_episode_listed_twice_is_a_one_line_error(tmp_path: Path) -> None:
    """What an earlier version could leave: killed after an episode's row was committed but before info.json
    counted it, then resumed by LeRobot, which numbers its episode from info.json (a second episode 2). The reader
    crashed with numpy's "cannot reshape array"; it now says what is wrong. Repairing before LeRobot resumes (our
    writer's resume does it) avoids the state altogether."""
    root = tmp_path / "ds"
    write(root, [4, 5, 6]).close()
    path = root / "meta/info.json"
    info = json.loads(path.read_text())
    info.update({"total_episodes": 2, "total_frames": 9, "splits": {"train": "0:2"}})
    path.write_text(json.dumps(info, indent=4))
    repaired = tmp_path / "repaired"
    shutil.copytree(root, repaired)

    assert read_dataset(root).episodes.length.tolist() == [4, 5, 6]  # the episodes table is the authority
    ep = make_episode(3, 2)
    lerobot_append(root, [{k: ep[k] for k in info["features"] if k in ep}], task="reach")
    with pytest.raises(DatasetError, match="lists episode 2 more than once") as err:
        read_dataset(root)
    assert "\n" not in str(err.value)

    repair(repaired)
    lerobot_append(repaired, [{k: ep[k] for k in info["features"] if k in ep}], task="reach")
    assert lerobot_view(repaired) == (4, 17)
    assert read_dataset(repaired).episodes.length.tolist() == [4, 5, 6, 2]
