"""Replay buffer tests: n-step windows checked against a plain Python-loop reference, checkpoints, Batch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch

from robot_rl.logger import Episodes, MetricMean
from robot_rl.replay import Batch, ReplayBuffer, prior_fraction_ok, sample_mixed

SPEC = {"state": ((4,), torch.float32)}


@dataclass
class Step:
    obs: torch.Tensor  # [E, 4]
    action: torch.Tensor  # [E, A]
    reward: torch.Tensor  # [E]
    next_obs: torch.Tensor  # [E, 4]
    terminated: torch.Tensor  # [E] bool
    truncated: torch.Tensor  # [E] bool


def _random_step(g: torch.Generator, num_envs: int, action_dim: int, p_end: float) -> Step:
    return Step(
        obs=torch.randn(num_envs, 4, generator=g),
        action=torch.randn(num_envs, action_dim, generator=g),
        reward=torch.randn(num_envs, generator=g),
        next_obs=torch.randn(num_envs, 4, generator=g),
        terminated=torch.rand(num_envs, generator=g) < p_end,
        truncated=torch.rand(num_envs, generator=g) < p_end,
    )


def _add(buf: ReplayBuffer, s: Step) -> None:
    buf.add({"state": s.obs}, s.action, s.reward, {"state": s.next_obs}, s.terminated, s.truncated)


def _reference(
    steps: list[Step], s: int, e: int, n: int, gamma: float
) -> tuple[float, torch.Tensor, float, str]:
    """The n-step definition written out: returns (reward, next_obs, discount, why the window stopped)."""
    ret, k, why = 0.0, s, "n"
    for j in range(n):
        u = s + j
        if u >= len(steps):
            why = "head"
            break
        ret += gamma**j * float(steps[u].reward[e])
        k = u
        if bool(steps[u].terminated[e]):
            why = "terminated"
            break
        if bool(steps[u].truncated[e]):
            why = "truncated"
            break
    disc = gamma ** (k - s + 1) * (0.0 if bool(steps[k].terminated[e]) else 1.0)
    return ret, steps[k].next_obs[e], disc, why


@pytest.mark.parametrize("n_step", [1, 3, 5])
@pytest.mark.parametrize("num_steps", [5, 30])  # not yet full / wrapped past capacity (T = 8)
def test_matches_reference(n_step: int, num_steps: int) -> None:
    num_envs, action_dim, gamma = 3, 2, 0.9
    buf = ReplayBuffer(8 * num_envs + 2, num_envs, SPEC, action_dim, gamma=gamma, n_step=n_step)
    assert buf.T == 8 and buf.capacity == 24
    g = torch.Generator().manual_seed(1234 + n_step)
    steps: list[Step] = []
    row_to_step = [-1] * buf.T  # which global step each physical row currently holds
    for i in range(num_steps):
        s = _random_step(g, num_envs, action_dim, p_end=0.15)
        # Pin a few flags so every way of ending a window is exercised whatever the random draw:
        # env 0 terminates and env 1 truncates at step N-4 (clean step N-5 before it), env 2 has a clean
        # stretch long enough for a full 5-step window, then terminates and truncates at once on the last step.
        back = num_steps - i
        if back in (4, 5):
            s.terminated[:2] = False
            s.truncated[:2] = False
            if back == 4:
                s.terminated[0] = True
                s.truncated[1] = True
        if back <= 8:
            s.terminated[2] = s.truncated[2] = back == 1
        _add(buf, s)
        steps.append(s)
        row_to_step[i % buf.T] = i
    assert len(buf) == min(num_steps, buf.T) * num_envs

    # Every stored transition, exhaustively.
    rows = [r for r in range(buf.T) if row_to_step[r] >= 0]
    t_idx = torch.tensor(rows).repeat_interleave(num_envs)
    e_idx = torch.arange(num_envs).repeat(len(rows))
    batch = buf._gather(t_idx, e_idx)

    seen: set[str] = set()
    for i in range(len(t_idx)):
        t, e = int(t_idx[i]), int(e_idx[i])
        s = row_to_step[t]
        ret, nobs, disc, why = _reference(steps, s, e, n_step, gamma)
        seen.add(why)
        torch.testing.assert_close(batch.obs["state"][i], steps[s].obs[e])
        torch.testing.assert_close(batch.action[i], steps[s].action[e])
        torch.testing.assert_close(batch.next_obs["state"][i], nobs)
        assert batch.reward[i].item() == pytest.approx(ret, abs=1e-5)
        assert batch.discount[i].item() == pytest.approx(disc, abs=1e-6)
    if n_step > 1:
        # The seeded data must exercise every way a window can stop.
        assert {"terminated", "truncated", "head"} <= seen, seen
        if num_steps > buf.T:
            assert "n" in seen

    assert batch.reward.dtype == batch.discount.dtype == batch.action.dtype == torch.float32
    assert batch.reward.shape == batch.discount.shape == (len(t_idx),)


def test_hand_computed_windows() -> None:
    gamma = 0.5
    buf = ReplayBuffer(10, 1, {"x": ((1,), torch.float32)}, 1, gamma=gamma, n_step=3)

    def add(i: int, term: bool = False, trunc: bool = False) -> None:
        buf.add(
            {"x": torch.tensor([[float(i)]])},
            torch.zeros(1, 1),
            torch.tensor([i + 1.0]),
            {"x": torch.tensor([[100.0 + i]])},
            torch.tensor([term]),
            torch.tensor([trunc]),
        )

    add(0)
    add(1, term=True)
    add(2)
    add(3, trunc=True)
    add(4)

    def check(t: int, reward: float, next_x: float, discount: float) -> None:
        b = buf._gather(torch.tensor([t]), torch.tensor([0]))
        assert b.obs["x"].item() == t
        assert b.reward.item() == pytest.approx(reward)
        assert b.next_obs["x"].item() == next_x
        assert b.discount.item() == pytest.approx(discount)

    check(0, 1 + 0.5 * 2, 101, 0.0)  # hits a terminated step: no bootstrap
    check(1, 2, 101, 0.0)
    check(2, 3 + 0.5 * 4, 103, 0.25)  # hits a truncated step: bootstrap from its final obs
    check(4, 5, 104, 0.5)  # cut at the newest step
    add(5)
    add(6)
    check(4, 5 + 0.5 * 6 + 0.25 * 7, 106, 0.125)  # the same window once it is complete


def test_wrap_never_reads_across_write_head() -> None:
    gamma = 0.5
    buf = ReplayBuffer(4, 1, {"x": ((1,), torch.float32)}, 1, gamma=gamma, n_step=3)
    for i in range(6):  # rows now hold steps [4, 5, 2, 3]; write head at row 2
        buf.add(
            {"x": torch.tensor([[float(i)]])},
            torch.zeros(1, 1),
            torch.tensor([i + 1.0]),
            {"x": torch.tensor([[100.0 + i]])},
            torch.tensor([False]),
            torch.tensor([False]),
        )
    assert len(buf) == 4 and buf.full
    b = buf._gather(torch.tensor([0, 1, 2, 3]), torch.zeros(4, dtype=torch.long))
    assert b.obs["x"].flatten().tolist() == [4, 5, 2, 3]
    torch.testing.assert_close(
        b.reward, torch.tensor([5 + 0.5 * 6, 6, 3 + 0.5 * 4 + 0.25 * 5, 4 + 0.5 * 5 + 0.25 * 6])
    )
    assert b.next_obs["x"].flatten().tolist() == [105, 105, 104, 105]
    torch.testing.assert_close(b.discount, torch.tensor([0.25, 0.5, 0.125, 0.125]))


def _filled(num_steps: int, n_step: int = 3, seed: int = 0) -> ReplayBuffer:
    buf = ReplayBuffer(20, 2, SPEC, 2, gamma=0.95, n_step=n_step)
    g = torch.Generator().manual_seed(seed)
    for _ in range(num_steps):
        _add(buf, _random_step(g, 2, 2, p_end=0.2))
    return buf


def _assert_batches_equal(a: Batch, b: Batch) -> None:
    for k in a.obs:
        assert torch.equal(a.obs[k], b.obs[k]) and torch.equal(a.next_obs[k], b.next_obs[k])
    for f in ("action", "reward", "discount"):
        assert torch.equal(getattr(a, f), getattr(b, f)), f


@pytest.mark.parametrize("num_steps", [4, 23])  # partial / wrapped (T = 10)
def test_state_dict_round_trip(tmp_path, num_steps: int) -> None:
    src = _filled(num_steps)
    state = src.state_dict()
    assert state["action"].shape[0] == min(num_steps, src.T)  # only the filled part is saved
    path = tmp_path / "replay.pt"
    torch.save(state, path)
    loaded_state = torch.load(path)  # default weights_only loading must be enough

    for st in (state, loaded_state):
        dst = ReplayBuffer(20, 2, SPEC, 2, gamma=0.95, n_step=3)
        dst.load_state_dict(st)
        assert len(dst) == len(src)
        _assert_batches_equal(
            src.sample(64, torch.Generator().manual_seed(7)), dst.sample(64, torch.Generator().manual_seed(7))
        )

    # The write position is restored too: identical further adds keep the buffers identical.
    g1, g2 = torch.Generator().manual_seed(99), torch.Generator().manual_seed(99)
    for _ in range(5):
        _add(src, _random_step(g1, 2, 2, 0.2))
        _add(dst, _random_step(g2, 2, 2, 0.2))
    _assert_batches_equal(
        src.sample(64, torch.Generator().manual_seed(3)), dst.sample(64, torch.Generator().manual_seed(3))
    )
    # The checkpoint does not alias live storage.
    assert torch.equal(state["reward"], loaded_state["reward"])


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"obs_spec": {"state": ((5,), torch.float32)}}, "obs_spec"),
        ({"obs_spec": {"state": ((4,), torch.float64)}}, "obs_spec"),
        ({"obs_spec": {"other": ((4,), torch.float32)}}, "obs_spec"),
        ({"action_dim": 3}, "action_dim"),
        ({"num_envs": 4}, "num_envs"),
        ({"n_step": 1}, "n_step"),
        ({"capacity": 40}, "capacity"),
    ],
)
def test_load_mismatch_raises(kwargs: dict, name: str) -> None:
    state = _filled(7).state_dict()
    cfg = {
        "capacity": 20,
        "num_envs": 2,
        "obs_spec": SPEC,
        "action_dim": 2,
        "gamma": 0.95,
        "n_step": 3,
    } | kwargs
    with pytest.raises(ValueError, match=name):
        ReplayBuffer(**cfg).load_state_dict(state)


def test_batch_reshape_and_to() -> None:
    buf = _filled(8)
    b = buf.sample(12, torch.Generator().manual_seed(0))
    r = b.reshape(3, 4)
    assert r.obs["state"].shape == (3, 4, 4) and r.next_obs["state"].shape == (3, 4, 4)
    assert r.action.shape == (3, 4, 2) and r.reward.shape == (3, 4) and r.discount.shape == (3, 4)
    assert r.action.data_ptr() == b.action.data_ptr()  # a view, not a copy
    torch.testing.assert_close(r.reward[1], b.reward[4:8])
    assert b.reshape((3, 4)).action.shape == (3, 4, 2)
    _assert_batches_equal(b.to("cpu"), b)
    cat = Batch.cat([b, b])
    assert cat.action.shape == (24, 2) and torch.equal(cat.reward[12:], b.reward)


def test_multi_group_obs_keep_dtypes() -> None:
    spec = {"state": ((5,), torch.float32), "pixels": ((3, 8, 8), torch.uint8)}
    buf = ReplayBuffer(16, 2, spec, 3, n_step=2)
    g = torch.Generator().manual_seed(0)
    pix = []
    for _ in range(5):
        obs = {
            "state": torch.randn(2, 5, generator=g),
            "pixels": torch.randint(0, 256, (2, 3, 8, 8), generator=g, dtype=torch.uint8),
        }
        nxt = {
            "state": torch.randn(2, 5, generator=g),
            "pixels": torch.randint(0, 256, (2, 3, 8, 8), generator=g, dtype=torch.uint8),
        }
        pix.append(obs["pixels"])
        buf.add(
            obs,
            torch.randn(2, 3, generator=g),
            torch.randn(2, generator=g),
            nxt,
            torch.zeros(2, dtype=torch.bool),
            torch.zeros(2, dtype=torch.bool),
        )
    b = buf.sample(10)
    for group in (b.obs, b.next_obs):
        assert group["state"].dtype == torch.float32 and group["state"].shape == (10, 5)
        assert group["pixels"].dtype == torch.uint8 and group["pixels"].shape == (10, 3, 8, 8)
    one = buf._gather(torch.tensor([3]), torch.tensor([1]))
    assert torch.equal(one.obs["pixels"][0], pix[3][1])


def test_sample_indices_uniform_over_filled_rows() -> None:
    buf = _filled(4)  # T = 10, 4 rows filled
    t, e = buf.sample_indices(4000, torch.Generator().manual_seed(0))
    assert int(t.max()) == 3 and int(t.min()) == 0 and set(e.tolist()) == {0, 1}
    counts = torch.bincount(t * 2 + e, minlength=8).float()
    assert (counts / 4000 - 1 / 8).abs().max() < 0.03
    with pytest.raises(ValueError):
        ReplayBuffer(10, 1, SPEC, 2).sample(4)


def test_input_validation() -> None:
    with pytest.raises(ValueError, match="capacity"):
        ReplayBuffer(3, 4, SPEC, 2)
    buf = ReplayBuffer(10, 2, SPEC, 2)
    obs = {"state": torch.zeros(2, 4)}
    with pytest.raises(ValueError, match="action"):
        buf.add(obs, torch.zeros(2), torch.zeros(2), obs, torch.zeros(2), torch.zeros(2))
    with pytest.raises(ValueError, match="obs"):
        buf.add(
            {"state": torch.zeros(4)}, torch.zeros(2, 2), torch.zeros(2), obs, torch.zeros(2), torch.zeros(2)
        )
    # [E, 1] rewards and float flags (common in vector envs) are accepted.
    buf.add(obs, torch.zeros(2, 2), torch.ones(2, 1), obs, torch.tensor([1.0, 0.0]), torch.zeros(2, 1))
    assert buf.terminated[0].tolist() == [True, False] and buf.reward[0].tolist() == [1.0, 1.0]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_buffer_from_cpu_inputs() -> None:
    buf = ReplayBuffer(20, 2, SPEC, 2, device="cuda", n_step=3)
    g = torch.Generator().manual_seed(0)
    for _ in range(13):
        _add(buf, _random_step(g, 2, 2, 0.2))
    b = buf.sample(32, torch.Generator().manual_seed(1))  # CPU generator, CUDA storage
    assert b.action.device.type == "cuda"
    cpu = ReplayBuffer(20, 2, SPEC, 2, n_step=3)
    cpu.load_state_dict(buf.state_dict())
    ref = cpu.sample(32, torch.Generator().manual_seed(1))
    torch.testing.assert_close(b.to("cpu").reward, ref.reward)
    torch.testing.assert_close(b.to("cpu").discount, ref.discount)


def _constant_buffer(value: float, rows: int = 10) -> ReplayBuffer:
    buffer = ReplayBuffer(rows, 1, {"state": ((1,), torch.float32)}, 1, gamma=0.9, n_step=1)
    full = torch.full((rows, 1), value)
    buffer.extend({"state": full}, full, full[:, 0], {"state": full}, torch.zeros(rows, dtype=torch.bool),
                  torch.zeros(rows, dtype=torch.bool))
    return buffer


def test_sample_mixed_puts_the_prior_share_first_in_every_minibatch() -> None:
    online, prior = _constant_buffer(0.0), _constant_buffer(1.0)
    batch = sample_mixed(online, prior, batch_size=8, utd=3, prior_fraction=0.25)
    assert batch.action.shape == (3, 8, 1)
    assert (batch.action[:, :2] == 1).all() and (batch.action[:, 2:] == 0).all()
    assert (sample_mixed(online, prior, 8, 2, 0.0).action == 0).all()  # 0: online only
    assert (sample_mixed(online, None, 8, 2, 0.5).action == 0).all()
    empty = ReplayBuffer(4, 1, {"state": ((1,), torch.float32)}, 1)
    assert (sample_mixed(online, empty, 8, 2, 0.5).action == 0).all()
    assert (sample_mixed(online, prior, 1, 2, 0.5).action == 1).all()  # at least one prior row: none online
    assert sample_mixed(online, prior, 1, 2, 0.5).action.shape == (2, 1, 1)
    assert prior_fraction_ok(0.0) and prior_fraction_ok(0.5) and not prior_fraction_ok(1.0)
    assert not prior_fraction_ok(-0.1)


def test_metric_mean_sums_then_divides_once() -> None:
    m = MetricMean()
    m.add({"loss": [torch.tensor(1.0), torch.tensor(2.0)], "q": torch.tensor(3.0),
           "episode_return": Episodes(torch.tensor([5.0, 7.0, 9.0]), torch.tensor([True, False, True]))})
    m.add({"loss": [torch.tensor(6.0)], "episode_return": Episodes(torch.zeros(3), torch.zeros(3, dtype=torch.bool))})
    assert m.means() == {"loss": 3.0, "q": 3.0, "episode_return": 7.0}
    m.reset()
    m.add({"success": torch.tensor([]), "kl": 0.5})  # no finished episode: no mean; floats work too
    assert m.means() == {"kl": 0.5}
    host = MetricMean(on_host=True)
    host.add({"x": torch.tensor(0.1)})
    host.add({"x": torch.tensor(0.2)})
    assert host.means()["x"] == float(torch.tensor(0.1) + torch.tensor(0.2)) / 2
    device = MetricMean()
    device.add({"x": torch.tensor(0.1)})
    device.add({"x": torch.tensor(0.2)})
    assert device.means()["x"] == ((torch.tensor(0.1) + torch.tensor(0.2)) / 2).item()


def test_a_buffer_that_does_not_fit_in_memory_stops_before_allocating(monkeypatch) -> None:
    """`robot-rl train env.spec=arm:reach-pixels` was killed by the kernel's OOM killer with no message (1M x 84x84
    frames for obs and next_obs: 42 GB). Now the size is checked first: one line with what is needed, the key and a
    value that fits."""
    import robot_rl.replay as replay

    monkeypatch.setattr(replay, "available_memory", lambda device: 8 * 10**9)
    spec = {"state": ((29,), torch.float32), "pixels": ((84, 84, 3), torch.uint8)}
    with pytest.raises(replay.ReplayMemoryError) as e:
        ReplayBuffer(1_000_000, 1, spec, 4, capacity_key="train.replay_capacity")
    message = str(e.value)
    assert "train.replay_capacity=1,000,000 needs 42.6 GB of cpu memory" in message
    assert "pixels 21,168 B" in message and "8.0 GB is available; train.replay_capacity=150,000 fits" in message
    ReplayBuffer(150_000, 1, spec, 4)  # the suggested size is accepted
    assert replay.bytes_per_transition(spec, 4) == 2 * (29 * 4 + 84 * 84 * 3) + 16 + 4 + 2


def test_train_stores_only_the_groups_the_agent_reads(tmp_path) -> None:
    """A pixel task's replay keeps what the pixel agent reads: `state` and the cameras, frames once."""
    from robot_rl.config import compose_train_config
    from robot_rl.trainer import Trainer

    cfg = compose_train_config(["env.spec=arm:reach-pixels", "train.replay_capacity=1000", "env.num_eval_envs=0",
                                "train.video=false", "quiet=true", "threads=1"])
    trainer = Trainer(cfg, tmp_path / "run")
    assert set(trainer.replay.obs) == {"state", "pixels/front", "pixels/wrist"}
    assert set(trainer.replay.next_obs) == {"state"} and trainer.replay.episode_steps == 50
    trainer.method.start(0)
    trainer.method.advance()
    assert len(trainer.replay) == 1
