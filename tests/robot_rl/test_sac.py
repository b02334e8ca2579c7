import copy

import pytest
import torch

from robot_rl.agents.sac import (
    SAC,
    CriticConfig,
    ExplorationConfig,
    NetworkConfig,
    OptimiserConfig,
    SACConfig,
)
from robot_rl.replay import Batch


def _batch(n: int, obs_dim: int = 4, act_dim: int = 2, seed: int = 0) -> Batch:
    g = torch.Generator().manual_seed(seed)
    return Batch(
        obs={"state": torch.randn(n, obs_dim, generator=g)},
        action=torch.rand(n, act_dim, generator=g) * 2 - 1,
        reward=torch.randn(n, generator=g),
        next_obs={"state": torch.randn(n, obs_dim, generator=g)},
        discount=torch.full((n,), 0.99),
    )


def _critic_loss(agent: SAC, b: Batch) -> float:
    with torch.no_grad():
        next_action, next_log_prob = agent.actor(b.next_obs["state"])
        next_v = agent.critic_target(b.next_obs["state"], next_action).min(0).values
        next_v = next_v - agent.log_alpha.exp() * next_log_prob
        target = b.reward + b.discount * next_v
        return ((agent.critic(b.obs["state"], b.action) - target) ** 2).mean().item()


@pytest.mark.parametrize("num_critics", [1, 2, 10])
def test_update_lowers_critic_loss_on_fixed_batch(num_critics):
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[64, 64]),
                                critic=CriticConfig(num=num_critics, num_target=min(2, num_critics)),
                                optimiser=OptimiserConfig(utd=4)))
    b = _batch(256)
    before = _critic_loss(agent, b)
    for _ in range(50):
        metrics = agent.update(Batch.cat([b] * 4).reshape(4, 256))
    after = _critic_loss(agent, b)
    assert after < 0.5 * before, (before, after)
    assert set(metrics) >= {"critic_loss", "actor_loss", "temperature", "entropy", "q_mean"}
    assert all(isinstance(v, torch.Tensor) and v.dim() == 0 for v in metrics.values())


def test_utd_runs_that_many_critic_updates_and_one_actor_update():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), optimiser=OptimiserConfig(utd=3)))
    steps = {"critic": 0, "actor": 0}
    agent.critic_opt.register_step_post_hook(lambda *_: steps.__setitem__("critic", steps["critic"] + 1))
    agent.actor_opt.register_step_post_hook(lambda *_: steps.__setitem__("actor", steps["actor"] + 1))
    agent.update(_batch(3 * 32).reshape(3, 32))
    assert steps == {"critic": 3, "actor": 1}


def test_actor_each_update_interleaves_actor_and_temperature_steps_with_the_critic_steps():
    """SimbaV2's schedule: critic, actor, critic, actor..., each actor step on its critic step's minibatch."""
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]),
                                optimiser=OptimiserConfig(utd=3, actor_each_update=True)))
    order: list[str] = []
    agent.critic_opt.register_step_post_hook(lambda *_: order.append("critic"))
    agent.actor_opt.register_step_post_hook(lambda *_: order.append("actor"))
    agent.alpha_opt.register_step_post_hook(lambda *_: order.append("temperature"))
    seen: list[torch.Tensor] = []
    inner = agent._update_actor_and_temperature
    agent._update_actor_and_temperature = lambda obs, bc=None: (seen.append(obs.clone()), inner(obs, bc))[1]
    batch = _batch(3 * 32).reshape(3, 32)
    agent.update(batch)
    assert order == ["critic", "actor", "temperature"] * 3
    assert all(torch.equal(obs, batch.obs["state"][i]) for i, obs in enumerate(seen))
    agent.update(batch, actor=False)  # the critic warm-up of fine-tuning still moves the critics only
    assert order[9:] == ["critic"] * 3


def test_terminal_discount_zero_removes_bootstrap():
    """With discount 0 the TD target is the reward alone: the critic regresses onto it exactly."""
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[64, 64]),
                                optimiser=OptimiserConfig(critic_lr=3e-3)))
    b = _batch(64)
    b.discount.zero_()
    for _ in range(300):
        agent._update_critic(b)
    q = agent.critic(b.obs["state"], b.action)
    assert (q - b.reward).abs().mean() < 0.1


def test_target_critics_track_critics_with_polyak():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), critic=CriticConfig(tau=0.5)))
    old_target = copy.deepcopy(agent.critic_target.state_dict())
    agent._update_critic(_batch(32))
    for name, p in agent.critic.state_dict().items():
        expected = 0.5 * old_target[name] + 0.5 * p
        torch.testing.assert_close(agent.critic_target.state_dict()[name], expected)


def test_temperature_moves_toward_target_entropy():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]),
                                optimiser=OptimiserConfig(temperature_lr=1e-2),
                                exploration=ExplorationConfig(target_entropy_scale=10.0)))
    # target entropy -20 is far below the initial policy's entropy: alpha must shrink
    alpha0 = agent.log_alpha.exp().item()
    for _ in range(20):
        agent.update(_batch(32).reshape(1, 32))
    assert agent.log_alpha.exp().item() < alpha0


def test_state_dict_round_trip_restores_behaviour():
    torch.manual_seed(0)
    a = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), critic=CriticConfig(num=3)))
    for _ in range(3):
        a.update(_batch(32).reshape(1, 32))
    b = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), critic=CriticConfig(num=3)))
    b.load_state_dict(a.state_dict())
    obs = {"state": torch.randn(5, 4)}
    torch.testing.assert_close(a.act(obs, deterministic=True), b.act(obs, deterministic=True))
    torch.manual_seed(1)
    ma = a.update(_batch(32, seed=3).reshape(1, 32))
    torch.manual_seed(1)
    mb = b.update(_batch(32, seed=3).reshape(1, 32))
    torch.testing.assert_close(ma["critic_loss"], mb["critic_loss"])


def test_loaded_optimiser_state_takes_this_configs_learning_rates():
    """offline.init loads a pretrained agent with its optimisers: the fine-tuning run's agent.optimiser.actor_lr (etc.) must
    still apply (they were silently the pretraining's; measured: a WSRL run with actor_lr=1e-4 identical to 3e-4)."""
    a = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16])))
    a.update(_batch(32).reshape(1, 32))
    b = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]),
                            optimiser=OptimiserConfig(actor_lr=1e-4, critic_lr=2e-4, temperature_lr=5e-5, critic_weight_decay=0.01)))
    b.load_state_dict(a.state_dict())
    assert [g["lr"] for g in b.actor_opt.param_groups] == [1e-4]
    assert [(g["lr"], g["weight_decay"]) for g in b.critic_opt.param_groups] == [(2e-4, 0.01)]
    assert [g["lr"] for g in b.alpha_opt.param_groups] == [5e-5]
    assert b.actor_opt.state_dict()["state"]  # the moments themselves did carry over


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"critic": {"num": 0}}, "^agent.critic.num must be between 1 and 20$"),
        ({"critic": {"num_target": 5, "num": 2}}, "^agent.critic.num_target must be"),
        ({"optimiser": {"utd": 0}}, "^agent.optimiser.utd must be >= 1$"),
        ({"critic": {"gamma": 1.5}}, "^agent.critic.gamma must be"),
        ({"optimiser": {"bc_weight": -1.0}}, "^agent.optimiser.bc_weight must be"),
    ],
)
def test_bad_config_names_the_field_by_its_full_dotted_key(bad, message):
    with pytest.raises(ValueError, match=message):
        SAC(4, 2, SACConfig.from_dict(bad))


def test_bf16_autocast_update_learns_and_keeps_fp32_weights():
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[64, 64]), optimiser=OptimiserConfig(bf16=True)))
    b = _batch(256)
    before = _critic_loss(agent, b)
    for _ in range(50):
        metrics = agent.update(b.reshape(1, 256))
    assert _critic_loss(agent, b) < 0.5 * before
    assert all(p.dtype == torch.float32 for p in agent.critic.parameters())
    assert metrics["critic_loss"].dtype == torch.float32


@pytest.mark.slow
def test_compiled_update_matches_eager(monkeypatch):
    """Same seed, same batches: the compiled losses give the eager losses (up to float reassociation)."""
    import torch._inductor.config as inductor_config

    # Inductor draws random numbers its own way; make it use eager's generator so the two runs see the same noise.
    monkeypatch.setattr(inductor_config, "fallback_random", True)
    torch._dynamo.reset()
    results = []
    for compile_ in (False, True):
        torch.manual_seed(0)
        agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[32, 32]),
                                    critic=CriticConfig(num=4),
                                    optimiser=OptimiserConfig(compile=compile_)))
        losses = []
        for i in range(5):
            torch.manual_seed(100 + i)
            losses.append(agent.update(_batch(64, seed=i).reshape(1, 64))["critic_loss"])
        results.append(torch.stack(losses))
    torch.testing.assert_close(results[0], results[1], rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA (CUDA graphs)")
def test_cuda_graph_update_outputs_survive_the_next_replay():
    """CUDA-graph replay reuses output memory: metrics returned by one update must not change after the next."""
    torch.manual_seed(0)
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[32, 32]),
                                optimiser=OptimiserConfig(compile=True)), device="cuda")
    first = None
    for i in range(4):
        m = agent.update(_batch(64, seed=i).to("cuda").reshape(1, 64))
        if i == 2:
            first = {k: v.clone() for k, v in m.items()}
            kept = m
    for k in first:
        torch.testing.assert_close(kept[k], first[k])


# -- the sample-efficient options (agent=simba) ---------------------------------------------------------------
from robot_rl.agents.sac import ReturnScale, categorical_projection  # noqa: E402

SIMBA = {"network": {"kind": "hyper", "critic_width": 32, "actor_width": 16, "obs_norm": True},
         "critic": {"num_atoms": 21, "reward_scale": True},
         "exploration": {"init_temperature": 0.01, "target_entropy_scale": 0.5}}


def _simba(**changes: dict) -> SACConfig:
    """SIMBA with some keys of its groups changed (`critic={"num": 1}`)."""
    return SACConfig.from_dict({g: SIMBA.get(g, {}) | changes.get(g, {}) for g in SIMBA.keys() | changes.keys()})


def _projection_reference(atoms, probs, support):
    """C51's projection written as a plain loop over every mass, the textbook way."""
    k, v_min, v_max = len(support), support[0].item(), support[-1].item()
    dz = (v_max - v_min) / (k - 1)
    out = torch.zeros(atoms.shape[0], k, dtype=torch.float64)
    for b in range(atoms.shape[0]):
        for j in range(atoms.shape[1]):
            z = min(max(atoms[b, j].item(), v_min), v_max)
            pos = (z - v_min) / dz
            lo = int(pos // 1)
            hi = min(lo + 1, k - 1)
            frac = pos - lo
            p = probs[b, j].item()
            if lo == hi or frac == 0.0:
                out[b, lo] += p
            else:
                out[b, lo] += p * (1 - frac)
                out[b, hi] += p * frac
    return out


def test_categorical_projection_matches_a_plain_reference_loop():
    torch.manual_seed(0)
    support = torch.linspace(-5, 5, 11)
    reward = torch.randn(16) * 2
    discount = torch.tensor([0.99] * 12 + [0.0] * 4)  # four terminal transitions: all mass on the reward
    atoms = reward[:, None] + discount[:, None] * (support[None] + 0.3)
    atoms[0] = support  # exactly on the atoms
    atoms[1] = support * 3  # far outside the support on both sides: clamped to the end atoms
    probs = torch.softmax(torch.randn(16, 11), -1)
    got = categorical_projection(atoms, probs, support)
    torch.testing.assert_close(got.double(), _projection_reference(atoms, probs, support), atol=1e-6, rtol=0)
    torch.testing.assert_close(got.sum(-1), torch.ones(16))  # mass is conserved
    torch.testing.assert_close(got[0], probs[0])
    # the projected distribution's mean is the clamped target mean wherever nothing was clamped
    inside = (atoms.abs() <= 5).all(-1)
    torch.testing.assert_close((got * support).sum(-1)[inside], (probs * atoms).sum(-1)[inside], atol=1e-5, rtol=0)


def test_two_hot_of_a_scalar_target_has_that_mean():
    support = torch.linspace(-2, 2, 9)
    target = torch.tensor([[-1.3], [0.0], [1.99], [7.0]])
    dist = categorical_projection(target, None, support)
    torch.testing.assert_close((dist * support).sum(-1), torch.tensor([-1.3, 0.0, 1.99, 2.0]))


def test_categorical_critic_learns_the_reward_of_terminal_transitions():
    """discount 0: every critic's expected value converges on the (scaled) reward."""
    torch.manual_seed(0)
    agent = SAC(4, 2, _simba(critic={"reward_scale": False}, optimiser={"critic_lr": 3e-3}))
    b = _batch(64)
    b.discount.zero_()
    b.reward.clamp_(-2, 2)
    before = (agent.critic(b.obs["state"], b.action) - b.reward).abs().mean().item()
    for _ in range(300):
        agent._update_critic(b)
    after = (agent.critic(b.obs["state"], b.action) - b.reward).abs().mean().item()
    assert after < 0.25 < 0.6 < before, (before, after)


def test_return_scale_keeps_returns_inside_the_support():
    scale = ReturnScale(gamma=0.99, v_max=5.0)
    done = torch.zeros(4, dtype=torch.bool)
    for t in range(300):  # a reward of 10 per step: returns approach 10 / (1 - 0.99) = 1000
        scale.observe(torch.full((4,), 10.0), done | (t % 100 == 99))
    s = scale.scale().item()
    assert 0.0 < s < 1.0
    assert scale.abs_max.item() * s <= 5.0 + 1e-4  # the largest return seen maps inside [-v_max, v_max]
    fresh = ReturnScale(0.99, 5.0)
    assert fresh.scale().item() == 1.0  # nothing seen: rewards unchanged


@pytest.mark.parametrize("num_critics", [1, 2])
def test_simba_update_keeps_weights_on_the_sphere_and_lowers_the_loss(num_critics):
    """Also with one critic: SimbaV2's critic on tasks without terminations (no clipped double Q)."""
    from robot_rl.policies.hyper import HyperLinear

    torch.manual_seed(0)
    agent = SAC(4, 2, _simba(optimiser={"critic_lr": 1e-3}, critic={"num": num_critics, "num_target": num_critics}))
    b = _batch(256)
    agent.observe(b.obs, b.reward, torch.zeros(256, dtype=torch.bool))
    first = agent.update(b.reshape(1, 256))["critic_loss"]
    for _ in range(60):
        metrics = agent.update(b.reshape(1, 256))
    assert metrics["critic_loss"] < first
    for net in (agent.critic, agent.actor):
        for m in net.modules():
            if isinstance(m, HyperLinear):
                torch.testing.assert_close(m.weight.norm(dim=1), torch.ones_like(m.weight.norm(dim=1)))


def test_simba_state_dict_round_trip_carries_observation_and_return_statistics():
    torch.manual_seed(0)
    a = SAC(4, 2, _simba())
    for i in range(5):
        b = _batch(32, seed=i)
        a.observe(b.obs, b.reward * 10, torch.zeros(32, dtype=torch.bool))
        a.update(b.reshape(1, 32))
    c = SAC(4, 2, _simba())
    c.load_state_dict(a.state_dict())
    assert a.obs_norm is not None and c.obs_norm is not None
    torch.testing.assert_close(c.obs_norm.mean, a.obs_norm.mean)
    torch.testing.assert_close(c.reward_scale(), a.reward_scale())
    assert c.critic.obs_norm is c.obs_norm and c.critic_target.obs_norm is c.obs_norm  # one set of statistics
    obs = {"state": torch.randn(5, 4) * 3}
    torch.testing.assert_close(a.act(obs, deterministic=True), c.act(obs, deterministic=True))
    torch.manual_seed(1)
    ma = a.update(_batch(32, seed=9).reshape(1, 32))
    torch.manual_seed(1)
    mc = c.update(_batch(32, seed=9).reshape(1, 32))
    torch.testing.assert_close(ma["critic_loss"], mc["critic_loss"])
    # the actor's own state dict holds the normaliser: a policy sent to an actor process normalises the same way
    assert {"obs_norm.mean", "obs_norm.var"} <= set(a.actor.state_dict())


def test_simba_zero_actor_mean_starts_at_zero_action():
    agent = SAC(6, 3, _simba())
    agent.zero_actor_mean()
    assert torch.equal(agent.act({"state": torch.randn(4, 6)}, deterministic=True), torch.zeros(4, 3))


def test_correlated_noise_holds_each_sample_for_several_steps():
    torch.manual_seed(0)
    agent = SAC(3, 2, _simba(exploration={"noise_repeat_max": 8}))
    obs = {"state": torch.zeros(64, 3)}
    actions = torch.stack([agent.act(obs) for _ in range(40)])  # [T, N, A]; same obs, so only noise varies
    repeats = (actions[1:] == actions[:-1]).all(-1).float().mean().item()
    assert 0.3 < repeats < 0.95, repeats  # held for a while, and redrawn often enough
    white = SAC(3, 2, _simba())
    w = torch.stack([white.act(obs) for _ in range(10)])
    assert (w[1:] == w[:-1]).all(-1).float().mean().item() == 0.0


def test_simba_offline_learners_run_on_categorical_critics():
    from robot_rl.agents.calql import CalQL, CalQLConfig
    from robot_rl.agents.iql import IQL, IQLConfig

    torch.manual_seed(0)
    for make in (lambda s: CalQL(s, CalQLConfig()), lambda s: IQL(s, IQLConfig())):
        agent = SAC(4, 2, _simba())
        b = _batch(32)
        agent.observe_dataset(b.obs["state"], b.reward * 20)
        metrics = make(agent).update(b, torch.randn(32))
        assert all(torch.isfinite(v) for v in metrics.values()), metrics


def test_num_atoms_needs_the_hyper_network():
    with pytest.raises(ValueError, match="num_atoms"):
        SAC(4, 2, SACConfig(critic=CriticConfig(num_atoms=51)))


def test_build_actor_rebuilds_a_simba_actor_with_its_observation_statistics():
    """Acting processes (robot actors, deploy) build the actor from the config alone: the weights of the default
    agent, normaliser included, must load into it and act the same (they did not: it built an MLP actor)."""
    from robot_rl.agents.sac import build_actor

    cfg = _simba()
    agent = SAC(4, 2, cfg)
    agent.observe({"state": torch.randn(64, 4) * 5 + 3}, torch.randn(64), torch.zeros(64, dtype=torch.bool))
    actor = build_actor(4, 2, cfg)
    actor.load_state_dict(agent.actor.state_dict())
    obs = torch.randn(8, 4) * 5 + 3
    with torch.no_grad():
        torch.testing.assert_close(actor(obs, deterministic=True)[0], agent.act({"state": obs}, deterministic=True))


@pytest.mark.parametrize("network", ["mlp", "hyper"])
def test_bc_weight_pulls_the_actor_to_the_prior_rows_actions_only(network):
    """`bc_weight` adds a behaviour-cloning term on the batch's prior rows (`prior_rows` leading rows): with it the
    actor's deterministic action on prior states goes to the prior data's action; the online rows' actions (here
    the opposite sign) are not imitated; with bc_weight 0 (or no prior rows) nothing is cloned."""
    target = torch.tensor([0.6, -0.4])

    def train(bc_weight: float, rows: int) -> float:
        torch.manual_seed(0)
        hyper = network == "hyper"
        agent = SAC(4, 2, SACConfig(
            network=NetworkConfig(kind=network, hidden_dims=[32], **({"critic_width": 32, "actor_width": 32} if hyper
                                                                     else {})),
            critic=CriticConfig(**({"num_atoms": 21, "reward_scale": True} if hyper else {})),
            optimiser=OptimiserConfig(bc_weight=bc_weight, actor_lr=1e-3)))
        b = _batch(128)
        b.action[:64] = target  # prior rows first, as sample_mixed lays them out
        b.action[64:] = -target
        b.reward.fill_(1.0)
        for _ in range(100):
            agent.update(b.reshape(1, 128), prior_rows=rows)
        mode = agent.actor(b.obs["state"][:64], deterministic=True)[0].detach()
        return (mode - target).norm(dim=1).mean().item()

    cloned = train(10.0, 64)
    assert cloned < 0.15, cloned
    assert train(0.0, 64) > 3 * cloned and train(10.0, 0) > 3 * cloned


def test_prior_rows_is_what_sample_mixed_takes_from_prior():
    from robot_rl.replay import ReplayBuffer, prior_rows, sample_mixed

    spec = {"state": ((3,), torch.float32)}
    online, prior = ReplayBuffer(100, 1, spec, 1), ReplayBuffer(100, 1, spec, 1)
    for buf, value in ((online, 0.0), (prior, 1.0)):
        for _ in range(20):
            obs = {"state": torch.full((1, 3), value)}
            buf.add(obs, torch.zeros(1, 1), torch.zeros(1), obs, torch.zeros(1, dtype=torch.bool),
                    torch.zeros(1, dtype=torch.bool))
    for fraction in (0.25, 0.5, 0.01):
        rows = prior_rows(prior, 32, fraction)
        batch = sample_mixed(online, prior, 32, 2, fraction)
        assert bool((batch.obs["state"][:, :rows] == 1).all()) and bool((batch.obs["state"][:, rows:] == 0).all())
    assert prior_rows(None, 32, 0.5) == 0 and prior_rows(prior, 32, 0.0) == 0


def test_critics_left_at_default_are_two_where_episodes_can_terminate_and_one_where_they_cannot():
    """SimbaV2's rule (`resolve_critics`); explicit settings are kept, a target subset larger than the critics it
    resolves to is refused with the keys named."""
    from robot_rl.agents.sac import resolve_critics

    default = _simba()
    assert default.critic.num is None and default.critic.num_target is None
    two, one = resolve_critics(default, can_terminate=True), resolve_critics(default, can_terminate=False)
    assert (two.critic.num, two.critic.num_target) == (2, 2)
    assert (one.critic.num, one.critic.num_target) == (1, 1)
    rlpd = resolve_critics(SACConfig(critic=CriticConfig(num=10, num_target=2)), can_terminate=False)
    assert (rlpd.critic.num, rlpd.critic.num_target) == (10, 2)
    kept = resolve_critics(SACConfig(critic=CriticConfig(num=2)), can_terminate=False)
    assert (kept.critic.num, kept.critic.num_target) == (2, 2)
    with pytest.raises(ValueError, match=r"agent.critic.num_target=2 exceeds the 1 critic.*set agent.critic.num"):
        resolve_critics(SACConfig(critic=CriticConfig(num_target=2)), can_terminate=False)
    assert SAC(4, 2, default).critic.num_critics == 2  # built without an env: the terminating case


def test_train_on_a_dm_control_task_builds_one_critic_and_resumes_with_it(tmp_path):
    """The run records what it built (config.yaml says 1 critic), so a resumed run rebuilds the same networks."""
    from omegaconf import OmegaConf

    from robot_rl.config import compose_train_config, load_run_config
    from robot_rl.trainer import Trainer

    args = ["env.spec=dmc:cartpole-swingup", "agent.network.critic_width=16", "agent.network.actor_width=16",
            "train.steps=60",
            "train.learning_starts=20", "train.eval_every=60", "env.num_eval_envs=0", "env.max_episode_steps=30",
            "train.video=false", "quiet=true", "threads=1"]
    run = tmp_path / "run"
    trainer = Trainer(compose_train_config(args), run)
    assert trainer.agent.critic.num_critics == 1 and trainer.agent.cfg.critic.num_target == 1
    trainer.run()
    saved = OmegaConf.load(run / "config.yaml").agent
    assert (saved.critic.num, saved.critic.num_target) == (1, 1)
    resumed = Trainer(load_run_config(run, ["train.steps=80"]), run, resume=True)  # as `train resume=<run>`
    assert resumed.agent.critic.num_critics == 1
    assert resumed.method.env_steps == 60


def _lrs(agent: SAC) -> tuple[float, float, float]:
    return tuple(opt.param_groups[0]["lr"] for opt in (agent.actor_opt, agent.critic_opt, agent.alpha_opt))


def test_learning_rates_fall_linearly_to_their_end_fraction_and_stay_there():
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]),
                                optimiser=OptimiserConfig(actor_lr=1e-4, critic_lr=2e-4, temperature_lr=4e-4, lr_end_fraction=0.3)))
    assert _lrs(agent) == (1e-4, 2e-4, 4e-4)
    agent.set_lr_progress(0.5)
    assert _lrs(agent) == pytest.approx((0.65e-4, 1.3e-4, 2.6e-4))
    agent.set_lr_progress(1.0)
    assert _lrs(agent) == pytest.approx((0.3e-4, 0.6e-4, 1.2e-4))
    agent.set_lr_progress(1.7)  # a run resumed with more steps than it was scheduled for: the end rate holds
    assert _lrs(agent) == pytest.approx((0.3e-4, 0.6e-4, 1.2e-4))


def test_constant_learning_rates_are_untouched_by_progress():
    agent = SAC(4, 2, SACConfig(network=NetworkConfig(hidden_dims=[16]), optimiser=OptimiserConfig(actor_lr=1e-4)))
    agent.set_lr_progress(0.9)
    assert _lrs(agent) == (1e-4, 3e-4, 3e-4)


def test_lr_end_fraction_out_of_range_names_the_key():
    with pytest.raises(ValueError, match="agent.optimiser.lr_end_fraction"):
        SAC(4, 2, SACConfig(optimiser=OptimiserConfig(lr_end_fraction=0.0)))


def test_train_decays_learning_rates_over_train_steps_and_a_resumed_run_keeps_the_schedule(tmp_path):
    """The schedule follows the run's env steps, so a resumed run picks it up where the checkpoint left it (the
    checkpoint's optimisers carry the config's rates, `load_state_dict`, until the first update sets them)."""
    from robot_rl.config import compose_train_config, load_run_config
    from robot_rl.trainer import Trainer

    args = ["env.spec=gym:Pendulum-v1", "agent.network.critic_width=16", "agent.network.actor_width=16",
            "agent.optimiser.utd=1",
            "agent.optimiser.batch_size=16", "agent.optimiser.lr_end_fraction=0.5", "agent.optimiser.critic_lr=1e-3",
            "train.steps=40",
            "train.learning_starts=20", "train.eval_every=40", "env.num_eval_envs=0", "train.video=false",
            "quiet=true", "threads=1"]
    run = tmp_path / "run"
    trainer = Trainer(compose_train_config(args), run)
    trainer.run()
    # the last update ran at env step 40 of 40
    assert trainer.agent.critic_opt.param_groups[0]["lr"] == pytest.approx(0.5e-3)
    resumed = Trainer(load_run_config(run, ["train.steps=80"]), run, resume=True)
    resumed.run()
    assert resumed.agent.critic_opt.param_groups[0]["lr"] == pytest.approx(0.5e-3)
    resumed.method.advance()  # one step past the end of the new schedule: the end rate holds
    assert resumed.agent.critic_opt.param_groups[0]["lr"] == pytest.approx(0.5e-3)
