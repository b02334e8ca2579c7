"""Usage: python raw_frames.py <classifier dir> [episodes, default 30] [--run <train run dir>]

The classifier on the frames `robot-rl train env.reward_classifier=` gives it: the front camera's 64x64 frames as the
arm env renders them (the sweep measures on the dataset's frames, which went through the video codec). Rolls the
scripted push expert (noise 0.1/0.3/1.0 by episode, seeds 5000+, acting on the full state) on
`ArmEnv(push, sparse, pixels, full_state)` up to 20 steps past the first success, as `collect_push_frames.py` records,
and reports per-frame precision and recall (label: the task's success of that frame) and, per episode, where the
classifier would end it as a reward (first frame at or above 0.5): before the task's first success (early), at it,
after it, never; and in episodes that never succeed, whether it fires. Also the cube-to-target distance where it
first fires. Writes raw_frames.json beside this script.

With `--run`, the run's latest weights (deterministic) act instead of the expert, for 100 steps or to the first
success, and the results go to raw_frames_[<round>_]<run name>.json: what a policy trained on the classifier's reward
(rlpd_reward.sh) does when the classifier fires."""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import STATE_LAYOUT
from robot_rl.envs.arm.experts import ScriptedExpert
from sweep import episode_view  # this folder's: the classifier as a terminating reward, per episode

from robot_rl.classifier import load_classifier
from robot_rl.stats import summarize, write_json

TO_TARGET = STATE_LAYOUT["target_rel_cube"]


def run_policy(run: Path):
    """The run's latest agent as `act(state) -> action` (deterministic)."""
    from robot_rl import checkpoint, envs
    from robot_rl.config import load_run_config
    from robot_rl.trainer import build_agent

    cfg = load_run_config(run)
    with envs.make(cfg.env.spec) as env:
        agent = build_agent(cfg, env)
    agent.load_state_dict(checkpoint.load(run / "checkpoints" / "latest.pt")["agent"])
    return lambda state: agent.act({"state": torch.from_numpy(state)[None]}, deterministic=True)[0].numpy()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("classifier")
    p.add_argument("episodes", type=int, nargs="?", default=30)
    p.add_argument("--run", type=Path)
    a = p.parse_args()
    torch.set_num_threads(1)
    clf = load_classifier(a.classifier)
    env = ArmEnv("push", "sparse", pixels=True, pixel_size=(64, 64), full_state=True)
    policy = run_policy(a.run) if a.run else None
    probs, labels, episode, fire_distance = [], [], [], []
    for e in range(a.episodes):
        expert = ScriptedExpert("push", 1, noise=[0.1, 0.3, 1.0][e % 3], seed=5000 + e)
        obs, _ = env.reset(seed=5000 + e)
        first_success = first_fire = None
        for t in range(100):
            state = obs["state"]
            action = policy(state) if policy else expert.act(torch.from_numpy(state)[None])[0].numpy()
            obs, _, _, _, info = env.step(action)
            prob = float(clf.probability({"pixels/front": torch.from_numpy(obs["pixels/front"])[None]})[0])
            probs.append(prob)
            labels.append(bool(info["success"]))
            episode.append(e)
            if prob >= 0.5 and first_fire is None:
                first_fire = t
                fire_distance.append(float(np.linalg.norm(obs["state"][TO_TARGET][:2])))
            first_success = t if info["success"] and first_success is None else first_success
            if first_success is not None and (policy or t - first_success >= 20):
                break
    env.close()
    hit, label = np.array(probs) >= 0.5, np.array(labels)
    # on time = at the task's first success frame: the task ends there, so a later verdict rewards nothing
    ends = episode_view(np.array(probs), label, np.array(episode), 0.5, k=1, slack=0)
    result = {"classifier": a.classifier, "actor": str(a.run) if a.run else "scripted expert, noise 0.1/0.3/1.0",
              "episodes": a.episodes, "frames": int(label.size), "success_frames": int(label.sum()),
              "precision": round(float((hit & label).sum() / max(hit.sum(), 1)), 3),
              "recall": round(float((hit & label).sum() / max(label.sum(), 1)), 3),
              "as_a_terminating_reward": ends,
              "cube_to_target_cm_at_first_fire": summarize([100 * d for d in fire_distance]) if fire_distance else None}
    name = "raw_frames.json"
    if a.run:  # runs/clf_rlpd/s1 -> raw_frames_s1.json, runs/clf_rlpd_r2/s0 -> raw_frames_r2_s0.json
        rnd = a.run.parent.name.removeprefix("clf_rlpd").lstrip("_")
        name = f"raw_frames_{rnd + '_' if rnd else ''}{a.run.name}.json"
    write_json(result, Path(__file__).resolve().parent / name)
    print({k: v for k, v in result.items() if k != "cube_to_target_cm_at_first_fire"},
          "cm at first fire:", result["cube_to_target_cm_at_first_fire"] and
          {k: result["cube_to_target_cm_at_first_fire"][k] for k in ("mean", "min", "max")})


if __name__ == "__main__":
    main()
