"""Usage: python probe.py --classifiers runs/clf/long_s0 runs/clf/mined_s0 ... --data data/clf/policy_s2 ...

Each classifier on each dataset's front-camera frames (`sweep.probe_view`: per-frame false positives and in how many
episodes it fires as a reward, k=1, threshold 0.5). The datasets are rollouts of policies trained on a classifier's
reward that no probed classifier was trained on (`robot-rl collect env.spec=arm:push-sparse-pixels
env.pixel_size=[64,64] policy=<checkpoint>`, labelled by the task's success), so the table says whether a round of
labels taught the classifier what a new policy will try. Writes probe.json beside this script."""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from sweep import probe_view  # this folder's

from robot_rl.classifier import load_classifier
from robot_rl.classifier_train import load_labelled_frames
from robot_rl.stats import write_json


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--classifiers", nargs="+", required=True)
    p.add_argument("--data", nargs="+", required=True)
    a = p.parse_args()
    torch.set_num_threads(1)
    frames = {d: load_labelled_frames(d, ["front"]) for d in a.data}
    out = {}
    for c in a.classifiers:
        clf = load_classifier(c)
        out[c] = {d: probe_view(clf, f, ["pixels/front"], 0.5, d) for d, f in frames.items()}
        for d, v in out[c].items():
            print(f"{c} on {d}: {v['episodes_fired']}/{v['episodes']} episodes fired, false positives "
                  f"{v['false_positives']}/{v['frames'] - v['positives']} frames", flush=True)
    write_json(out, Path(__file__).resolve().parent / "probe.json")


if __name__ == "__main__":
    main()
