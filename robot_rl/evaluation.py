"""Evaluation episodes and evaluation videos."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

Policy = Callable[[dict[str, Tensor]], Tensor]


@torch.no_grad()
def evaluate(
    policy: Policy, env, seed: int, on_done: Callable[[Tensor], None] | None = None
) -> dict[str, float | None]:
    """Run exactly one episode in each of `env.num_envs` environments; return mean/std return and success rate.

    The same `seed` gives the same initial states every time, so successive evaluations of a run are comparable.
    `on_done(done_mask)` is called after every step, e.g. to reset a chunked policy's queue for envs that ended.
    """
    obs = env.reset(seed=seed)
    n = env.num_envs
    finished = torch.zeros(n, dtype=torch.bool, device=env.device)
    returns = torch.zeros(n, device=env.device)
    lengths = torch.zeros(n, device=env.device)
    success = torch.zeros(n, dtype=torch.bool, device=env.device)
    has_success = False
    while not bool(finished.all()):
        obs, _, terminated, truncated, info = env.step(policy(obs))
        done = terminated | truncated
        newly_done = done & ~finished
        returns = torch.where(newly_done, info["episode_return"], returns)
        lengths = torch.where(newly_done, info["episode_length"], lengths)
        if "success" in info:
            has_success = True
            # success counts if reached at any step of the episode
            success |= info["success"].to(torch.bool) & ~finished
        finished |= newly_done
        if on_done is not None:
            on_done(done)
    return {
        "eval_return_mean": returns.mean().item(),
        "eval_return_std": returns.std(unbiased=False).item(),
        "eval_length_mean": lengths.mean().item(),
        "success_rate": success.float().mean().item() if has_success else None,
    }


@torch.no_grad()
def record_video(policy: Policy, env, path: Path, seed: int, fps: int = 30, max_frames: int = 2000) -> dict:
    """Render one episode of `env` (a batch of one made with render=True) to an MP4; return its return/length."""
    import imageio.v2 as imageio

    obs = env.reset(seed=seed)
    frames = [env.render()]
    episode_return, length = 0.0, 0
    while length < max_frames:
        obs, reward, terminated, truncated, _ = env.step(policy(obs))
        episode_return += float(reward[0])
        length += 1
        if bool(terminated[0] | truncated[0]):
            break
        frames.append(env.render())
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.mp4")
    try:
        imageio.mimwrite(tmp, np.stack(frames), fps=fps, macro_block_size=1)
    except (OSError, RuntimeError):  # once more: an ffmpeg child can fail for reasons that are not ours
        imageio.mimwrite(tmp, np.stack(frames), fps=fps, macro_block_size=1)
    tmp.replace(path)
    return {"return": episode_return, "length": length, "frames": len(frames)}
