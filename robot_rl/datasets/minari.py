"""Convert a locally available Minari dataset into our LeRobotDataset v3.0 layout.

Minari (https://minari.farama.org) is optional: install it with ``pip install "robot-rl[minari]"`` (or
``pip install "minari>=0.5"``). Nothing is ever downloaded: the dataset must already be on disk, either
under ``MINARI_DATASETS_PATH`` (``~/.minari/datasets`` by default) by id, or given as a path.

Mapping (Minari episodes hold T+1 observations and T steps): frame t gets ``observation.state`` =
``observations[t]``, ``next.observation.state`` = ``observations[t + 1]`` (so the last frame of a truncated
episode bootstraps from the true last observation), ``action``, ``next.reward``, ``next.terminated``,
``next.truncated``, ``next.done``, ``next.success`` (from ``infos["success"]`` / ``infos["is_success"]``
when recorded, else False) and ``intervention`` = False. Only flat ``Box`` observation and action spaces
are supported. With ``normalize_actions`` (default) actions are mapped from the Box bounds to [-1, 1], the
range our envs and agents use; the bounds are kept in ``info.json`` under ``robot_rl.action_low/high``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from robot_rl.datasets import DatasetError, DatasetWriter, transition_features

__all__ = ["import_minari"]

_INSTALL_HINT = (
    'Minari is not installed; install it with: pip install "robot-rl[minari]"  (or pip install "minari>=0.5")'
)


def _load_minari(dataset_id_or_path: str | os.PathLike[str]) -> Any:
    try:
        import minari
    except ImportError:
        raise ImportError(_INSTALL_HINT) from None
    path = Path(dataset_id_or_path)
    if path.exists():
        data_path = path / "data" if (path / "data" / "metadata.json").is_file() else path
        if not (data_path / "metadata.json").is_file():
            raise DatasetError(f"{path}: not a Minari dataset (no metadata.json in it or in its data/)")
        return minari.MinariDataset(str(data_path))
    try:
        return minari.load_dataset(str(dataset_id_or_path), download=False)
    except Exception as exc:  # minari raises FileNotFoundError / ValueError depending on version
        raise DatasetError(
            f"{dataset_id_or_path}: no local Minari dataset with this id or path ({exc}); nothing is downloaded "
            "here - fetch it first (minari download ...) or set MINARI_DATASETS_PATH"
        ) from None


def _box(space: Any, what: str, name: str) -> Any:
    import gymnasium as gym

    if not isinstance(space, gym.spaces.Box):
        raise DatasetError(f"{name}: {what} space is {space}; only flat Box spaces can be imported")
    return space


def _info_flag(infos: Any, n: int) -> np.ndarray:
    if isinstance(infos, dict):
        for key in ("success", "is_success"):
            if key in infos:
                arr = np.asarray(infos[key]).reshape(-1).astype(bool)
                # infos have T+1 entries (reset info first) when recorded by Minari's DataCollector
                return arr[-n:] if len(arr) >= n else np.zeros(n, bool)
    return np.zeros(n, bool)


def import_minari(
    dataset_id_or_path: str | os.PathLike[str],
    root: str | os.PathLike[str],
    *,
    fps: int = 30,
    task: str | None = None,
    robot_type: str | None = "sim",
    normalize_actions: bool = True,
    overwrite: bool = False,
    max_episodes: int | None = None,
) -> Path:
    """Convert a local Minari dataset (by id or path) into a LeRobotDataset v3.0 at ``root``; return ``root``.

    ``task`` defaults to the Minari dataset id. ``fps`` only sets timestamps (Minari does not record one).
    """
    ds = _load_minari(dataset_id_or_path)
    name = str(getattr(ds.spec, "dataset_id", dataset_id_or_path))
    obs_space = _box(ds.observation_space, "observation", name)
    act_space = _box(ds.action_space, "action", name)
    d = int(np.prod(obs_space.shape))
    a = int(np.prod(act_space.shape))
    low = np.asarray(act_space.low, dtype=np.float64).reshape(-1)
    high = np.asarray(act_space.high, dtype=np.float64).reshape(-1)
    if normalize_actions and not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise DatasetError(f"{name}: action bounds are not finite; pass normalize_actions=False")

    # Where the data came from (an extra top-level info.json key; LeRobot's loaders ignore it).
    source = {
        "source": f"minari:{name}",
        "actions_normalized": bool(normalize_actions),
        "action_low": low.tolist(),
        "action_high": high.tolist(),
    }
    writer = DatasetWriter(
        root,
        fps=fps,
        features=transition_features(d, a),
        robot_type=robot_type,
        task=task if task is not None else name,
        overwrite=overwrite,
        extra_info={"robot_rl": source},
    )
    for k, ep in enumerate(ds.iterate_episodes()):
        if max_episodes is not None and k >= max_episodes:
            break
        if isinstance(ep.observations, dict) or isinstance(ep.actions, dict):
            raise DatasetError(
                f"{name}: episode {ep.id} has dict observations/actions; only Box spaces are supported"
            )
        t = len(ep.rewards)
        obs = np.asarray(ep.observations, dtype=np.float32).reshape(t + 1, d)
        act = np.asarray(ep.actions, dtype=np.float64).reshape(t, a)
        if normalize_actions:
            act = np.clip(2.0 * (act - low) / np.maximum(high - low, 1e-12) - 1.0, -1.0, 1.0)
        term = np.asarray(ep.terminations, dtype=bool).reshape(t)
        trunc = np.asarray(ep.truncations, dtype=bool).reshape(t)
        writer.write_episode(
            {
                "observation.state": obs[:-1],
                "action": act.astype(np.float32),
                "next.reward": np.asarray(ep.rewards, dtype=np.float32).reshape(t),
                "next.done": term | trunc,
                "next.terminated": term,
                "next.truncated": trunc,
                "next.success": _info_flag(getattr(ep, "infos", None), t),
                "next.observation.state": obs[1:],
                "intervention": np.zeros(t, dtype=bool),
            }
        )
    writer.close()
    return Path(root)
