"""Tasks defined once for every physics backend (see ``envs.sim.task.SimTask``)."""
