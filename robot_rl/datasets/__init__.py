"""Datasets of robot episodes on disk, in the LeRobotDataset v3.0 layout.

``DatasetWriter`` appends finished episodes crash-safely, ``EpisodeRecorder`` turns batched env steps into
episodes, ``read_dataset`` loads a dataset (ours or one recorded with LeRobot) into a ``Dataset`` (its frames as
``robot_rl.transitions.Transitions``, the replay's layout, re-exported here), and
``robot_rl.datasets.minari.import_minari`` converts a local Minari dataset. One module per responsibility:
``format`` (the layout, features and meta tables), ``atomic`` (crash-safe file writes), ``feature_stats``,
``video`` (encode/decode), ``writer`` (``DatasetWriter`` and the crash-safety design), ``repair``, ``reader``.
"""

from robot_rl.datasets.format import CODEBASE_VERSION, DatasetError, transition_features
from robot_rl.datasets.reader import Dataset, EpisodesMeta, monte_carlo_returns, read_dataset
from robot_rl.datasets.recorder import EpisodeRecorder
from robot_rl.datasets.repair import repair
from robot_rl.datasets.writer import DatasetWriter
from robot_rl.transitions import Transitions

__all__ = [
    "CODEBASE_VERSION",
    "Dataset",
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
