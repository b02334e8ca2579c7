"""Milliseconds per camera update of `bench/pixel_update_cost.py`'s agent (experiment=reach_pixels: two 48x48
cameras, batch 64), one thread, with extra agent keys; for before/after figures of one change, run at both commits
alternately on a quiet machine, e.g.

    for i in 1 2 3; do git checkout -q <before>; python bench/results/camera_update/update_ms.py
                       git checkout -q <after>;  python bench/results/camera_update/update_ms.py; done

`kind=pretrained` measures the frozen ResNet-10 (random weights: the cost does not depend on their values).
Usage: update_ms.py [kind=pretrained] [CALLS] [agent.key=value ...]
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import torch
from robot_rl.policies.encoders import ResNetBackbone

from bench.pixel_update_cost import ours_update


def main(argv: list[str]) -> None:
    torch.set_num_threads(1)
    pretrained = "kind=pretrained" in argv
    calls = next((int(a) for a in argv if a.isdigit()), 8 if pretrained else 30)
    overrides = [a for a in argv if "=" in a and a != "kind=pretrained"]
    with tempfile.TemporaryDirectory() as tmp:
        if pretrained:
            weights = Path(tmp) / "resnet10.pt"
            torch.save(ResNetBackbone("resnet10").state_dict(), weights)
            overrides += ["agent.encoder.kind=pretrained", f"agent.encoder.weights={weights}"]
        update, batch, _ = ours_update(overrides, 48)
        for _ in range(3):
            update()
        start = time.perf_counter()
        for _ in range(calls):
            update()
    print(f"{(time.perf_counter() - start) / calls * 1e3:.1f} ms per update (batch {batch}, {calls} calls"
          f"{', frozen resnet10' if pretrained else ''})", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
