"""What a HIL chunk costs to store with cached embeddings (the frozen backbone on its frames): row by row, as the
HIL learner did before 2026-12-06, against `ObservationPipeline.chunk_for_replay` on one 20-step chunk and on 20
one-step chunks (as a HIL actor sends them: each step's frames are the previous step's next ones); one thread, two
cameras, a resnet10 of random weights (the cost does not depend on their values).

Usage: python bench/results/camera_update/chunk_cost.py [SIZE ...]   (default 64 128)
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch
from robot_rl.policies.encoders import ResNetBackbone

from robot_rl.agents.sac import SAC, SACConfig
from robot_rl.observations import ObservationPipeline
from robot_rl.transitions import Transitions

CAMERAS, STEPS, REPEATS = ("pixels/front", "pixels/wrist"), 20, 3


def measure(size: int, weights: Path) -> dict[str, float]:
    cfg = SACConfig.from_dict({"encoder": {"kind": "pretrained", "weights": str(weights), "image_shift": 0,
                                           "cache_embeddings": True}})
    agent = SAC(7, 4, cfg, cameras={c: (size, size, 3) for c in CAMERAS})
    pipeline = ObservationPipeline(agent, ("state", *CAMERAS))
    frames = {"state": torch.randn(STEPS + 1, 7),
              **{c: torch.randint(0, 256, (STEPS + 1, size, size, 3), dtype=torch.uint8) for c in CAMERAS}}
    chunk = Transitions({k: v[:-1] for k, v in frames.items()}, torch.zeros(STEPS, 4), torch.zeros(STEPS),
                        {k: v[1:] for k, v in frames.items()}, torch.zeros(STEPS, dtype=torch.bool),
                        torch.zeros(STEPS, dtype=torch.bool))

    def row_by_row() -> None:
        for i in range(STEPS):
            row = chunk.rows(slice(i, i + 1))
            pipeline.for_replay(row.obs)
            pipeline.for_replay(row.next_obs)

    def one_step_chunks() -> None:  # as a HIL actor sends them: one step per chunk
        for i in range(STEPS):
            pipeline.chunk_for_replay(chunk.rows(slice(i, i + 1)))

    out = {}
    for name, store in (("row by row", row_by_row), ("chunk", lambda: pipeline.chunk_for_replay(chunk)),
                        ("one-step chunks", one_step_chunks)):
        store()
        start = time.perf_counter()
        for _ in range(REPEATS):
            store()
        out[name] = (time.perf_counter() - start) / REPEATS / STEPS * 1e3
    return out


def main() -> None:
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "resnet10.pt"
        torch.save(ResNetBackbone("resnet10").state_dict(), weights)
        for size in [int(a) for a in sys.argv[1:]] or [64, 128]:
            ms = measure(size, weights)
            print(f"{size}x{size}: " + ", ".join(f"{k} {v:.1f} ms" for k, v in ms.items())
                  + " per transition", flush=True)


if __name__ == "__main__":
    main()
