"""Training a `SuccessClassifier` on a dataset's labelled frames, with held-out episodes for precision and recall.

Labels. A LeRobot row t holds the observation o_t, the action a_t, and `next.success`: whether the observation
the action led to, o_{t+1}, is a success. The label of frame t (is o_t a success?) is therefore `next.success` of
row t-1 of the same episode, and False for an episode's first frame (`frame_labels`). Training on `next.success`
of row t itself would teach the classifier to fire one step early, on the frame before the task is done. A
consequence: an episode that ends at its first success (the arm tasks terminate there) stores the success frame
only as its final observation, which has no image in the dataset, so it contributes no positive frame; record
classifier data with episodes that go on after success (or label frames by hand), as HIL-SERL does.

Training (`train_classifier`): episodes, not frames, are split into training and held-out sets (`holdout`: the
fraction held out, at least one episode), since consecutive frames of one episode are nearly the same image and
would make held-out scores meaningless. Positives are few (a few frames per episode against many negatives), so
every batch is class-balanced: half its frames are drawn from the positives, half from the negatives (HIL-SERL's
choice). With pos_weight instead, a batch of 64 at 2 % positives holds about one positive, and the gradient
would swing with whether it drew one; balanced batches show 32 in every step, and DrQ's random shift makes the
repeated positives different images. The logit is then calibrated for equal priors, so on held-out data (at its
true, low positive rate) precision is the figure to watch: the reported `by_threshold` table shows what a higher
threshold buys. Adam, a fixed number of steps, seeded (torch's global RNG is left as it was).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from robot_rl.classifier import ClassifierError, SuccessClassifier, camera_group
from robot_rl.datasets.format import IMAGE_PREFIX, DatasetError

__all__ = [
    "LabelledFrames", "TrainSettings", "frame_labels", "join_frames", "load_labelled_frames", "precision_recall",
    "split_episodes", "train_classifier",
]

REPORT_THRESHOLDS = (0.1, 0.3, 0.5, 0.7, 0.9)


@dataclass
class LabelledFrames:
    """Frames with their labels: `obs` camera groups uint8 [M, H, W, 3] and `state` float32 [M, S]; `label` bool
    [M] (frame t shows success); `episode` int64 [M], episodes contiguous and in time order."""

    obs: dict[str, Tensor]
    label: Tensor
    episode: Tensor

    def __len__(self) -> int:
        return int(self.label.shape[0])

    def subset(self, mask: Tensor) -> LabelledFrames:
        return LabelledFrames({k: v[mask] for k, v in self.obs.items()}, self.label[mask], self.episode[mask])


def frame_labels(next_success: Tensor, episode_index: Tensor) -> Tensor:
    """Per-frame success labels from LeRobot's `next.success` (module docstring): label[t] = next_success[t-1]
    within an episode, False on each episode's first frame. Frames grouped by episode, in time order."""
    next_success = next_success.bool().reshape(-1)
    episode_index = episode_index.reshape(-1)
    label = torch.zeros_like(next_success)
    same = episode_index[1:] == episode_index[:-1]
    label[1:] = next_success[:-1] & same
    return label


def load_labelled_frames(root: str | os.PathLike[str], cameras: Sequence[str] = ()) -> LabelledFrames:
    """A dataset's decoded camera frames, `state` and per-frame labels (`frame_labels` of `next.success`).
    `cameras`: dataset camera names (`front`) or groups (`pixels/front`) to keep; empty = every camera."""
    from robot_rl.datasets import read_dataset

    data = read_dataset(root, load_images=True)
    features = data.info["features"]
    if "next.success" not in features:
        raise DatasetError(f"{root}: has no next.success column; a classifier learns from success flags "
                           "(robot-rl collect and teleop record them)")
    found = data.transitions.cameras  # camera group -> its video's frames
    if not found:
        raise DatasetError(f"{root}: has no camera features ({IMAGE_PREFIX}<name>); a classifier learns from images")
    wanted = [camera_group(c) for c in cameras] or sorted(found)
    unknown = [c for c in wanted if c not in found]
    if unknown:
        raise DatasetError(f"{root}: has no camera {unknown[0]!r}; cameras: "
                           f"{', '.join(g.removeprefix('pixels/') for g in found)}")
    obs = {"state": data.transitions.obs["state"], **{g: found[g] for g in wanted}}
    return LabelledFrames(obs, frame_labels(data.success, data.episode_index), data.episode_index.clone())


def join_frames(parts: Sequence[LabelledFrames], names: Sequence[str]) -> tuple[LabelledFrames, Tensor]:
    """Several datasets' frames as one set, and a bool mask of the frames of the first. Episode ids are renumbered
    so no two datasets share one. Every part must have the first's cameras at its frame size and its state width
    (DatasetError naming the dataset that differs)."""
    first, offset = parts[0], 0
    shapes = {k: tuple(v.shape[1:]) for k, v in first.obs.items()}
    for part, name in zip(parts[1:], names[1:], strict=True):
        other = {k: tuple(v.shape[1:]) for k, v in part.obs.items()}
        if other != shapes:
            raise DatasetError(f"{name}: its frames and state are {other}, {names[0]}'s {shapes}; record it with the "
                               "same cameras, frame size and robot")
    obs: dict[str, list[Tensor]] = {k: [] for k in shapes}
    episodes, is_first = [], []
    for i, part in enumerate(parts):
        for k in shapes:
            obs[k].append(part.obs[k])
        _, renumbered = torch.unique(part.episode, return_inverse=True)
        episodes.append(renumbered + offset)
        offset += int(renumbered.max()) + 1 if len(renumbered) else 0
        is_first.append(torch.full((len(part),), i == 0))
    joined = LabelledFrames({k: torch.cat(v) for k, v in obs.items()}, torch.cat([p.label for p in parts]),
                            torch.cat(episodes))
    return joined, torch.cat(is_first)


def split_episodes(episode: Tensor, holdout: float, seed: int) -> tuple[Tensor, Tensor]:
    """Masks (train, held_out) over frames: a seeded `holdout` fraction of the episodes (at least one) is held
    out whole, so no episode has frames on both sides."""
    if not 0.0 < holdout < 1.0:
        raise ValueError(f"holdout must be in (0, 1), got {holdout}")
    episodes = torch.unique(episode)
    if len(episodes) < 2:
        raise ClassifierError(f"{len(episodes)} episode(s): need at least 2 to hold whole episodes out")
    n_held = min(max(1, round(holdout * len(episodes))), len(episodes) - 1)
    order = torch.randperm(len(episodes), generator=torch.Generator().manual_seed(seed))
    held = torch.isin(episode, episodes[order[:n_held]])
    return ~held, held


def precision_recall(prob: Tensor, label: Tensor, threshold: float) -> dict[str, Any]:
    """Counts and precision = tp / (tp + fp), recall = tp / (tp + fn) at `threshold` (None where undefined)."""
    pred, label = prob >= threshold, label.bool()
    tp, fp = int((pred & label).sum()), int((pred & ~label).sum())
    fn, tn = int((~pred & label).sum()), int((~pred & ~label).sum())
    return {
        "threshold": float(threshold), "tp": tp, "fp": fp, "fn": fn, "tn": tn,
        "precision": tp / (tp + fp) if tp + fp else None, "recall": tp / (tp + fn) if tp + fn else None,
    }


@dataclass
class TrainSettings:
    """What `train_classifier` does; the `robot-rl classifier` keys of the same names."""

    steps: int = 2000
    batch_size: int = 64
    lr: float = 3e-4
    seed: int = 0
    holdout: float = 0.2
    threshold: float = 0.5
    use_state: bool = False
    feature_dim: int = 50
    channels: int = 32
    layers: int = 4
    hidden: int = 256
    shift_pad: int = 4
    pool: str = "flatten"
    encoder: str = "conv"
    encoder_weights: str | None = None
    encoder_backbone: str = "resnet10"
    encoder_spatial_features: int = 8
    encoder_readout: bool = False
    device: str = "cpu"


def train_classifier(
    frames: LabelledFrames, settings: TrainSettings, message: Callable[[str], None] = print,
    held_out: Tensor | None = None,
) -> tuple[SuccessClassifier, dict[str, Any]]:
    """Train on the non-held-out episodes, return the classifier (eval mode) and its held-out metrics. `held_out`:
    a bool mask over the frames to hold out (whole episodes, e.g. the same ones for every setting compared);
    default `split_episodes` with `settings.holdout` and `settings.seed`."""
    s = settings
    if s.steps < 1 or s.batch_size < 2:
        raise ValueError("steps must be >= 1 and batch_size >= 2")
    if held_out is None:
        train, held = split_episodes(frames.episode, s.holdout, s.seed)
    else:
        held = held_out.bool()
        train = ~held
    pos = torch.nonzero(frames.label & train).flatten()
    neg = torch.nonzero(~frames.label & train).flatten()
    if len(pos) == 0 or len(neg) == 0:
        which = "success" if len(pos) == 0 else "non-success"
        raise ClassifierError(
            f"the training episodes have no {which} frames ({int(frames.label.sum())} success frames in all); a frame "
            "is a success when the previous row's next.success is true, so episodes must go on after success: "
            "record them with robot-rl teleop/deploy/hil-train success_frames=10"
        )
    cameras = {k: list(v.shape[1:]) for k, v in frames.obs.items() if k != "state"}
    state_dim = int(frames.obs["state"].shape[1]) if s.use_state else 0
    keys = [*cameras, *(["state"] if s.use_state else [])]
    device = torch.device(s.device)
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(s.seed)
        model = SuccessClassifier(cameras, state_dim, s.feature_dim, s.channels, s.layers, s.hidden, s.shift_pad,
                                  s.pool, s.encoder, s.encoder_backbone, s.encoder_spatial_features, s.encoder_weights,
                                  s.encoder_readout)
        if state_dim:
            st = frames.obs["state"][train].float()
            model.state_mean.copy_(st.mean(0))
            model.state_std.copy_(st.std(0).clamp_min(1e-3) if len(st) > 1 else torch.ones(state_dim))
        model.to(device).train()
        opt = torch.optim.Adam(model.parameters(), lr=s.lr)
        half = s.batch_size // 2
        target = torch.cat([torch.ones(half), torch.zeros(s.batch_size - half)]).to(device)
        t0, every, running = time.monotonic(), max(1, s.steps // 10), 0.0
        message(f"[classifier] {int(train.sum())} training frames ({len(pos)} success) from "
                f"{len(torch.unique(frames.episode[train]))} episodes; {int(held.sum())} held-out frames from "
                f"{len(torch.unique(frames.episode[held]))} episodes")
        for step in range(1, s.steps + 1):
            idx = torch.cat([pos[torch.randint(len(pos), (half,))],
                             neg[torch.randint(len(neg), (s.batch_size - half,))]])
            batch = {k: frames.obs[k][idx].to(device) for k in keys}
            loss = F.binary_cross_entropy_with_logits(model(batch, augment=True), target)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            running += loss.item()
            if step % every == 0 or step == s.steps:
                n = every if step % every == 0 else step % every
                message(f"[classifier] step {step}/{s.steps} | loss {running / n:.4f} | {time.monotonic() - t0:.0f}s")
                running = 0.0
    model.eval()
    metrics = evaluate(model, frames.subset(held), s.threshold)
    metrics.update(steps=s.steps, seed=s.seed, train_episodes=len(torch.unique(frames.episode[train])),
                   train_frames=int(train.sum()), train_positives=len(pos))
    return model, metrics


def evaluate(model: SuccessClassifier, frames: LabelledFrames, threshold: float) -> dict[str, Any]:
    """Held-out figures: precision and recall at `threshold`, the same at `REPORT_THRESHOLDS`, and the set's size."""
    prob = model.probability(frames.obs).cpu()
    out = precision_recall(prob, frames.label, threshold)
    out["by_threshold"] = {
        f"{t:g}": {k: v for k, v in precision_recall(prob, frames.label, t).items() if k in ("precision", "recall")}
        for t in REPORT_THRESHOLDS
    }
    out.update(heldout_episodes=sorted(int(e) for e in torch.unique(frames.episode)), heldout_frames=len(frames),
               heldout_positives=int(frames.label.sum()))
    return out
