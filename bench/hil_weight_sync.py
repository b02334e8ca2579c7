"""What one HIL weight sync costs an actor's control loop, with a frozen pretrained backbone; one thread.

Why: `hil-train` hands the actor new acting weights whenever the learner updated (in process: at nearly every
control tick; over Ray: every `sync_every_s`). With `agent.encoder.kind=pretrained` those weights held the frozen ResNet
under every camera, although it never changes; copying and loading it took a large part of a 20 Hz tick. Since
2026-11-27 the links send it to an actor once (`HILLearner.actor_state(frozen=False)` afterwards). This measures
both, interleaved in rounds on the same learner: the bytes of one sync and the milliseconds of making it
(`actor_state`, what the learner copies) and loading it (`load_acting_weights`, what the control loop pays).
There is no peer row: HIL-SERL and LeRobot do not run here (JAX, gRPC servers); the comparison is this project's
sync before and after. Writes ``bench/results/<date>-hil-weight-sync.json``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch
from robot_rl.policies.encoders import ResNetBackbone

from bench import common
from robot_rl.agents.sac import EncoderConfig, SACConfig
from robot_rl.hil.learner import HILLearner, LearnerConfig, build_policy, load_acting_weights

STATE, ACTIONS = 7, 4
CAMERAS = ("pixels/front", "pixels/wrist")


def run(size: int, rounds: int, calls: int) -> dict[str, Any]:
    steps, sizes = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for arch in ("resnet10", "resnet18"):
            weights = Path(tmp) / f"{arch}.pt"
            torch.save(ResNetBackbone(arch).state_dict(), weights)  # random values: the cost does not depend on them
            sac = SACConfig(encoder=EncoderConfig(kind="pretrained", weights=str(weights), backbone=arch))
            cfg = LearnerConfig(obs_dim=STATE, action_dim=ACTIONS, sac=sac, capacity=100, prior_capacity=100,
                                cameras={c: [size, size, 3] for c in CAMERAS})
            learner, policy = HILLearner(cfg), build_policy(cfg)
            for frozen, label in ((True, "every tensor (before)"), (False, "without the frozen backbone (now)")):
                name = f"{arch}, {label}"
                sizes[name] = sum(v.numel() * v.element_size() for v in learner.actor_state(frozen).values())

                def sync(learner: HILLearner = learner, policy: torch.nn.Module = policy, frozen: bool = frozen) -> None:
                    load_acting_weights(policy, learner.actor_state(frozen))

                steps[name] = sync
    times = common.interleaved_times(steps, rounds, calls, warmup=1)
    rows = []
    for arch in ("resnet10", "resnet18"):
        before, now = f"{arch}, every tensor (before)", f"{arch}, without the frozen backbone (now)"
        for name in (before, now):
            rows.append(common.row(f"HIL weight sync, {arch} under 2 cameras {size}x{size}", f"ms, {name}",
                                   common.median(times[name]) * 1e3, compare=False,
                                   note=f"{sizes[name] / 1e6:.1f} MB per sync"))
        rows[-1]["ratio"] = common.round_ratio(times, before, now)
        rows[-1]["note"] += " (ratio: before / now, per round)"
    return {
        "config": {"image": [size, size, 3], "cameras": list(CAMERAS), "state_dim": STATE, "action_dim": ACTIONS,
                   "agent": "SACConfig defaults, encoder=pretrained", "rounds": rounds, "calls_per_round": calls},
        "ms_per_sync": {n: [t * 1e3 for t in ts] for n, ts in times.items()},
        "bytes_per_sync": sizes,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return common.timing_main(__doc__.splitlines()[0], "hil-weight-sync",
                              lambda args: run(args.size, args.rounds, args.calls), 128,
                              "frame height and width (HIL-SERL's: 128)", "syncs timed per variant and round", argv,
                              rounds=5)


if __name__ == "__main__":
    main()
