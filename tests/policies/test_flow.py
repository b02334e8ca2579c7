"""Rectified flow: Euler integration of known fields lands exactly; a 1-D toy is learned."""

import pytest
import torch
from robot_rl.policies.flow import TIME_SCALE, FlowPolicy, euler_step, flow_sample
from torch import nn

pytestmark = pytest.mark.usefixtures("one_thread")


def test_euler_step():
    x, v = torch.tensor([1.0, -2.0]), torch.tensor([4.0, 8.0])
    torch.testing.assert_close(euler_step(x, v, 0.25), torch.tensor([2.0, 0.0]))


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 10])
def test_constant_velocity_lands_exactly(k):
    x0 = torch.randn(8, 3, 2, dtype=torch.float64)
    c = torch.tensor([0.5, -1.5], dtype=torch.float64)
    times = []

    def field(x, t):
        times.append(t)
        return c.expand_as(x)

    torch.testing.assert_close(flow_sample(field, x0, k), x0 + c, rtol=0, atol=1e-12)
    assert times == pytest.approx([i / k for i in range(k)])


@pytest.mark.parametrize("k", [1, 3, 10])
def test_straight_path_field_to_a_point_lands_on_it(k):
    # The exact rectified-flow field for data at x1 is (x1 - x_t) / (1 - t): Euler lands on x1 at any K.
    x1 = torch.tensor([0.3, -0.7], dtype=torch.float64)
    x0 = torch.randn(16, 2, dtype=torch.float64)
    out = flow_sample(lambda x, t: (x1 - x) / (1 - t), x0, k)
    torch.testing.assert_close(out, x1.expand_as(out), rtol=0, atol=1e-12)


class ConstantField(nn.Module):
    def __init__(self, c: torch.Tensor) -> None:
        super().__init__()
        self.c, self.t_seen = c, []

    def forward(self, obs, x, t):
        self.t_seen.append(t[0].item() / TIME_SCALE)
        return self.c.expand_as(x)


def test_policy_integrates_its_field_from_the_given_noise():
    policy = FlowPolicy(
        2, 2, horizon=3, hidden=(8,), obs_norm="identity", action_norm="identity", clip_sample=5.0
    )
    policy.net = ConstantField(torch.tensor([0.25, -0.5]))
    noise = torch.randn(4, 3, 2) * 0.1
    chunk = policy.predict_chunk(torch.zeros(4, 2), noise=noise, num_steps=4)
    torch.testing.assert_close(chunk, noise + torch.tensor([0.25, -0.5]))
    assert policy.net.t_seen == pytest.approx([0.0, 0.25, 0.5, 0.75])
    # deterministic: zero noise, so the field alone; and the output is clamped to the action box
    policy.net.c = torch.tensor([3.0, 0.1])
    torch.testing.assert_close(
        policy.predict_chunk(torch.zeros(1, 2), deterministic=True)[0, 0], torch.tensor([1.0, 0.1])
    )


def test_learns_a_conditional_two_mode_toy():
    """obs = +-1 selects the action +-0.5: the unconditional action distribution has two modes."""
    torch.manual_seed(0)
    policy = FlowPolicy(1, 1, horizon=1, hidden=(64, 64), obs_norm="identity", action_norm="identity")
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    losses = []
    for _ in range(500):
        obs = torch.randint(0, 2, (256, 1)).float() * 2 - 1
        loss = policy.loss(obs, 0.5 * obs[:, :, None])
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert sum(losses[-50:]) / 50 < 0.2 * sum(losses[:50]) / 50
    with torch.no_grad():
        obs = torch.tensor([[-1.0], [1.0]]).repeat(500, 1)
        for k in (4, 10):
            samples = policy.predict_chunk(obs, num_steps=k)[:, 0, 0]
            assert (samples - 0.5 * obs[:, 0]).abs().max() < 0.1, k


def train_unconditional_two_modes(shortcut: bool) -> FlowPolicy:
    """The action is -0.5 or +0.5 with equal probability, whatever the observation."""
    torch.manual_seed(0)
    policy = FlowPolicy(1, 1, horizon=1, hidden=(64, 64), obs_norm="identity", action_norm="identity",
                        shortcut=shortcut, shortcut_fraction=0.5, shortcut_levels=4)
    opt = torch.optim.Adam(policy.parameters(), lr=3e-3)
    for _ in range(1500):
        action = (torch.randint(0, 2, (256, 1, 1)).float() - 0.5)
        loss = policy.loss(torch.zeros(256, 1), action)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return policy


def test_shortcut_model_samples_both_modes_in_one_step():
    """One Euler step of a plain flow lands near the data's mean (0 here); a shortcut model's single step
    spreads to both modes as well as the plain flow does with 16 steps."""
    plain, shortcut = train_unconditional_two_modes(False), train_unconditional_two_modes(True)
    obs = torch.zeros(2000, 1)

    def distance_to_modes(policy: FlowPolicy, steps: int) -> tuple[float, float]:
        with torch.no_grad():
            samples = policy.predict_chunk(obs, num_steps=steps)[:, 0, 0]
        return (samples.abs() - 0.5).abs().mean().item(), (samples > 0).float().mean().item()

    plain_one, _ = distance_to_modes(plain, 1)
    plain_many, _ = distance_to_modes(plain, 16)
    shortcut_one, positive = distance_to_modes(shortcut, 1)
    assert plain_one > 0.4  # collapsed to the middle
    assert shortcut_one < 0.65 * plain_one and shortcut_one < plain_many + 0.05
    assert 0.35 < positive < 0.65  # both modes


def test_shortcut_network_sees_the_step_size_and_round_trips(tmp_path):
    from robot_rl.policies.io import load_policy, save_policy

    policy = FlowPolicy(3, 2, horizon=2, hidden=(16,), shortcut=True, num_inference_steps=2)
    x, obs = torch.randn(4, 2, 2), torch.randn(4, 3)
    assert not torch.allclose(policy.velocity(obs, x, 0.5, step=0.5), policy.velocity(obs, x, 0.5, step=0.0))
    plain = FlowPolicy(3, 2, horizon=2, hidden=(16,))
    torch.testing.assert_close(plain.velocity(obs, x, 0.5, step=0.5), plain.velocity(obs, x, 0.5))
    loaded = load_policy(save_policy(policy, tmp_path / "p"))
    assert loaded.shortcut and loaded.shortcut_levels == policy.shortcut_levels
    noise = torch.randn(4, 2, 2)
    torch.testing.assert_close(loaded.predict_chunk(obs, noise=noise), policy.predict_chunk(obs, noise=noise))
    with pytest.raises(ValueError, match="shortcut_fraction"):
        FlowPolicy(3, 2, shortcut=True, shortcut_fraction=1.5)
