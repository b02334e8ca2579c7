"""Video encoding beside gRPC: a process that holds gRPC channels (the robot bridge's client, Ray) must still
encode camera videos. gRPC's fork handlers used to kill some ffmpeg children before exec (a broken pipe on the
first frame, both attempts of `encode_video`'s retry failing in the full test suite); `robot_rl` now turns them
off on import (`robot_rl/__init__.py`)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import robot_rl  # first, as any use of the package is
    import tempfile
    from concurrent import futures
    from pathlib import Path

    import grpc
    import numpy as np

    from robot_rl.datasets.video import _encode_video_once

    live = []
    for _ in range(3):  # servers and channels that stay alive, as the bridge's do in a session
        server = grpc.server(futures.ThreadPoolExecutor(2))
        port = server.add_insecure_port("127.0.0.1:0")
        server.start()
        channel = grpc.insecure_channel(f"127.0.0.1:{port}")
        grpc.channel_ready_future(channel).result(timeout=10)
        live += [server, channel]
    frames = np.random.default_rng(0).integers(0, 255, (10, 32, 32, 3), dtype=np.uint8)
    out, failed = Path(tempfile.mkdtemp()), 0
    for i in range(30):
        try:
            _encode_video_once(out / f"{i}.mp4", frames, 10, 23, 2, False)
        except OSError:
            failed += 1
    print("failed", failed)
""")


def test_videos_encode_in_a_process_that_holds_grpc_channels():
    env_without_override = {k: v for k, v in os.environ.items() if k != "GRPC_ENABLE_FORK_SUPPORT"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=300,
                          env=env_without_override)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "failed 0" in proc.stdout, proc.stdout + proc.stderr[-2000:]
