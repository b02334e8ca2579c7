"""Usage: python collect_push_frames.py <out dir> <episodes> [first episode index (appends)] [frame size, default 64]

Roll out arm push with pixels (64x64 unless told, front + wrist) under the scripted push expert acting from the env's internal
full state (noisy; some episodes very noisy so they fail), going on up to 20 steps after the first success, and
record the episodes with robot_rl's EpisodeRecorder (next.success = success of the observation the action led to).
Beside the dataset, `distances.npy` holds each recorded frame's cube-to-target distance in the table plane (metres,
frames in the dataset's order; success is a distance under 5 cm), for the analysis of errors near that boundary."""
import sys
import time
from pathlib import Path

import numpy as np
import torch
from robot_rl.envs.arm import ArmEnv
from robot_rl.envs.arm.constants import STATE_LAYOUT
from robot_rl.envs.arm.experts import ScriptedExpert

from robot_rl.datasets import DatasetWriter, EpisodeRecorder, transition_features

out, episodes = sys.argv[1], int(sys.argv[2])
start = int(sys.argv[3]) if len(sys.argv) > 3 else 0
size = int(sys.argv[4]) if len(sys.argv) > 4 else 64
env = ArmEnv("push", "sparse", pixels=True, pixel_size=(size, size))
writer = DatasetWriter(out, fps=20, features=transition_features(7, 4, images={"front": (size, size), "wrist": (size, size)}),
                       task="push", fsync=False, resume=start > 0)
rec = EpisodeRecorder(writer, 1, obs_keys={"state": "observation.state", "pixels/front": "observation.images.front",
                                           "pixels/wrist": "observation.images.wrist"})
t0 = time.time()
REL = STATE_LAYOUT["target_rel_cube"]
dist_path = Path(out) / "distances.npy"
distances = list(np.load(dist_path)) if start > 0 and dist_path.exists() else []


def tens(o: dict) -> dict:
    return {k: torch.from_numpy(np.asarray(v))[None] for k, v in o.items()}


for e in range(start, start + episodes):
    noise = [0.1, 0.3, 1.0][e % 3]
    expert = ScriptedExpert("push", 1, noise=noise, seed=1000 + e)
    obs, _ = env.reset(seed=e)
    first, n_succ = None, 0
    for t in range(100):
        full = env.arm_task.observe(*env.physics.state())[0][None]
        distances.append(float(np.linalg.norm(full[0, REL][:2].numpy())))  # target_rel_cube, x and y
        action = expert.act(full)[0].numpy()
        nxt, r, term, trunc, info = env.step(action)
        if info["success"] and first is None:
            first = t
        n_succ += info["success"]
        last = t == 99 or (first is not None and t >= first + 20)
        rec.record(tens(obs), torch.from_numpy(action)[None], torch.tensor([r]), torch.tensor([False]),
                   torch.tensor([last]), {"success": torch.tensor([info["success"]]), "final_obs": tens(nxt)})
        obs = nxt
        if last:
            break
    print(f"episode {e} noise {noise} steps {t + 1} first success {first} success steps {n_succ} | {time.time() - t0:.0f}s", flush=True)
rec.close()
writer.close()
np.save(dist_path, np.asarray(distances, np.float32))
env.close()
