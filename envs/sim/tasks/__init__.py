"""Tasks defined once for every physics backend (see ``robot_rl.envs.sim.task.SimTask``)."""
