"""`robot_rl.evaluation.evaluate`: exactly the requested episodes, in rounds when there are more than envs."""

from __future__ import annotations

import pytest
import torch

from robot_rl import envs
from robot_rl.cli import main
from robot_rl.evaluation import evaluate


def _policy(obs: dict[str, torch.Tensor]) -> torch.Tensor:
    return torch.tanh(obs["state"][:, :1])  # deterministic, state-dependent


def test_rounds_of_envs_give_the_one_env_per_episode_result() -> None:
    """5 episodes on 2 envs (rounds seeded seed, seed+2, seed+4) equal 5 episodes on 5 envs: same initial states
    on a backend that seeds sub-env i with seed + i."""
    with envs.make("gym:Pendulum-v1", num_envs=5) as wide, envs.make("gym:Pendulum-v1", num_envs=2) as narrow:
        one_each = evaluate(_policy, wide, seed=7)
        rounds = evaluate(_policy, narrow, seed=7, episodes=5, message=lambda s: None)
    assert rounds == one_each


def test_eval_runs_many_episodes_in_bounded_envs(tmp_path, capsys, monkeypatch) -> None:
    """`eval episodes=N` used to build N envs at once (and print nothing until the end); now at most
    MAX_EVAL_ENVS at a time, with a line per round."""
    run = tmp_path / "run"
    assert main(["train", "env.spec=gym:Pendulum-v1", "train.steps=200", "train.learning_starts=100",
                 "train.eval_every=200", "env.num_eval_envs=1", "train.video=false",
                 "agent.network.hidden_dims=[16,16]",
                 "quiet=true", "threads=1", f"run_dir={run}"]) == 0
    capsys.readouterr()
    made = []
    real_make = envs.make

    def counting_make(spec, num_envs=1, **kw):
        made.append(num_envs)
        return real_make(spec, num_envs=num_envs, **kw)

    monkeypatch.setattr(envs, "make", counting_make)
    monkeypatch.setattr("robot_rl.evaluation.MAX_EVAL_ENVS", 4)
    assert main(["eval", f"run={run}", "episodes=10", "video=false"]) == 0
    out = capsys.readouterr().out
    assert max(made) == 4
    assert "[eval] 4/10 episodes" in out and "[eval] 10/10 episodes" in out and "| 10 episodes |" in out


def test_videos_play_at_the_tasks_rate(tmp_path) -> None:
    """The arm runs at 20 Hz: its video is 20 fps (was a fixed 30, 1.5x too fast); action repeat slows it."""
    import imageio_ffmpeg

    from robot_rl.evaluation import record_video

    for spec, repeat, fps in [("arm:reach", 1, 20.0), ("gym:Pendulum-v1", 2, 10.0)]:
        path = tmp_path / f"{spec.replace(':', '_')}.mp4"
        with envs.make(spec, num_envs=1, action_repeat=repeat, render=True, render_size=(48, 64)) as env:
            assert env.control_dt == pytest.approx(1.0 / fps)
            record_video(lambda o: torch.zeros(1, env.action_dim), env, path, seed=0, max_frames=5)
        assert _video_fps(imageio_ffmpeg, path) == pytest.approx(fps), spec


def _video_fps(imageio_ffmpeg, path, attempts: int = 3) -> float:
    """The fps in the file's header. Tries again when the ffmpeg child's stderr is spoilt (under load, gRPC's fork
    handler has written an epoll error there; robot_rl's own decoding retries the same way)."""
    for attempt in range(attempts):
        try:
            return float(next(imageio_ffmpeg.read_frames(str(path)))["fps"])
        except (OSError, RuntimeError):
            if attempt == attempts - 1:
                raise
    raise AssertionError("unreachable")


def test_a_video_says_it_is_rendering_and_how_far_it_got(tmp_path, monkeypatch) -> None:
    """The final video rendered for over a minute with no output (issue 56, item 9b): a line before, then progress."""
    from robot_rl.evaluation import record_video

    monkeypatch.setattr("robot_rl.evaluation.VIDEO_PROGRESS_S", 0.0)
    lines: list[str] = []
    with envs.make("arm:reach", num_envs=1, render=True, render_size=(32, 32), max_episode_steps=4) as env:
        record_video(lambda o: torch.zeros(1, env.action_dim), env, tmp_path / "v.mp4", seed=0, message=lines.append,
                     what="the final video")
    assert lines[0] == "rendering the final video (up to 4 frames) ..."
    assert "[video] 2/4 frames | 0s" in lines[1:]
