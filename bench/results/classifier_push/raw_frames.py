"""Usage: python raw_frames.py <classifier dir> [episodes, default 30]

The classifier on the frames `robot-rl train env.reward_classifier=` gives it: the front camera's 64x64 frames as the
arm env renders them (the sweep measures on the dataset's frames, which went through the video codec). Rolls the
scripted push expert (noise 0.1/0.3/1.0 by episode, seeds 5000+, acting on the full state) on
`ArmEnv(push, sparse, pixels, full_state)` up to 20 steps past the first success, as `collect_push_frames.py` records,
and reports per-frame precision and recall (label: the task's success of that frame) and, per episode, where the
classifier would end it as a reward (first frame at or above 0.5): before the task's first success (early), at it,
after it, never; and in episodes that never succeed, whether it fires. Writes raw_frames.json beside this script."""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import torch
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.experts import ScriptedExpert

from robot_rl.classifier import load_classifier
from robot_rl.stats import write_json


def main() -> None:
    path, episodes = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 30
    torch.set_num_threads(1)
    clf = load_classifier(path)
    env = ArmEnv("push", "sparse", pixels=True, pixel_size=(64, 64), full_state=True)
    hits, labels, ends = [], [], dict(early=0, on_time=0, late=0, never=0, failed_fired=0, failed_quiet=0)
    for e in range(episodes):
        expert = ScriptedExpert("push", 1, noise=[0.1, 0.3, 1.0][e % 3], seed=5000 + e)
        obs, _ = env.reset(seed=5000 + e)
        first_success = first_fire = None
        for t in range(100):
            obs, _, _, _, info = env.step(expert.act(torch.from_numpy(obs["state"])[None])[0].numpy())
            fire = float(clf.probability({"pixels/front": torch.from_numpy(obs["pixels/front"])[None]})[0]) >= 0.5
            hits.append(fire)
            labels.append(bool(info["success"]))
            first_fire = t if fire and first_fire is None else first_fire
            first_success = t if info["success"] and first_success is None else first_success
            if first_success is not None and t - first_success >= 20:
                break
        if first_success is None:
            ends["failed_fired" if first_fire is not None else "failed_quiet"] += 1
        elif first_fire is None:
            ends["never"] += 1
        else:
            ends["early" if first_fire < first_success else "on_time" if first_fire == first_success else "late"] += 1
    env.close()
    hit, label = np.array(hits), np.array(labels)
    result = {"classifier": path, "episodes": episodes, "frames": int(label.size), "success_frames": int(label.sum()),
              "precision": round(float((hit & label).sum() / max(hit.sum(), 1)), 3),
              "recall": round(float((hit & label).sum() / max(label.sum(), 1)), 3),
              "as_a_terminating_reward": ends}
    write_json(result, Path(__file__).resolve().parent / "raw_frames.json")
    print(result)


if __name__ == "__main__":
    main()
