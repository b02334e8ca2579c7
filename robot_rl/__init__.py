"""robot_rl: the learning core (agents, replay, trainer, CLI) of the robot_rl stack."""

import os as _os

__version__ = "0.1.0"

# gRPC's fork handlers (on by default) run in every child a process holding gRPC objects forks, including the
# ffmpeg children that encode and decode camera videos (datasets, `deploy out=`, hil-train recordings), and they
# kill some of those children before exec: 7 of 30 video encodes failed in a process with three live gRPC
# channels, 0 of 30 with the handlers off (tests/robot_rl/datasets/test_video.py). Nothing in robot_rl forks a
# child that uses gRPC (Ray and the benchmarks spawn theirs), so the handlers are off unless the user set the
# variable. It must be set before gRPC is imported, hence here.
_os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")
