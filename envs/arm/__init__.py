"""Simulated tabletop arm: scene (``model``), gymnasium tasks (``tasks``) and scripted experts (``experts``).

Use through ``envs.make("arm:<task>[-sparse][-pixels]", ...)``; see ``envs.arm_backend`` for the spec names.
"""

from .tasks import STATE_DIM, STATE_LAYOUT, TASKS, TIME_LIMITS, ArmEnv

__all__ = ["STATE_DIM", "STATE_LAYOUT", "TASKS", "TIME_LIMITS", "ArmEnv"]
