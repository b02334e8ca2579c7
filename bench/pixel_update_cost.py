"""What a camera learner costs per update, per image encoder, against SB3's SAC on the same images; one thread.

Why: on a CPU the update, not the renderer, bounds how fast a pixel run goes, and the encoder decides most of
it. The setting is `experiment=reach_pixels` (`arm:reach-pixels`: two cameras plus 7 proprioception numbers,
4 actions, batch 64, UTD 1, plain SAC networks) at its 48x48 frames, with each encoder robot_rl offers:

* `conv 3x16` (the preset's CPU-sized DrQ encoder), `conv 4x32` (DrQ's own size, 50 features), both trained by
  the critic loss with random shifts;
* `pretrained resnet10`: HIL-SERL's frozen ResNet-10 under a learned pooling (`agent.encoder.kind=pretrained`; random
  weights in a file made here, the cost does not depend on their values), with random shifts, and with
  `agent.encoder.cache_embeddings=true` (no shifts; the replay holds the backbone's features, so updates skip it).

The peer is SB3's SAC with `MultiInputPolicy` at its defaults (a NatureCNN per camera, separate feature extractors
for actor and critic), given the same batch size and 48x48 frames; its replay stores each frame twice (obs and
next_obs; SB3 has no memory-optimised replay for dict observations). Replay bytes per transition are reported
for both: robot_rl stores a frame once plus each episode's last (`replay.bytes_per_transition`, 50-step episodes).

Variants and SB3 run interleaved in rounds (`--rounds`), so a change of the machine's load reaches all of them;
the table gives medians over rounds. Writes ``bench/results/<date>-pixel-update-cost.json``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch
from robot_rl.policies.encoders import ResNetBackbone

from bench import common
from robot_rl.agents.sac import SAC
from robot_rl.config import compose_train_config
from robot_rl.observations import ObservationPipeline
from robot_rl.replay import ReplayBuffer, bytes_per_transition

STATE, ACTIONS, EPISODE = 7, 4, 50
CAMERAS = ("pixels/front", "pixels/wrist")
VARIANTS = {
    "conv 3x16 (reach_pixels)": [],
    "conv 4x32 (DrQ size)": ["agent.encoder.channels=32", "agent.encoder.layers=4", "agent.encoder.feature_dim=50"],
    "pretrained resnet10 (frozen)": ["agent.encoder.kind=pretrained", "agent.encoder.weights={weights}"],
    "pretrained resnet10, cached embeddings": ["agent.encoder.kind=pretrained", "agent.encoder.weights={weights}",
                                               "agent.encoder.image_shift=0", "agent.encoder.cache_embeddings=true"],
}


def obs_spec(size: int) -> dict[str, tuple[tuple[int, ...], torch.dtype]]:
    return {"state": ((STATE,), torch.float32), **{k: ((size, size, 3), torch.uint8) for k in CAMERAS}}


def random_replay(agent: SAC, size: int, transitions: int = 2_000, envs: int = 10) -> ReplayBuffer:
    """Random frames and states, stored as `agent` stores them (frames, or cached backbone features)."""
    pipeline = ObservationPipeline(agent)
    spec = pipeline.replay_spec(obs_spec(size))
    replay = ReplayBuffer(transitions, envs, spec, ACTIONS, frames=CAMERAS, episode_steps=EPISODE)
    g = torch.Generator().manual_seed(0)

    def frame() -> dict[str, torch.Tensor]:
        return pipeline.for_replay({
            "state": torch.randn(envs, STATE, generator=g),
            **{k: torch.randint(0, 256, (envs, size, size, 3), generator=g, dtype=torch.uint8) for k in CAMERAS}})

    obs = frame()
    for t in range(transitions // envs):
        nxt, truncated = frame(), torch.full((envs,), (t + 1) % EPISODE == 0)
        replay.add(obs, torch.rand(envs, ACTIONS) * 2 - 1, torch.randn(envs), nxt,
                   torch.zeros(envs, dtype=torch.bool), truncated)
        obs = frame() if bool(truncated[0]) else nxt
    return replay


def _embedding_cost(overrides: list[str], weights: Path, size: int, calls: int = 20) -> float:
    """ms to cache one env step's frames (both cameras, one env): the trainer stores obs and next obs per step."""
    cfg = compose_train_config(["experiment=reach_pixels", f"env.pixel_size=[{size},{size}]",
                                *(o.format(weights=weights) for o in overrides)]).agent
    agent = SAC(STATE, ACTIONS, cfg, cameras={k: (size, size, 3) for k in CAMERAS})
    obs = {"state": torch.zeros(1, STATE), **{k: torch.zeros(1, size, size, 3, dtype=torch.uint8) for k in CAMERAS}}
    pipeline = ObservationPipeline(agent)
    return common.median(common.time_per_call(lambda: pipeline.for_replay(obs), calls, 1, "cpu", warmup=2)) * 1e3


def ours_update(overrides: list[str], size: int) -> tuple[Any, int, int]:
    """(one update, the batch size, replay bytes per transition) of the reach_pixels agent with `overrides`."""
    cfg = compose_train_config(["experiment=reach_pixels", f"env.pixel_size=[{size},{size}]", *overrides]).agent
    agent = SAC(STATE, ACTIONS, cfg, cameras={k: (size, size, 3) for k in CAMERAS})
    replay = random_replay(agent, size)
    stored = bytes_per_transition(ObservationPipeline(agent).replay_spec(obs_spec(size)), ACTIONS, frames=CAMERAS, episode_steps=EPISODE)
    return (lambda: agent.learn(replay)), cfg.optimiser.batch_size, stored


def sb3_update(size: int, batch: int) -> tuple[Any, float]:
    """(one SB3 gradient step on a replay of random frames, its replay bytes per transition)."""
    import gymnasium as gym
    from stable_baselines3 import SAC as SB3SAC

    from bench.sb3 import SB3_SAC_DEFAULTS

    space = gym.spaces.Dict({
        "state": gym.spaces.Box(-np.inf, np.inf, (STATE,), np.float32),
        **{k.split("/")[1]: gym.spaces.Box(0, 255, (size, size, 3), np.uint8) for k in CAMERAS},
    })

    class Frames(gym.Env):
        observation_space = space
        action_space = gym.spaces.Box(-1.0, 1.0, (ACTIONS,), np.float32)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return space.sample(), {}

        def step(self, action):
            return space.sample(), 0.0, False, False, {}

    kwargs = {**SB3_SAC_DEFAULTS, "buffer_size": 2_000, "batch_size": batch}
    model = SB3SAC("MultiInputPolicy", Frames(), seed=0, device="cpu", verbose=0, **kwargs)
    rng = np.random.default_rng(0)
    stored_space = model.observation_space.spaces  # SB3 stores images channel-first (VecTransposeImage)
    for _ in range(kwargs["buffer_size"]):
        obs = {k: rng.integers(0, 256, (1, *s.shape), dtype=np.uint8) if s.dtype == np.uint8
               else rng.standard_normal((1, *s.shape)).astype(np.float32) for k, s in stored_space.items()}
        model.replay_buffer.add(obs, obs, rng.uniform(-1, 1, (1, ACTIONS)).astype(np.float32), np.zeros(1),
                                np.zeros(1), [{}])
    buf = model.replay_buffer
    stored = sum(a.nbytes for d in (buf.observations, buf.next_observations) for a in d.values())
    stored += buf.actions.nbytes + buf.rewards.nbytes + buf.dones.nbytes + buf.timeouts.nbytes
    model._logger = _silent_logger()
    return (lambda: model.train(gradient_steps=1, batch_size=batch)), stored / buf.buffer_size


def _silent_logger() -> Any:
    from stable_baselines3.common.logger import Logger

    return Logger(folder=None, output_formats=[])


def run(size: int, rounds: int, calls: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        weights = Path(tmp) / "resnet10.pt"
        torch.save(ResNetBackbone("resnet10").state_dict(), weights)
        steps, batch, stored, embed = {}, 0, {}, None
        for name, overrides in VARIANTS.items():
            steps[name], batch, stored[name] = ours_update([o.format(weights=weights) for o in overrides], size)
            if "cached" in name:  # what caching costs instead: the backbone on each env step's frames
                embed = _embedding_cost(overrides, weights, size)
    steps["sb3"], stored["sb3"] = sb3_update(size, batch)
    for fn in steps.values():
        fn()  # first calls: allocation
    times = common.interleaved_times(steps, rounds, calls, warmup=1, digits=0)
    sb3_ms = common.median(times["sb3"]) * 1e3
    rows = []
    for name in VARIANTS:
        ms = common.median(times[name]) * 1e3
        rows.append(common.row(f"pixel update, 2 cameras {size}x{size}, batch {batch}", f"ms, robot_rl {name}", ms,
                               sb3_ms, ratio_value=common.round_ratio(times, name, "sb3"),
                               note=f"{1e3 / ms:.1f} updates/s vs SB3 {1e3 / sb3_ms:.1f}" + (
                                   f"; caching costs {2 * embed:.1f} ms per env step (obs and next obs frames)"
                                   if "cached" in name and embed is not None else "")))
    for name in ("conv 3x16 (reach_pixels)", "pretrained resnet10, cached embeddings"):
        rows.append(common.row(f"replay, 2 cameras {size}x{size}", f"bytes per transition, robot_rl {name}",
                               stored[name], stored["sb3"],
                               note="robot_rl stores a frame (or its features) once, plus each episode's last; SB3 "
                                    "stores obs and next_obs"))
    return {
        "config": {"image": [size, size, 3], "cameras": list(CAMERAS), "state_dim": STATE, "action_dim": ACTIONS,
                   "batch": batch, "rounds": rounds, "calls_per_round": calls,
                   "variants": {n: ["experiment=reach_pixels", *o] for n, o in VARIANTS.items()},
                   "sb3": "SAC('MultiInputPolicy') defaults (NatureCNN per camera), batch as ours, "
                          "model.train(gradient_steps=1)"},
        "ms_per_update": {n: [t * 1e3 for t in ts] for n, ts in times.items()},
        "replay_bytes_per_transition": stored,
        "cache_ms_per_frame_pair": embed,
        "rows": rows,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    return common.timing_main(__doc__.splitlines()[0], "pixel-update-cost",
                              lambda args: run(args.size, args.rounds, args.calls), 48,
                              "frame height and width (the reach_pixels preset's: 48)", "updates timed per variant and round",
                              argv)


if __name__ == "__main__":
    main()
