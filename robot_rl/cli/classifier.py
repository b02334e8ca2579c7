"""`robot-rl classifier`: a binary success classifier on a dataset's camera frames (HIL-SERL's learned reward),
used as the reward of `train` (env.reward_classifier=), `serve-robot` and `hil-train` (reward_classifier=)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

from robot_rl.cli.common import Command, parse_args
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help


@dataclass
class ClassifierArgs:
    dataset: str = _help("", "required: a dataset with camera features and next.success flags (LeRobot v3 layout)")
    out: str = _help("", "required: the classifier directory to write (an existing classifier is replaced)")
    extra: list[str] = _help([], "more datasets (the same cameras) whose episodes all train, none held out: e.g. "
                             "rollouts of a policy trained on this classifier's reward (robot-rl collect "
                             "policy=<checkpoint>) with the task's or the operator's success flags, so it unlearns "
                             "the false positives that policy found (HIL-SERL's second round of labels)")
    steps: int = _help(2000, "gradient steps (Adam, class-balanced batches)")
    seed: int = _help(0, "seed of the episode split, the initialisation, the batches and the augmentation")
    holdout: float = _help(0.2, "fraction of the episodes held out (whole episodes) for precision and recall")
    threshold: float = _help(0.5, "probability at or above which a frame counts as success in the reported figures")
    batch_size: int = _help(64, "frames per step, half of them success frames")
    lr: float = _help(3e-4, "Adam learning rate")
    cameras: list[str] = _help([], "dataset cameras to read (e.g. [front]); default: all of them")
    state: bool = _help(False, "also read the proprioceptive observation.state (default: images only, as HIL-SERL)")
    feature_dim: int = _help(50, "features per camera (DrQ conv encoder)")
    channels: int = _help(32, "conv channels per layer")
    layers: int = _help(4, "conv layers (the first with stride 2)")
    shift_pad: int = _help(4, "random shifts of the training frames by up to this many pixels (DrQ's augmentation; "
                           "0: none, what encoder_readout wants: its estimator saw unshifted frames)")
    pool: str = _help("flatten", "how the conv map becomes features: flatten (DrQ) or spatial_softmax (a keypoint per "
                      "channel: fewer weights to fit from few labels, for success that is where objects are)")
    encoder: str = _help("conv", "conv (the DrQ encoder above, trained) or pretrained (HIL-SERL's: a frozen ResNet "
                         "from encoder_weights, learned spatial pooling; its weights are saved with the classifier)")
    encoder_weights: str = _help("", "encoder=pretrained: the backbone's local weights file (a torchvision-style "
                                 "state dict, .pth/.pt or .safetensors; never downloaded)")
    encoder_backbone: str = _help("resnet10", "encoder=pretrained: resnet10 (HIL-SERL's) or resnet18")
    encoder_spatial_features: int = _help(8, "encoder=pretrained: learned poolings per feature-map channel")
    encoder_readout: bool = _help(False, "encoder=pretrained: each camera's features are the frozen linear readout "
                                  "in encoder_weights (readout.<camera>.weight/.bias, e.g. a pose estimator's head; "
                                  "feature_dim = its outputs) instead of a learned pooling; with shift_pad=0")
    device: str = _help("cpu", "torch device to train on")


def run(args: list[str]) -> int:
    import torch

    from robot_rl.classifier import save_classifier
    from robot_rl.classifier_train import (
        TrainSettings,
        join_frames,
        load_labelled_frames,
        split_episodes,
        train_classifier,
    )
    from robot_rl.policies.encoders import ENCODERS, POOLS, RESNET_BLOCKS

    a: ClassifierArgs = parse_args(ClassifierArgs, args, "classifier")
    if not a.dataset or not a.out:
        raise UserError("classifier needs dataset=<dataset dir> and out=<dir>")
    if not Path(a.dataset).is_dir():
        raise UserError(f"dataset {a.dataset} does not exist (record one with robot-rl collect or teleop)")
    for key, ok in (("steps", a.steps >= 1), ("holdout", 0.0 < a.holdout < 1.0), ("threshold", 0.0 < a.threshold < 1.0),
                    ("batch_size", a.batch_size >= 2), ("lr", a.lr > 0), ("feature_dim", a.feature_dim >= 1),
                    ("channels", a.channels >= 1), ("layers", a.layers >= 1)):
        if not ok:
            rule = "in (0, 1)" if key in {"holdout", "threshold"} else ">= 2" if key == "batch_size" else "> 0"
            raise UserError(f"{key} must be {rule}, not {getattr(a, key)}")
    if a.pool not in POOLS:
        raise UserError(f"pool must be one of {', '.join(POOLS)}, not {a.pool!r}")
    if a.encoder not in ENCODERS:
        raise UserError(f"encoder must be one of {', '.join(ENCODERS)}, not {a.encoder!r}")
    if a.encoder == "pretrained" and not a.encoder_weights:
        raise UserError("encoder=pretrained needs encoder_weights=<local backbone weights file>")
    if a.encoder_backbone not in RESNET_BLOCKS:
        raise UserError(f"encoder_backbone must be one of {', '.join(RESNET_BLOCKS)}, not {a.encoder_backbone!r}")
    if a.encoder_spatial_features < 1:
        raise UserError(f"encoder_spatial_features must be >= 1, not {a.encoder_spatial_features}")
    if a.shift_pad < 0:
        raise UserError(f"shift_pad must be >= 0, not {a.shift_pad}")
    if a.encoder_readout and a.encoder != "pretrained":
        raise UserError("encoder_readout=true needs encoder=pretrained (the readout lives in encoder_weights)")
    if missing := [d for d in a.extra if not Path(d).is_dir()]:
        raise UserError(f"extra dataset {missing[0]} does not exist")
    frames = load_labelled_frames(a.dataset, a.cameras)
    held_out = None
    if a.extra:  # the held-out episodes come from dataset= only, split as without extra=
        names = [a.dataset, *a.extra]
        frames, primary = join_frames([frames, *(load_labelled_frames(d, a.cameras) for d in a.extra)], names)
        held_out = torch.zeros(len(frames), dtype=torch.bool)
        held_out[primary] = split_episodes(frames.episode[primary], a.holdout, a.seed)[1]
    settings = TrainSettings(
        steps=a.steps, batch_size=a.batch_size, lr=a.lr, seed=a.seed, holdout=a.holdout, threshold=a.threshold,
        use_state=a.state, feature_dim=a.feature_dim, channels=a.channels, layers=a.layers, pool=a.pool,
        shift_pad=a.shift_pad,
        encoder=a.encoder, encoder_weights=a.encoder_weights or None, encoder_backbone=a.encoder_backbone,
        encoder_spatial_features=a.encoder_spatial_features, encoder_readout=a.encoder_readout, device=a.device,
    )
    model, metrics = train_classifier(frames, settings, message=lambda s: print(s, flush=True), held_out=held_out)
    metadata = {"dataset": str(Path(a.dataset).resolve()), "extra": [str(Path(d).resolve()) for d in a.extra],
                "args": dataclasses.asdict(a)}
    out = save_classifier(model, a.out, metrics, metadata)
    print("[classifier] held-out precision/recall by threshold: " + ", ".join(
        f"{t}: {_share(m['precision'])}/{_share(m['recall'])}" for t, m in metrics["by_threshold"].items()), flush=True)
    print(f"done: held-out precision {_share(metrics['precision'])}, recall {_share(metrics['recall'])} at threshold "
          f"{metrics['threshold']:g} ({len(metrics['heldout_episodes'])} episodes, {metrics['heldout_frames']} frames, "
          f"{metrics['heldout_positives']} success) | classifier in {out}", flush=True)
    return 0


def _share(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.1%}"


COMMAND = Command(
    name="classifier", summary="a learned success reward from camera frames", run=run, schema=lambda: ClassifierArgs,
    usage=["usage: robot-rl classifier dataset=<dataset dir> out=<dir> [steps=2000] [seed=0] [holdout=0.2] [key=...]"],
    about=[
        "Trains a binary success classifier on a dataset's camera frames (HIL-SERL's learned reward). Frame t is a",
        "success when row t-1 of its episode has next.success (the observation its action led to). Whole episodes",
        "are held out; precision and recall on them are printed and saved in <out>/config.json beside the weights",
        "(model.safetensors). Use it as the reward of robot-rl train with env.reward_classifier=<out>.",
    ],
    examples=[
        "robot-rl classifier dataset=data/push_cams out=classifiers/push",
        "robot-rl classifier dataset=data/push_cams out=classifiers/push_front cameras=[front] steps=4000 seed=1",
        "robot-rl classifier dataset=data/push_cams extra=[data/push_policy] out=classifiers/push_r2   (a second round:",
        "  frames of a policy trained on the first classifier's reward, robot-rl collect policy=<its checkpoint>)",
        "robot-rl classifier dataset=data/push_cams out=classifiers/push_r10 cameras=[front] encoder=pretrained \\",
        "  encoder_weights=weights/resnet10.pt   (a frozen pretrained backbone, as HIL-SERL)",
    ],
)
