"""How often random exploration earns any reward on dm_control hopper-stand (issue 60's diagnosis).

The task pays nothing until the torso is above 0.6 m. This plays uniform random actions, each held for 1, 4, 16
or 50 agent steps (action repeat 2, as the suite), 8 episodes each, and counts the rewarded control steps: if
time-correlated noise alone found standing far more often, it would be the fix to try first.

    MUJOCO_GL=egl .venv/bin/python bench/results/sample_efficiency/hopper-stand/random_exploration.py \
        > bench/results/sample_efficiency/hopper-stand/random_exploration.txt
"""

import numpy as np
from dm_control import suite

ACTION_REPEAT = 2
EPISODES = 8


def main() -> None:
    env = suite.load("hopper", "stand", task_kwargs={"random": 0})
    shape = env.action_spec().shape
    rng = np.random.default_rng(0)
    for hold in (1, 4, 16, 50):
        returns, rewarded, steps = [], 0, 0
        for _ in range(EPISODES):
            step, total, action = env.reset(), 0.0, None
            t = 0
            while not step.last():
                if t % (ACTION_REPEAT * hold) == 0:
                    action = rng.uniform(-1.0, 1.0, shape)
                step = env.step(action)
                total += step.reward
                rewarded += step.reward > 0
                t += 1
            returns.append(total)
            steps += t
        print(f"hold {hold:3d} agent steps: return mean {np.mean(returns):6.1f}, max {np.max(returns):6.1f}; "
              f"rewarded control steps {rewarded}/{steps}", flush=True)


if __name__ == "__main__":
    main()
