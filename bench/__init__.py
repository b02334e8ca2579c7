"""Benchmarks of robot_rl against Stable-Baselines3 (`make bench`; see bench/README.md)."""
