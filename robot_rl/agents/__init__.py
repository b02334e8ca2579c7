"""Learning agents. Each algorithm's whole update is readable top to bottom in its own module."""

from robot_rl.agents.sac import SAC, SACConfig

__all__ = ["SAC", "SACConfig"]
