"""Evaluation episodes and evaluation videos."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

Policy = Callable[[dict[str, Tensor]], Tensor]
MAX_EVAL_ENVS = 32  # `robot-rl eval` runs more episodes than this in rounds: memory grows with envs


@torch.no_grad()
def evaluate(
    policy: Policy,
    env,
    seed: int,
    on_done: Callable[[Tensor], None] | None = None,
    episodes: int | None = None,
    message: Callable[[str], None] | None = None,
) -> dict[str, float | None]:
    """Run `episodes` episodes (default: one in each of `env.num_envs` envs); return mean/std return, mean length
    and success rate (None where the task defines no success).

    More episodes than envs run in rounds of `env.num_envs` (memory grows with envs, not with episodes); round r
    resets with `seed + r * num_envs`, so on backends that seed sub-env i with `seed + i` (gym:, mujoco:)
    episode i starts from the same state however many envs run it. The same `seed` gives
    the same initial states every time, so successive evaluations of a run are comparable. `on_done(done_mask)`
    is called after every step, e.g. to reset a chunked policy's queue for envs that ended; `message` gets a line
    per round when there are several.
    """
    n = env.num_envs
    episodes = n if episodes is None else episodes
    parts: list[tuple[Tensor, Tensor, Tensor]] = []
    has_success = False
    for start in range(0, episodes, n):
        returns, lengths, success, round_has_success = _one_round(policy, env, seed + start, on_done)
        has_success |= round_has_success
        keep = min(n, episodes - start)
        parts.append((returns[:keep], lengths[:keep], success[:keep]))
        if message is not None and episodes > n:
            message(f"[eval] {start + keep:,}/{episodes:,} episodes")
    returns, lengths, success = (torch.cat(x) for x in zip(*parts, strict=True))
    return {
        "eval_return_mean": returns.mean().item(),
        "eval_return_std": returns.std(unbiased=False).item(),
        "eval_length_mean": lengths.mean().item(),
        "success_rate": success.float().mean().item() if has_success else None,
    }


def _one_round(
    policy: Policy, env, seed: int, on_done: Callable[[Tensor], None] | None
) -> tuple[Tensor, Tensor, Tensor, bool]:
    """One episode in each env: per-env returns, lengths, success (reached at any step) and whether any step
    reported success."""
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
            success |= info["success"].to(torch.bool) & ~finished
        finished |= newly_done
        if on_done is not None:
            on_done(done)
    return returns, lengths, success, has_success


VIDEO_PROGRESS_S = 10.0  # seconds between progress lines while a video renders


@torch.no_grad()
def record_video(
    policy: Policy, env, path: Path, seed: int, fps: float | None = None, max_frames: int = 2000,
    message: Callable[[str], None] | None = None, what: str = "the video",
) -> dict:
    """Render one episode of `env` (a batch of one made with render=True) to an MP4; return its return/length.

    One frame per agent step, played at the task's rate (`1 / env.control_dt`: 20 fps for the 20 Hz arm, so a
    second of video is a second of the task), or at `fps`; 30 where the env does not know its step time.
    `message` gets a line before rendering starts and one every `VIDEO_PROGRESS_S` seconds: rendering a long
    episode on a busy CPU takes minutes, which without them look like a hung run."""
    import imageio.v2 as imageio

    if fps is None:
        dt = getattr(env, "control_dt", None)
        fps = 1.0 / dt if dt else 30.0
    limit = min(getattr(env, "max_episode_steps", None) or max_frames, max_frames)
    if message is not None:
        message(f"rendering {what} (up to {limit:,} frames) ...")
    t0 = last = time.monotonic()

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
        if message is not None and time.monotonic() - last >= VIDEO_PROGRESS_S:
            last = time.monotonic()
            message(f"[video] {len(frames):,}/{limit:,} frames | {last - t0:.0f}s")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp.mp4")
    try:
        imageio.mimwrite(tmp, np.stack(frames), fps=fps, macro_block_size=1)
    except (OSError, RuntimeError):  # once more: an ffmpeg child can fail for reasons that are not ours
        imageio.mimwrite(tmp, np.stack(frames), fps=fps, macro_block_size=1)
    tmp.replace(path)
    return {"return": episode_return, "length": length, "frames": len(frames)}
