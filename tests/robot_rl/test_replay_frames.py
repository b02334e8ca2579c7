"""Camera frames stored once (`ReplayBuffer(frames=...)`): every transition it returns must be the one a naive
buffer (obs and next_obs frames both stored) returns, across episode ends, n-step windows and wrap-around; the one
documented difference is the next frame of a terminal step (zeros: its value is multiplied by a discount of 0)."""

from __future__ import annotations

import pytest
import torch

import robot_rl.replay as replay
from robot_rl.replay import ReplayBuffer

SPEC = {"state": ((3,), torch.float32), "pixels/front": ((4, 5, 3), torch.uint8), "pixels/wrist": ((4, 5, 3), torch.uint8)}
FRAMES = ("pixels/front", "pixels/wrist")
LIMIT = 6  # the fake envs' time limit


def _frame(g: torch.Generator, n: int) -> dict[str, torch.Tensor]:
    return {"state": torch.randn(n, 3, generator=g),
            **{k: torch.randint(0, 256, (n, 4, 5, 3), generator=g, dtype=torch.uint8) for k in FRAMES}}


def _stream(num_envs: int, seed: int = 0):
    """Steps (obs, action, reward, next_obs, terminated, truncated) of a batched env with autoreset: episodes end
    by termination (random) or truncation (at LIMIT); `next_obs` is the final observation where an episode ended,
    and the next step starts from a fresh reset."""
    g = torch.Generator().manual_seed(seed)
    obs = _frame(g, num_envs)
    age = torch.zeros(num_envs, dtype=torch.long)
    while True:
        action, reward = torch.randn(num_envs, 2, generator=g), torch.randn(num_envs, generator=g)
        nxt = _frame(g, num_envs)
        age += 1
        terminated = torch.rand(num_envs, generator=g) < 0.15
        truncated = age >= LIMIT
        yield obs, action, reward, nxt, terminated, truncated
        done = terminated | truncated
        reset = _frame(g, num_envs)
        obs = {k: torch.where(done.view(-1, *[1] * (v.dim() - 1)), reset[k], v) for k, v in nxt.items()}
        age[done] = 0


def _fill(buffers: list[ReplayBuffer], stream, steps: int) -> None:
    for _ in range(steps):
        step = next(stream)
        for buf in buffers:
            buf.add(*step)


def _newest(buf: ReplayBuffer) -> tuple[torch.Tensor, torch.Tensor]:
    """(row, env) of every stored transition, newest first, so that two buffers' layouts can be compared."""
    ages = torch.arange(buf._size)
    rows = (buf._pos - 1 - ages) % buf.T
    e = torch.arange(buf.num_envs)
    return rows.repeat_interleave(buf.num_envs), e.repeat(buf._size)


def _assert_same_transitions(frames: ReplayBuffer, naive: ReplayBuffer) -> None:
    assert len(frames) == len(naive)
    a, b = frames._gather(*_newest(frames)), naive._gather(*_newest(naive))
    for k in SPEC:
        assert torch.equal(a.obs[k], b.obs[k]), k
    for name in ("action", "reward", "discount"):
        assert torch.equal(getattr(a, name), getattr(b, name)), name
    assert torch.equal(a.next_obs["state"], b.next_obs["state"])
    live = a.discount > 0
    assert (~live).any() and live.any()
    for k in FRAMES:
        assert torch.equal(a.next_obs[k][live], b.next_obs[k][live]), k
        assert not a.next_obs[k][~live].any()  # a terminal step's next frame: zeros


@pytest.mark.parametrize("n_step", [1, 3])
@pytest.mark.parametrize("steps", [5, 23, 61])  # part-filled, wrapped once, wrapped several times
def test_frames_stored_once_match_a_naive_buffer(n_step: int, steps: int) -> None:
    kwargs = dict(capacity=3 * 20, num_envs=3, obs_spec=SPEC, action_dim=2, gamma=0.9, n_step=n_step)
    frames = ReplayBuffer(**kwargs, frames=FRAMES, episode_steps=LIMIT)
    naive = ReplayBuffer(**kwargs)
    assert frames.capacity == naive.capacity == 60 and frames.T == 21 and naive.T == 20
    assert set(frames.next_obs) == {"state"} and set(naive.next_obs) == set(SPEC)
    _fill([frames, naive], _stream(3), steps)
    _assert_same_transitions(frames, naive)
    # sampling stays on stored transitions: never the spare row that holds the newest next frame
    rows, _ = frames.sample_indices(3000, torch.Generator().manual_seed(0))
    stored = set(_newest(frames)[0].tolist())
    assert set(rows.tolist()) == stored
    batch = frames.sample(8, torch.Generator().manual_seed(1))
    assert batch.next_obs["pixels/wrist"].shape == (8, 4, 5, 3) and batch.next_obs["pixels/wrist"].dtype == torch.uint8


def test_checkpoint_round_trip_keeps_every_transition() -> None:
    kwargs = dict(capacity=40, num_envs=2, obs_spec=SPEC, action_dim=2, n_step=2, frames=FRAMES, episode_steps=LIMIT)
    for steps in (7, 45):
        buf, naive = ReplayBuffer(**kwargs), ReplayBuffer(40, 2, SPEC, 2, n_step=2)
        stream = _stream(2, seed=steps)
        _fill([buf, naive], stream, steps)
        loaded = ReplayBuffer(**kwargs)
        loaded.load_state_dict(buf.state_dict())
        _assert_same_transitions(loaded, naive)
        _fill([loaded, naive], stream, 9)  # and it goes on from where it was
        _assert_same_transitions(loaded, naive)
    with pytest.raises(ValueError, match="frames"):
        ReplayBuffer(40, 2, SPEC, 2, n_step=2).load_state_dict(buf.state_dict())


def test_a_broken_stream_keeps_the_last_frame() -> None:
    """A resumed run resets its envs: the step stored last before the checkpoint did not end its episode, and the
    next obs is not its next frame. That frame is kept and the step ends there (truncated, so it bootstraps)."""
    buf, naive = ReplayBuffer(40, 2, SPEC, 2, frames=FRAMES, episode_steps=LIMIT), ReplayBuffer(40, 2, SPEC, 2)
    _fill([buf, naive], _stream(2, seed=1), 8)
    open_ = ~(buf.terminated[buf._pos - 1] | buf.truncated[buf._pos - 1])
    before = naive._gather(*_newest(naive))
    _fill([buf, naive], _stream(2, seed=2), 3)  # a fresh stream, as after a resume
    rows, envs = _newest(buf)
    after = buf._gather(rows[6:8], envs[6:8])  # the transitions stored last before the break, one per env
    for k in FRAMES:
        assert torch.equal(after.next_obs[k][open_], before.next_obs[k][:2][open_])
    assert buf.truncated[rows[6:8], envs[6:8]][open_].all()


def test_a_full_side_ring_is_refused() -> None:
    """More truncations than `episode_steps` allows would overwrite a last frame still in use: refused."""
    buf = ReplayBuffer(40, 1, SPEC, 2, frames=FRAMES, episode_steps=10)  # T = 41 rows, K = 5 side slots
    g = torch.Generator().manual_seed(0)
    yes = torch.ones(1, dtype=torch.bool)
    with pytest.raises(ValueError, match="episode_steps=10 allows"):
        for _ in range(6):
            buf.add(_frame(g, 1), torch.zeros(1, 2), torch.zeros(1), _frame(g, 1), ~yes, yes)
    assert buf._adds == 5
    with pytest.raises(ValueError, match="frames: 'pixels' is not an observation group"):
        ReplayBuffer(40, 1, SPEC, 2, frames=("pixels",))


def test_check_fits_counts_a_frame_once(monkeypatch) -> None:
    """84x84 front and wrist frames at a 50-step time limit: 2 x 21,168 B once, plus one last frame per 50 steps."""
    spec = {"state": ((7,), torch.float32), "pixels/front": ((84, 84, 3), torch.uint8),
            "pixels/wrist": ((84, 84, 3), torch.uint8)}
    frames = ("pixels/front", "pixels/wrist")
    per = replay.bytes_per_transition(spec, 4, frames, episode_steps=50)
    assert per == 2 * 7 * 4 + 2 * 21_168 + -(-2 * 21_168 // 50) + 8 + 16 + 4 + 2  # 43,311 B, naive 84,722 B
    assert replay.bytes_per_transition(spec, 4) == 2 * (7 * 4 + 2 * 21_168) + 16 + 4 + 2
    monkeypatch.setattr(replay, "available_memory", lambda device: 8 * 10**9)
    with pytest.raises(replay.ReplayMemoryError, match="frames of pixels/front, pixels/wrist stored once") as e:
        ReplayBuffer(1_000_000, 1, spec, 4, capacity_key="train.replay_capacity", frames=frames, episode_steps=50)
    assert "train.replay_capacity=140,000 fits" in str(e.value)
