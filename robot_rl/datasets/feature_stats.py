"""Per-feature statistics of a dataset, per episode and aggregated as LeRobot does: min / max / mean / std / count
(count-weighted mean and pooled variance; images per channel over at most `MAX_STAT_FRAMES` frames) and the
quantiles q01 / q10 / q50 / q90 / q99 that LeRobot's QUANTILES normalisation reads (exact per episode; over the
dataset, the count-weighted mean of the episodes' quantiles, LeRobot's own approximation)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.datasets.atomic import write_json
from robot_rl.datasets.format import MAX_STAT_FRAMES

QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}


def feature_stats(array: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-episode stats of a [T] or [T, D] column: each stat shaped [1] or [D]."""
    a = array.reshape(len(array), -1)
    work = a.astype(np.float64)
    mn, mx = a.min(axis=0), a.max(axis=0)
    quantiles = np.quantile(work, list(QUANTILES.values()), axis=0)
    return {
        "min": mn,
        "max": mx,
        "mean": work.mean(axis=0),
        "std": work.std(axis=0),
        "count": np.array([len(a)], dtype=np.int64),
        **dict(zip(QUANTILES, quantiles, strict=True)),
    }


def image_stats(frames: np.ndarray) -> dict[str, np.ndarray]:
    """Per-channel stats of uint8 [T, H, W, 3] frames in [0, 1], shaped [3, 1, 1] (count [1]).

    Like LeRobot, only a subset of frames (evenly spaced, at most ``MAX_STAT_FRAMES``) and, for large
    images, a strided subset of pixels enter the statistics; count is the number of frames used.
    """
    t = len(frames)
    idx = np.unique(np.round(np.linspace(0, t - 1, min(t, MAX_STAT_FRAMES))).astype(int))
    sample = frames[idx]
    h, w = sample.shape[1:3]
    if max(h, w) >= 300:
        step = max(1, int(max(h, w) / 150))
        sample = sample[:, ::step, ::step]
    x = sample.astype(np.float64) / 255.0
    axes = (0, 1, 2)
    quantiles = np.quantile(x.reshape(-1, 3), list(QUANTILES.values()), axis=0)
    return {
        "min": x.min(axis=axes).reshape(3, 1, 1),
        "max": x.max(axis=axes).reshape(3, 1, 1),
        "mean": x.mean(axis=axes).reshape(3, 1, 1),
        "std": x.std(axis=axes).reshape(3, 1, 1),
        "count": np.array([len(sample)], dtype=np.int64),
        **{name: q.reshape(3, 1, 1) for name, q in zip(QUANTILES, quantiles, strict=True)},
    }


def aggregate_stats(per_episode: Sequence[Mapping[str, Mapping[str, np.ndarray]]]) -> dict[str, dict]:
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
        for name in QUANTILES:  # where every episode has it (datasets written before quantiles have none)
            if all(name in s for s in items):
                out[key][name] = (np.stack([np.asarray(s[name], dtype=np.float64) for s in items]) * w).sum(0) / total
    return out


def stats_to_json(stats: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in st.items()} for k, st in stats.items()}




def write_total_stats(path: Path, per_episode: Sequence[Mapping[str, Mapping[str, np.ndarray]]], fsync: bool,
                      existing: Path | None = None) -> None:
    """`meta/stats.json` from the episodes' statistics, keeping what this code cannot recompute: statistics
    (and features) that another tool added to the existing file (`existing`, default `path`; the writer stages
    the new file elsewhere) stay as they were."""
    new = stats_to_json(aggregate_stats(per_episode))
    try:
        old = json.loads((existing or path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        old = {}
    for feature, entries in old.items() if isinstance(old, dict) else ():
        if isinstance(entries, dict):
            new.setdefault(feature, {})
            for name, value in entries.items():
                new[feature].setdefault(name, value)
    write_json(path, new, fsync)
