"""robot_rl: the learning core (agents, replay, trainer, CLI) of the robot_rl stack."""

__version__ = "0.1.0"
