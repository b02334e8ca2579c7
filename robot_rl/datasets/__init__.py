"""Datasets of robot episodes on disk, in the LeRobotDataset v3.0 layout.

``DatasetWriter`` appends finished episodes crash-safely, ``EpisodeRecorder`` turns batched env steps into
episodes, ``read_dataset`` loads a dataset (ours or one recorded with LeRobot) into torch tensors, and
``robot_rl.datasets.minari.import_minari`` converts a local Minari dataset. See ``lerobot.py`` for the layout
and the crash-safety design.
"""

from robot_rl.datasets.lerobot import (
    CODEBASE_VERSION,
    DatasetError,
    DatasetWriter,
    EpisodesMeta,
    Transitions,
    monte_carlo_returns,
    read_dataset,
    repair,
    transition_features,
)
from robot_rl.datasets.recorder import EpisodeRecorder

__all__ = [
    "CODEBASE_VERSION",
    "DatasetError",
    "DatasetWriter",
    "EpisodeRecorder",
    "EpisodesMeta",
    "Transitions",
    "monte_carlo_returns",
    "read_dataset",
    "repair",
    "transition_features",
]
