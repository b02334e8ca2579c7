"""`SuccessClassifier`: a binary success classifier on camera frames, HIL-SERL's learned reward.

On a real robot nobody writes the reward function: the operator labels which frames show the task done, a
classifier learns it, and its output replaces the reward (`robot_rl.classifier_reward.ClassifierReward`).
The model reuses the pixel agent's parts (`robot_rl.policies.encoders`): one DrQ `ConvEncoder` per camera group
(`pixels` or `pixels/<camera>`, uint8 [B, H, W, 3]), or, as HIL-SERL's classifier, a frozen pretrained ResNet
(`PretrainedEncoder`: the user's local backbone weights, learned spatial pooling), joined by `CameraFusion` with the
proprioceptive `state` when asked for, and a small MLP head giving one logit (success when sigmoid(logit) >=
threshold). A frozen backbone leaves few weights to fit from a few labelled episodes; its weights are saved with
the classifier, so a saved classifier needs no weights file to load.

Saved like a policy (`robot_rl.policies.io`): a directory with `model.safetensors` and `config.json`,

    {"format": "robot_rl.reward_classifier", "format_version": 1, "class": "SuccessClassifier",
     "kwargs": {"cameras": {"pixels/front": [84, 84, 3]}, "state_dim": 0, ...},
     "metrics": {"threshold": 0.5, "precision": 0.97, "recall": 0.91, ...}, "metadata": {...}}

written atomically; `load_classifier` rebuilds it from this package alone (no pickle). `metrics` are those
measured on held-out episodes by `robot_rl.classifier_train.train_classifier`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robot_rl.datasets.format import camera_group
from robot_rl.errors import UserError
from robot_rl.policies.encoders import ENCODERS, CameraFusion, ConvEncoder, camera_fusion

__all__ = [
    "ClassifierError", "SuccessClassifier", "camera_group", "load_classifier", "read_classifier_config",
    "save_classifier",
]

FORMAT = "robot_rl.reward_classifier"
FORMAT_VERSION = 1
WEIGHTS = "model.safetensors"
CONFIG = "config.json"


class ClassifierError(UserError, ValueError):
    """A classifier directory is missing, damaged, or does not fit the data or env it is used with; the message
    names the path."""


class SuccessClassifier(nn.Module):
    """Camera frames (and optionally `state`) -> one success logit per row; see the module docstring.

    Args:
        cameras: camera group -> image shape [H, W, 3] (uint8 frames as the envs give them).
        state_dim: size of the `state` group used as input; 0 = images only (HIL-SERL's classifier).
        feature_dim, channels, layers, shift_pad, pool: each camera's `ConvEncoder` (`pool="spatial_softmax"`: a
            keypoint per channel, what a cube-at-the-target test needs; see `SpatialSoftmax`).
        hidden: width of the MLP head's hidden layer.
        encoder: ``"conv"`` (the above, trained) or ``"pretrained"``: one frozen ``backbone`` (``resnet10`` or
            ``resnet18``) shared by the cameras, each with its own learned pooling (``spatial_features``) and a
            ``feature_dim`` projection; ``shift_pad`` shifts the frames before the backbone.
        backbone_weights: the backbone's local weights file (``load_backbone``), read at construction only; without
            it the backbone is built uninitialised, for a saved classifier whose weights carry it.
        readout: with ``encoder="pretrained"``, each camera's features are the frozen linear readout stored in
            ``backbone_weights`` (``feature_dim`` outputs, e.g. a pose estimator's; `load_readouts`) instead of a
            learned pooling: only the MLP head trains.
    """

    def __init__(
        self,
        cameras: Mapping[str, Sequence[int]],
        state_dim: int = 0,
        feature_dim: int = 50,
        channels: int = 32,
        layers: int = 4,
        hidden: int = 256,
        shift_pad: int = 4,
        pool: str = "flatten",
        encoder: str = "conv",
        backbone: str = "resnet10",
        spatial_features: int = 8,
        backbone_weights: str | os.PathLike[str] | None = None,
        readout: bool = False,
    ) -> None:
        super().__init__()
        if not cameras:
            raise ValueError("a success classifier needs at least one camera group")
        if encoder not in ENCODERS:
            raise ValueError(f"unknown encoder {encoder!r}; choose one of {', '.join(ENCODERS)}")
        self.cameras = {str(k): [int(v) for v in cameras[k]] for k in sorted(cameras)}
        for key, shape in self.cameras.items():
            if len(shape) != 3 or shape[2] != 3:
                raise ValueError(f"camera {key!r}: shape must be [H, W, 3], got {shape}")
        self.state_dim, self.feature_dim, self.channels = int(state_dim), int(feature_dim), int(channels)
        self.layers, self.hidden, self.shift_pad, self.pool = int(layers), int(hidden), int(shift_pad), str(pool)
        self.encoder, self.backbone, self.spatial_features = str(encoder), str(backbone), int(spatial_features)
        self.readout = bool(readout)
        if self.readout and self.encoder != "pretrained":
            raise ValueError("a readout needs encoder='pretrained' (it lives in the backbone's weights file)")
        if self.encoder == "pretrained":
            self.fusion = camera_fusion(
                self.cameras, self.state_dim, encoder="pretrained", feature_dim=self.feature_dim,
                shift_pad=self.shift_pad, backbone=self.backbone, spatial_features=self.spatial_features,
                weights=backbone_weights, readout=self.readout)
        else:
            self.fusion = CameraFusion({
                k: ConvEncoder(shape, self.feature_dim, self.channels, self.layers, self.shift_pad, self.pool)
                for k, shape in self.cameras.items()
            }, self.state_dim)
        self.head = nn.Sequential(nn.Linear(self.fusion.out_dim, self.hidden), nn.ReLU(), nn.Linear(self.hidden, 1))
        # `state` is standardised with the training set's statistics (saved with the weights)
        self.register_buffer("state_mean", torch.zeros(self.state_dim))
        self.register_buffer("state_std", torch.ones(self.state_dim))

    def config(self) -> dict[str, Any]:
        """Constructor keyword arguments that rebuild this classifier (JSON-serialisable)."""
        return {
            "cameras": self.cameras, "state_dim": self.state_dim, "feature_dim": self.feature_dim,
            "channels": self.channels, "layers": self.layers, "hidden": self.hidden, "shift_pad": self.shift_pad,
            "pool": self.pool, "encoder": self.encoder, "backbone": self.backbone,
            "spatial_features": self.spatial_features, **({"readout": True} if self.readout else {}),
        }

    @property
    def device(self) -> torch.device:
        return self.state_mean.device

    def forward(self, obs: Mapping[str, Tensor], augment: bool = False) -> Tensor:
        """Success logits [B] of an observation batch (camera groups uint8 [B, H, W, 3], `state` [B, S] when
        `state_dim` > 0); `augment`: DrQ's random shift of every image (training)."""
        dev = self.device
        missing = [k for k in self.cameras if k not in obs]
        if missing:
            raise KeyError(f"observation has no camera group {missing[0]!r} (has {sorted(obs)})")
        batch = obs[next(iter(self.cameras))].shape[0]
        if self.state_dim:
            state = (obs["state"].to(dev, torch.float32) - self.state_mean) / self.state_std
        else:
            state = torch.zeros(batch, 0, device=dev)
        inputs = {"state": state, **{k: obs[k].to(dev) for k in self.cameras}}
        return self.head(self.fusion(inputs, augment)).squeeze(-1)

    @torch.no_grad()
    def probability(self, obs: Mapping[str, Tensor], batch_size: int = 256) -> Tensor:
        """sigmoid(logit) [B] without gradients, `batch_size` rows at a time (a whole dataset fits this way)."""
        keys = [*self.cameras, *(["state"] if self.state_dim else [])]
        n = obs[keys[0]].shape[0]
        out = [
            torch.sigmoid(self({k: obs[k][i : i + batch_size] for k in keys}))
            for i in range(0, n, batch_size)
        ]
        return torch.cat(out) if out else torch.zeros(0, device=self.device)

    def check_observation_spec(self, spec: Mapping[str, tuple[tuple[int, ...], Any]], where: str) -> None:
        """Raise ClassifierError when `spec` (an env's `observation_spec`) lacks a camera group, has it at another
        size, or has a `state` of another size than the classifier was trained on."""
        for key, shape in self.cameras.items():
            if key not in spec:
                cams = sorted(k for k in spec if k == "pixels" or k.startswith("pixels/")) or ["none"]
                raise ClassifierError(f"{where}: the classifier reads camera {key!r}, the env has "
                                      f"{', '.join(cams)}")
            if list(spec[key][0]) != shape:
                raise ClassifierError(f"{where}: the classifier was trained on {key} frames of {shape}, the env "
                                      f"gives {list(spec[key][0])} (set the env's pixel size to match)")
        if self.state_dim and ("state" not in spec or list(spec["state"][0]) != [self.state_dim]):
            got = list(spec["state"][0]) if "state" in spec else "none"
            raise ClassifierError(f"{where}: the classifier reads state [{self.state_dim}], the env has {got}")


def save_classifier(
    model: SuccessClassifier,
    path: str | os.PathLike[str],
    metrics: Mapping[str, Any] | None = None,
    metadata: Mapping[str, Any] | None = None,
) -> Path:
    """Write `model` with its held-out `metrics` and `metadata` (e.g. the dataset) to the directory `path`,
    atomically; an existing directory that is not a saved classifier (or policy) is refused."""
    from robot_rl.policies.io import write_directory

    path = Path(path)
    if path.exists() and not (path / CONFIG).is_file() and (not path.is_dir() or any(path.iterdir())):
        raise FileExistsError(f"{path}: exists and is not a saved classifier; refusing to replace it")
    config = {
        "format": FORMAT, "format_version": FORMAT_VERSION, "class": type(model).__name__,
        "kwargs": model.config(), "metrics": dict(metrics or {}), "metadata": dict(metadata or {}),
    }
    text = json.dumps(config, indent=2)
    # clone: cameras that share one frozen backbone would otherwise hand safetensors tensors sharing memory
    tensors = {k: v.detach().to("cpu").clone().contiguous() for k, v in model.state_dict().items()}
    return write_directory(path, tensors, text, {"format": FORMAT, "class": type(model).__name__})


def read_classifier_config(path: str | os.PathLike[str]) -> dict[str, Any]:
    """The checked `config.json` of a saved classifier (kwargs, metrics, metadata) without loading weights."""
    path = Path(path)
    if not path.is_dir():
        raise ClassifierError(f"{path}: no such classifier directory (robot-rl classifier writes one)")
    config_path = path / CONFIG
    if not config_path.is_file() or not (path / WEIGHTS).is_file():
        raise ClassifierError(f"{path}: not a saved classifier (needs {CONFIG} and {WEIGHTS})")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ClassifierError(f"{config_path}: not valid JSON ({e}); the classifier is damaged") from None
    if not isinstance(config, dict) or config.get("format") != FORMAT:
        what = "a saved policy" if isinstance(config, dict) and config.get("format") == "robot_rl.policy" else "not"
        raise ClassifierError(f"{path}: {what} a reward classifier (config.json has no \"format\": \"{FORMAT}\")")
    version = config.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ClassifierError(f"{config_path}: format_version {version!r}; this code reads up to {FORMAT_VERSION}")
    return config


def load_classifier(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> SuccessClassifier:
    """Rebuild a saved classifier on `device` in eval mode; `.metrics` and `.metadata` hold what was saved with it.
    Any problem with the directory is one ClassifierError naming it."""
    from safetensors.torch import load_file

    config = read_classifier_config(path)
    try:
        model = SuccessClassifier(**config.get("kwargs", {}))
    except (TypeError, ValueError, RuntimeError) as e:
        raise ClassifierError(f"{path}: cannot build the classifier from config.json ({e})") from None
    try:
        state = load_file(str(Path(path) / WEIGHTS), device="cpu")
        model.load_state_dict(state, strict=True)
    except Exception as e:  # safetensors' own errors for damaged files; RuntimeError for misfitting weights
        first = str(e).splitlines()[0]
        raise ClassifierError(f"{path}: weights unreadable or do not fit the config ({first})") from None
    model.metrics = dict(config.get("metrics", {}))
    model.metadata = dict(config.get("metadata", {}))
    return model.to(device).eval()
