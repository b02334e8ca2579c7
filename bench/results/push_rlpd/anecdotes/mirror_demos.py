"""`robot-rl` with the prior data doubled by its mirror image (y -> -y): the one-off experiment (stop 31) behind
the supported `data.mirror=true` (stop 32), which reproduces its runs bit for bit; kept to repeat them as run.

The arm's workspace, resets and hand are symmetric about the plane y = 0, so a demo reflected in it is another valid
demo: every y coordinate of the state (positions, velocities, relative vectors; the cube quaternion's x and z) and
the action's y displacement change sign. This script patches `OfflineData.load` to append those reflections and then
runs the CLI, e.g.

    .venv/bin/python bench/results/push_rlpd/anecdotes/mirror_demos.py train experiment=rlpd_push seed=0 ...

It tests whether RLPD's failures on push come from what the 20 demos cover (the held-out episodes it fails most are
a cube on the +y side pushed towards -y, which two of the demos show).
"""

from __future__ import annotations

import sys

import torch
from robot_rl.envs.arm.constants import STATE_LAYOUT

from robot_rl import prior_data
from robot_rl.cli import main
from robot_rl.transitions import Transitions

FLIP_STATE = [s.start + 1 for k, s in STATE_LAYOUT.items() if k != "cube_quat" and s.stop - s.start == 3]
# the cube quaternion (w, x, y, z) reflects to (w, -x, y, -z)
FLIP_STATE += [STATE_LAYOUT["cube_quat"].start + 1, STATE_LAYOUT["cube_quat"].start + 3]
FLIP_ACTION = [1]  # (dx, dy, dz, gripper)
_load = prior_data.OfflineData.load.__func__


def _mirrored(x: torch.Tensor, columns: list[int]) -> torch.Tensor:
    x = x.clone()
    x[:, columns] = -x[:, columns]
    return x


def _load_with_mirror(cls, *args, **kwargs):  # noqa: ANN001, ANN202 (the patched classmethod's signature)
    d = _load(cls, *args, **kwargs)
    t = d.transitions
    if t.cameras:
        raise SystemExit("mirror_demos.py: state datasets only (a camera image is not mirrored by a sign change)")
    shift = int(d.episode_index.max()) + 1
    mirrored = t._replace(obs={"state": _mirrored(t.obs["state"], FLIP_STATE)}, action=_mirrored(t.action, FLIP_ACTION),
                          next_obs={"state": _mirrored(t.next_obs["state"], FLIP_STATE)})
    return cls(Transitions.cat([t, mirrored]), d.mc_return.repeat(2), 2 * d.num_episodes, d.success_rate,
               torch.cat([d.episode_index, d.episode_index + shift]))


if __name__ == "__main__":
    prior_data.OfflineData.load = classmethod(_load_with_mirror)
    sys.exit(main(sys.argv[1:]))
