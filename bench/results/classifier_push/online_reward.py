"""ClassifierReward on arm:push-pixels (64x64) under the scripted expert (from the env's internal state): per
episode, the step the classifier's reward fires vs the env's own success (the arm ends episodes at its success)."""
import sys

import torch
from robot_rl.envs.arm.experts import ScriptedExpert

from robot_rl import envs
from robot_rl.classifier_reward import ClassifierReward

env = envs.make("arm:push-pixels", num_envs=1, seed=500, pixel_size=(64, 64))
wrapped = ClassifierReward(env, sys.argv[1], threshold=float(sys.argv[2]), consecutive=int(sys.argv[3]),
                           terminate=True)
arm = env._envs[0].unwrapped
obs = wrapped.reset(seed=500)
rows, t, episodes = [], 0, int(sys.argv[4])
expert = ScriptedExpert("push", 1, noise=0.3, seed=7)
while len(rows) < episodes:
    full = arm.arm_task.observe(*arm.physics.state())[0][None]
    obs, reward, term, trunc, info = wrapped.step(expert.act(full))
    t += 1
    if bool(term[0] or trunc[0]):
        rows.append((t, float(reward[0]), bool(info.get("env_success", torch.tensor([False]))[0])))
        t = 0
        expert.reset()
for r in rows:
    print(f"episode length {r[0]:3d} | classifier reward at the end {r[1]:.0f} | env's own success at the end {r[2]}")
print(f"classifier ended {sum(r[1] == 1 and not r[2] for r in rows)} episodes before the env's success; "
      f"both at the same step {sum(r[1] == 1 and r[2] for r in rows)}; env success with reward 0 "
      f"{sum(r[1] == 0 and r[2] for r in rows)}; neither (time limit) {sum(r[1] == 0 and not r[2] for r in rows)}")
