"""Simulated tabletop arm: scene (``model``), the MDP's numbers (``constants``), the gymnasium env (``tasks``) and
scripted experts (``experts``). The tasks themselves are defined by ``robot_rl.envs.sim.tasks.arm.ArmTask``.

Use through ``robot_rl.envs.make("arm:<task>[-sparse][-pixels]", ...)``; see ``robot_rl.envs.arm_backend`` for the spec names,
``robot_rl.envs.arm.tasks`` for control, observation layout (``STATE_LAYOUT``) and rewards, and ``robot_rl.envs.arm.experts``
for the batched scripted experts (``make_expert("arm:push", num_envs)``).
"""

from .constants import PIXEL_CAMERAS, PROPRIO_DIM, PROPRIO_KEYS, STATE_DIM, STATE_LAYOUT, TASKS, TIME_LIMITS
from .experts import ScriptedExpert, make_expert
from .tasks import ArmEnv

__all__ = [
    "PIXEL_CAMERAS", "PROPRIO_DIM", "PROPRIO_KEYS", "STATE_DIM", "STATE_LAYOUT", "TASKS", "TIME_LIMITS", "ArmEnv", "ScriptedExpert", "make_expert",
]
