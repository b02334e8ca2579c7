"""Usage: python sweep.py <dataset> <out.json> NAME=KEY:VALUE,KEY:VALUE ... [--train 20] [--seeds 0,1,2] [--save DIR]
       python sweep.py <dataset> <out.json> --report   (the table of every entry, from the saved probabilities)

Trains `robot-rl classifier`'s model (`robot_rl.classifier_train.train_classifier`) under several settings on one
dataset recorded by `collect_push_frames.py`, with a fixed split: the first `--train` episodes train, every other
episode is held out (so all settings and seeds see the same labelled episodes, and the held-out set is the same).
Each setting is NAME=key:value,... over `TrainSettings` fields plus `cameras` (front|wrist|front+wrist) and `crop`
(r0-r1-c0-c1: the front frames' rows r0:r1 and columns c0:c1, a zoom on the workspace as HIL-SERL crops). Writes per
setting and seed: precision and recall at 0.5 and the reported thresholds, and the held-out errors by the frame's
cube-to-target distance (`distances.npy`: success is < 5 cm), to show how many errors sit at the boundary, and
the classifier as a terminating reward on each held-out episode (`episode_view`), and the held-out frames'
probabilities beside the json (`<out stem>_<name>_s<seed>_prob.npy`). `--save DIR` also saves each classifier as
`DIR/<name>_s<seed>` (`robot-rl classifier`'s format: `robot-rl train env.reward_classifier=` reads it).

HIL-SERL's second round of labels: `--extra DATASET` (repeatable) adds every episode of another dataset with the same
cameras to the training set only (e.g. `robot-rl collect policy=<checkpoint>` rollouts of a policy that learned to
fool the classifier, labelled by the task's success); `--heldout-from N` keeps episodes N.. held out whatever
`--train` is (episodes between the two are not used), so a run with fewer labelled episodes is scored on the same
set; `--probe DATASET` also scores each classifier on another dataset's frames (e.g. another seed's policy
rollouts): per-frame precision and false-positive rate, and in how many episodes it fires (as a reward, k=1)."""
from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from robot_rl.classifier import save_classifier
from robot_rl.classifier_train import (
    LabelledFrames,
    TrainSettings,
    join_frames,
    load_labelled_frames,
    train_classifier,
)

BANDS_CM = (0.0, 3.0, 4.0, 4.5, 5.0, 5.5, 6.0, 7.0, 100.0)


def episode_view(prob: np.ndarray, label: np.ndarray, episode: np.ndarray, threshold: float, k: int,
                 slack: int | None = None) -> dict:
    """The classifier as a terminating reward (k frames in a row at or above `threshold`) on each held-out episode:
    in an episode that succeeds, does it fire before the first success frame (early), at most `slack` frames after
    it (on time; default k: within a frame of the k-th success frame), later, or never; in an episode that never
    succeeds, does it fire."""
    slack = k if slack is None else slack
    counts = dict(early=0, on_time=0, late=0, never=0, failed_fired=0, failed_quiet=0)
    for e in np.unique(episode):
        hits, labels = prob[episode == e] >= threshold, label[episode == e]
        streak, fire = 0, None
        for t, hit in enumerate(hits):
            streak = streak + 1 if hit else 0
            if streak >= k:
                fire = t
                break
        first = int(np.nonzero(labels)[0][0]) if labels.any() else None
        if first is None:
            counts["failed_fired" if fire is not None else "failed_quiet"] += 1
        elif fire is None:
            counts["never"] += 1
        else:
            counts["early" if fire < first else "on_time" if fire <= first + slack else "late"] += 1
    return counts


def probe_view(model, probe: LabelledFrames, keys: list[str], threshold: float, name: str) -> dict:
    """The classifier on another dataset's frames: per-frame precision and false-positive rate at `threshold`, and
    per episode whether it fires (k=1) and at which step (median over those that fire)."""
    prob = model.probability({k: v for k, v in probe.obs.items() if k in keys}).cpu().numpy()
    label, episode = probe.label.numpy(), probe.episode.numpy()
    hit = prob >= threshold
    fired = [int(np.nonzero(hit[episode == e])[0][0]) for e in np.unique(episode) if hit[episode == e].any()]
    return {"dataset": name, "frames": int(len(label)), "positives": int(label.sum()),
            "predicted_positive": int(hit.sum()), "false_positives": int((hit & ~label).sum()),
            "false_positive_rate": float((hit & ~label).sum() / max(1, (~label).sum())),
            "episodes": int(len(np.unique(episode))), "episodes_fired": len(fired),
            "median_first_fire_step": float(np.median(fired)) if fired else None}


def pct(x: float | None) -> str:
    """A share as a percentage; "n/a" where undefined (no frame predicted or labelled a success)."""
    return "n/a" if x is None else f"{100 * x:.1f}%"


def hidden_frames(front: torch.Tensor) -> np.ndarray:
    """Front frames in which the red cube or the green target shows at most 2 pixels (hidden behind the hand or the
    cube, or out of view): a classifier of this camera cannot see success there."""
    f = front.numpy().astype(np.int16)
    red = ((f[..., 0] > 140) & (f[..., 1] < 90) & (f[..., 2] < 90)).sum(axis=(1, 2))
    green = ((f[..., 1] > 120) & (f[..., 0] < 110) & (f[..., 2] < 110)).sum(axis=(1, 2))
    return (red <= 2) | (green <= 2)


def report(dataset: str, out: str, train: int) -> None:
    """Recompute, from the saved probabilities, each entry's episode view (k = 1, 2) and its errors on frames where
    the front camera cannot see the cube or the target; print a markdown table (the README's)."""
    from robot_rl.classifier_train import frame_labels
    from robot_rl.datasets import read_dataset

    data = read_dataset(dataset, load_images=True)
    label, episode = frame_labels(data.success, data.episode_index).numpy(), data.episode_index.numpy()
    held = episode >= train
    hidden = hidden_frames(data.transitions.obs["pixels/front"][torch.from_numpy(held)])
    dist = np.load(Path(dataset) / "distances.npy")[held] * 100
    results = json.loads(Path(out).read_text())
    print("| setting | seed | precision | recall | P / R at 0.9 | errors: all / cube 4-7 cm from the target / target or "
          "cube hidden | as a reward, k=2: on time / early / late / never / failed episodes fired | time |")
    print("|---|---|---|---|---|---|---|---|")
    for name, entry in results.items():
        m, path = entry["metrics"], Path(out).with_name(f"{Path(out).stem}_{name}_prob.npy")
        head = (f"| {name.rsplit('_s', 1)[0]} {entry['settings']} | {entry['seed']} | {pct(m['precision'])} | "
                f"{pct(m['recall'])} | {pct(m['by_threshold']['0.9']['precision'])} / "
                f"{pct(m['by_threshold']['0.9']['recall'])}")
        if not path.is_file():  # trained before the probabilities were saved
            bands = entry["errors_by_distance"]
            near = sum(bands[b]["errors"] for b in ("4-4.5cm", "4.5-5cm", "5-5.5cm", "5.5-6cm", "6-7cm"))
            errors = sum(b["errors"] for b in bands.values())
            print(f"{head} | {errors} / {near} / not saved | not saved | {entry['seconds']} s |")
            continue
        prob = np.load(path)
        wrong = (prob >= entry["metrics"]["threshold"]) != label[held]
        entry["episodes_as_reward"] = {f"k{k}": episode_view(prob, label[held], episode[held],
                                                             entry["metrics"]["threshold"], k) for k in (1, 2)}
        entry["errors_where_hidden"] = {"frames": int(hidden.sum()), "errors": int((wrong & hidden).sum())}
        e = entry["episodes_as_reward"]["k2"]
        print(f"{head} | {int(wrong.sum())} / "
              f"{int((wrong & (dist >= 4) & (dist < 7)).sum())} / {int((wrong & hidden).sum())} | {e['on_time']} / "
              f"{e['early']} / {e['late']} / {e['never']} / {e['failed_fired']} of "
              f"{e['failed_fired'] + e['failed_quiet']} | {entry['seconds']} s |")
    Path(out).write_text(json.dumps(results, indent=1))


def parse(spec: str) -> tuple[str, dict]:
    name, _, rest = spec.partition("=")
    out: dict = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition(":")
        default = None if key in ("cameras", "crop") else getattr(TrainSettings(), key)
        out[key] = value if default is None else type(default)(value)
    return name, out


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("dataset")
    p.add_argument("out")
    p.add_argument("settings", nargs="*")
    p.add_argument("--report", action="store_true", help="only recompute the views from saved probabilities")
    p.add_argument("--train", type=int, default=20)
    p.add_argument("--seeds", default="0")
    p.add_argument("--save", help="directory to save each trained classifier in, as <name>_s<seed>")
    p.add_argument("--extra", action="append", default=[], help="a dataset whose episodes all train (repeatable)")
    p.add_argument("--heldout-from", type=int, help="first held-out episode (default: --train)")
    p.add_argument("--probe", help="another dataset to score each classifier on (e.g. a policy's rollouts)")
    a = p.parse_args()
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    torch.set_num_threads(1)
    if a.report:
        report(a.dataset, a.out, a.train if a.heldout_from is None else a.heldout_from)
        return
    primary = load_labelled_frames(a.dataset)
    dist = torch.from_numpy(np.load(Path(a.dataset) / "distances.npy"))
    assert len(dist) == len(primary), (len(dist), len(primary))
    heldout_from = a.train if a.heldout_from is None else a.heldout_from
    assert heldout_from >= a.train, "--heldout-from must not be below --train"
    held_primary = primary.episode >= heldout_from
    dist = dist[held_primary]
    used = primary.subset((primary.episode < a.train) | held_primary)
    frames_all, from_primary = join_frames([used, *map(load_labelled_frames, a.extra)], [a.dataset, *a.extra])
    train_mask = ~from_primary  # every extra episode trains, and the primary's first --train ones
    train_mask[from_primary] = used.episode < a.train
    probe = load_labelled_frames(a.probe) if a.probe else None
    results = json.loads(Path(a.out).read_text()) if Path(a.out).exists() else {}
    for spec in a.settings:
        name, kw = parse(spec)
        cams = kw.pop("cameras", "front+wrist").split("+")
        crop = [int(v) for v in kw.pop("crop").split("-")] if "crop" in kw else None  # front rows r0-r1, cols c0-c1
        keep = {f"pixels/{c}" for c in cams} | {"state"}
        obs = {k: v for k, v in frames_all.obs.items() if k in keep}
        if crop:
            obs["pixels/front"] = obs["pixels/front"][:, crop[0]:crop[1], crop[2]:crop[3]].contiguous()
        frames = LabelledFrames(obs, frames_all.label, frames_all.episode)
        for seed in [int(s) for s in a.seeds.split(",")]:
            settings = replace(TrainSettings(), seed=seed, **kw)
            t0 = time.monotonic()
            model, metrics = train_classifier(frames, settings, message=lambda s: None, held_out=~train_mask)
            seconds = time.monotonic() - t0
            prob = model.probability(frames.subset(~train_mask).obs).cpu()
            pred, label = prob >= settings.threshold, frames.label[~train_mask]
            hd = dist * 100  # held-out frames only
            bands = {}
            for lo, hi in zip(BANDS_CM[:-1], BANDS_CM[1:], strict=True):
                m = (hd >= lo) & (hd < hi)
                bands[f"{lo:g}-{hi:g}cm"] = {"frames": int(m.sum()), "errors": int((pred != label)[m].sum())}
            metrics.pop("heldout_episodes", None)
            held_label, held_episode = label.numpy(), frames.episode[~train_mask].numpy()
            episodes = {f"k{k}": episode_view(prob.numpy(), held_label, held_episode, settings.threshold, k)
                        for k in (1, 2)}
            results[f"{name}_s{seed}"] = {"settings": {**kw, "cameras": cams, "crop": crop}, "seed": seed, "seconds": round(seconds),
                                         "metrics": metrics, "errors_by_distance": bands,
                                         "episodes_as_reward": episodes}
            by = metrics["by_threshold"]
            Path(a.out).write_text(json.dumps(results, indent=1))
            print(f"{name} s{seed}: P {pct(metrics['precision'])} R {pct(metrics['recall'])} | 0.9: "
                  f"{pct(by['0.9']['precision'])}/{pct(by['0.9']['recall'])} | errors by band "
                  f"{[v['errors'] for v in bands.values()]} of {[v['frames'] for v in bands.values()]} | "
                  f"{seconds:.0f}s", flush=True)
            np.save(Path(a.out).with_name(f"{Path(a.out).stem}_{name}_s{seed}_prob.npy"), prob.numpy())
            if probe is not None:
                results[f"{name}_s{seed}"]["probe"] = probe_view(model, probe, list(obs), settings.threshold, a.probe)
                Path(a.out).write_text(json.dumps(results, indent=1))
                print(f"  probe {a.probe}: {results[f'{name}_s{seed}']['probe']}", flush=True)
            if a.save:
                save_classifier(model, Path(a.save) / f"{name}_s{seed}", metrics,
                                {"dataset": a.dataset, "train_episodes": a.train, "extra": a.extra,
                                 "setting": spec})


if __name__ == "__main__":
    main()
