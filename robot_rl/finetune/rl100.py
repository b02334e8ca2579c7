"""RL-100's gated offline improvement (arXiv 2510.14830): rounds of offline RL on the policy's own rollouts, each
update kept only if an off-policy evaluation (OPE) says it is better.

Starting from a saved BC policy (any `ChunkPolicy`: MLP, diffusion or flow; state only) and, optionally, the demos it
was trained on (`data=`), each round (one `advance()` of the `robot_rl.runner.Runner`) does:

1. collect: the current policy plays `episodes_per_round` episodes (its own sampling noise unless
   `collect_deterministic`, plus Gaussian action noise `collect_noise`), appended to a dataset that only grows
   (demos + every round's rollouts, kept in the checkpoint);
2. fit a critic offline on all of it (`ChunkCritic`, IQL-style at the level of the policy's decisions): the action
   is the chunk's executed part a_t..a_{t+k-1} (k = the policy's `execute`), its reward the discounted sum over those
   steps and its bootstrap discount gamma^k (0 when the episode terminated inside it). V(s) is an expectile
   (`expectile`) of the target ensemble's mean Q(s, a_data); an ensemble of `num_critics` Q(s, a) is fitted to
   r + discount * V(s'). Only dataset actions are ever bootstrapped, as in IQL. The critic carries over between rounds;
3. candidate: a copy of the current policy trained by advantage-weighted BC on every (state, action chunk) pair of the
   dataset, pairs drawn with probability proportional to exp(beta * A / std(A)) (capped at `max_weight`), where
   A = mean_e Q_e(s, a) - V(s). Resampling, not a weighted loss, so any `ChunkPolicy.loss` works unchanged;
4. gate (`gate`): fitted-Q evaluation (`fitted_q`) of each policy on the same dataset, its zero-noise action (what
   evaluation and deployment run) at every next state as the bootstrap, each ensemble member bootstrapping from
   itself; both evaluations start from the same fresh weights every round and see the same minibatches (a critic
   carried over for the current policy only drifted away from the candidate's fresh one and decided the gate by
   itself: on push its value fell to -1.2 for a policy with 56% success); each policy is scored (`ope_value`) by the mean over the start states of every episode in the dataset of
   mean_e Q_e(s0, pi(s0)) - `pessimism` * std_e Q_e(s0, pi(s0)). The candidate replaces the current policy only if
   its score beats the current policy's by more than `margin`. The ensemble's spread is the guard against actions
   the data never showed: there the members extrapolate apart and the score drops. It is a guard, not a proof: on
   reach (tests/robot_rl/finetune/test_rl100.py's set-up, seeds 0-2, `pessimism=2`) a constant-action candidate
   was rejected in 3 of 3 seeds where the data held both policies' episodes and in 3 of 3 whole rounds (data from
   the noisy current policy), but accepted in 1 of 3 seeds with data from the current policy alone and no noise;
   the expert's BC policy was preferred to the constant one in 2 of 3 seeds (the third: a tie within the critics'
   error). Candidates of step 3 stay near the data.

The env is never asked which policy is better: the run also measures the candidate's real success on the eval envs
(`evaluate_candidate`) and the Runner evaluates the accepted policy after every round, for the log only.
`<run_dir>/rl100_rounds.json` (rewritten atomically after each round) holds per round the OPE estimates of current
and candidate, the decision, and the measured success rates; `<run_dir>/policy` is the accepted policy, a policy
directory (`robot_rl.policies.io.load_policy`: `eval policy=`, `export`, `distill` take it), rewritten whenever a
candidate is accepted. The online phase of RL-100 is left to the other methods (`finetune method=residual
base_policy=<run_dir>/policy`), the one-step distillation to `robot-rl distill`.
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from robot_rl import envs
from robot_rl.agents.iql import expectile_loss
from robot_rl.bc import chunk_pairs
from robot_rl.fields import help_field as _help
from robot_rl.policies import mlp
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.ensemble import QEnsemble
from robot_rl.policies.normalize import Normalizer
from robot_rl.runner import EVAL_SEED_OFFSET, MethodDefaults

ROUNDS_FILE = "rl100_rounds.json"
COLUMNS = ["round", "accepted", "accepted_rounds", "ope_current", "ope_candidate", "candidate_success_rate",
           "critic_loss", "value_loss", "bc_loss", "adv_weight_max"]


@dataclass
class RL100Config:
    rounds: int = _help(3, "K, rounds of collect -> fit critic -> candidate policy -> OPE gate (the run's length)")
    episodes_per_round: int = _help(20, "M, episodes the current policy plays each round into the growing dataset")
    collect_deterministic: bool = _help(False, "collect with the policy's zero-noise action (false: its sampling noise)")
    collect_noise: float = _help(0.1, "std of Gaussian noise added to collected actions (normalised space, clipped)")
    gamma: float = _help(0.99, "discount per env step (a decision of k executed actions is discounted gamma^k)")
    critic_steps: int = _help(2000, "critic updates per round on all data (the critic carries over between rounds)")
    critic_hidden: list[int] = _help([256, 256], "hidden widths of the Q ensemble and of V (LayerNorm, ReLU)")
    num_critics: int = _help(5, "Q ensemble size; the OPE is the ensemble mean minus pessimism x its std")
    expectile: float = _help(0.8, "expectile of V's regression onto Q (0.5: the data's mean; near 1: its best)")
    critic_lr: float = _help(3e-4, "Adam learning rate of the critics")
    batch_size: int = _help(256, "transitions per critic update, pairs per policy update")
    policy_steps: int = _help(1000, "advantage-weighted BC updates of the candidate (a copy of the current policy)")
    policy_lr: float = _help(1e-4, "Adam learning rate of the candidate")
    beta: float = _help(2.0, "inverse temperature of the weights exp(beta * A / std(A)) of the candidate's BC pairs")
    max_weight: float = _help(100.0, "cap on those weights")
    ope_steps: int = _help(2000, "fitted-Q evaluation updates per policy per round (the gate's critics)")
    margin: float = _help(0.0, "accept a candidate only if its OPE value beats the current policy's by more than this")
    pessimism: float = _help(2.0, "OPE value = mean over the Q ensemble minus this x its std (0: the plain mean)")
    evaluate_candidate: bool = _help(True, "measure every candidate's real success on the eval envs (logged, never "
                                           "read by the gate)")

    def validate(self) -> None:
        checks = [
            (self.rounds >= 1, "rl100.rounds must be >= 1"),
            (self.episodes_per_round >= 1, "rl100.episodes_per_round must be >= 1"),
            (self.collect_noise >= 0, "rl100.collect_noise must be >= 0"),
            (0.0 < self.gamma <= 1.0, "rl100.gamma must be in (0, 1]"),
            (self.critic_steps >= 1, "rl100.critic_steps must be >= 1"),
            (self.ope_steps >= 1, "rl100.ope_steps must be >= 1"),
            (len(self.critic_hidden) >= 1 and min(self.critic_hidden) >= 1,
             "rl100.critic_hidden must list positive widths"),
            (self.num_critics >= 2, "rl100.num_critics must be >= 2 (the OPE's pessimism is the ensemble's spread)"),
            (0.5 <= self.expectile < 1.0, "rl100.expectile must be in [0.5, 1)"),
            (self.critic_lr > 0, "rl100.critic_lr must be > 0"),
            (self.batch_size >= 1, "rl100.batch_size must be >= 1"),
            (self.policy_steps >= 1, "rl100.policy_steps must be >= 1"),
            (self.policy_lr > 0, "rl100.policy_lr must be > 0"),
            (self.beta >= 0, "rl100.beta must be >= 0"),
            (self.max_weight >= 1, "rl100.max_weight must be >= 1"),
            (self.pessimism >= 0, "rl100.pessimism must be >= 0"),
            (math.isfinite(self.margin), "rl100.margin must be a finite number"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)


# -- the dataset ------------------------------------------------------------------------------------------------
STEP_KEYS = ("state", "action", "reward", "next_state", "terminated", "truncated")


def empty_data(obs_dim: int, action_dim: int) -> dict[str, Tensor]:
    """A dataset with no episode: per step `STEP_KEYS` (episodes concatenated in order), per episode `length`,
    `round` (0: demos, r: collected in round r) and `success`."""
    return {"state": torch.zeros(0, obs_dim), "action": torch.zeros(0, action_dim), "reward": torch.zeros(0),
            "next_state": torch.zeros(0, obs_dim), "terminated": torch.zeros(0, dtype=torch.bool),
            "truncated": torch.zeros(0, dtype=torch.bool), "length": torch.zeros(0, dtype=torch.long),
            "round": torch.zeros(0, dtype=torch.long), "success": torch.zeros(0, dtype=torch.bool)}


def concat_data(a: dict[str, Tensor], b: dict[str, Tensor]) -> dict[str, Tensor]:
    return {k: torch.cat([a[k], b[k].to(a[k])]) for k in a}


def demo_data(path: str, obs_dim: int, action_dim: int) -> dict[str, Tensor]:
    """The dataset at `path` (`robot-rl collect`, the BC policy's demos) in `empty_data`'s layout, as round 0."""
    from robot_rl.datasets import read_dataset

    d = read_dataset(path)
    t = d.transitions
    if t.obs["state"].shape[1] != obs_dim or t.action.shape[1] != action_dim:
        raise ValueError(f"data={path} has observations of {t.obs['state'].shape[1]} and actions of "
                         f"{t.action.shape[1]}, the base policy {obs_dim} and {action_dim}: use its own demos")
    lengths = d.episodes.length.long()
    episode_of_step = torch.repeat_interleave(torch.arange(len(lengths)), lengths)
    success = torch.zeros(len(lengths), dtype=torch.bool)
    success[episode_of_step[d.success.bool()]] = True
    return {"state": t.obs["state"].float(), "action": t.action.float(), "reward": t.reward.float(),
            "next_state": t.next_obs["state"].float(), "terminated": t.terminated.bool(),
            "truncated": t.truncated.bool(), "length": lengths, "round": torch.zeros(len(lengths), dtype=torch.long),
            "success": success}


def decision_windows(data: dict[str, Tensor], k: int, gamma: float) -> dict[str, Tensor]:
    """Every step t as the start of a decision of up to `k` executed actions (`ChunkCritic`'s transitions):
    `action` [M, k*A] (past the episode's end its last action repeats, as in `robot_rl.bc.chunk_pairs`), `reward`
    sum_j gamma^j r_{t+j} over the m = min(k, steps left) steps, `discount` gamma^m (0 when the episode terminated
    inside the window), `next_state` the state after them (the episode's final observation at its end)."""
    lengths = data["length"]
    m_total = int(lengths.sum())
    ends = torch.repeat_interleave(torch.cumsum(lengths, 0) - 1, lengths)  # [M] the last step of each step's episode
    steps = torch.arange(m_total)
    index = torch.minimum(steps[:, None] + torch.arange(k)[None, :], ends[:, None])  # [M, k]
    inside = (steps[:, None] + torch.arange(k)[None, :]) <= ends[:, None]  # [M, k]
    powers = gamma ** torch.arange(k, dtype=torch.float32)
    reward = (data["reward"][index] * inside * powers).sum(1)
    m = inside.sum(1)
    last = index[:, -1]  # the window's last step (the episode's last where the window reaches it)
    ended = ((steps + k - 1) >= ends) & data["terminated"][last]
    discount = torch.where(ended, torch.zeros(()), gamma ** m.float())
    return {"state": data["state"], "action": data["action"][index].flatten(1), "reward": reward,
            "discount": discount, "next_state": data["next_state"][last]}


def episode_returns(data: dict[str, Tensor]) -> Tensor:
    """The undiscounted return of each episode of `data` [E]."""
    episode = torch.repeat_interleave(torch.arange(data["length"].numel()), data["length"])
    return torch.zeros(data["length"].numel()).index_add_(0, episode, data["reward"].float())


# -- the critic ---------------------------------------------------------------------------------------------------
class ChunkCritic(nn.Module):
    """IQL at the level of decisions (module docstring): a Q ensemble over (state, executed chunk [k*A]) and V(s),
    on states normalised with the dataset's mean and std (fitted once, from the first data it sees)."""

    def __init__(self, obs_dim: int, action_dim: int, execute: int, cfg: RL100Config) -> None:
        super().__init__()
        self.cfg, self.execute = cfg, int(execute)
        self.obs_norm = Normalizer(obs_dim, "mean_std")
        hidden = tuple(cfg.critic_hidden)
        self.q = QEnsemble(obs_dim, execute * action_dim, cfg.num_critics, hidden, layer_norm=True)
        self.q_target = copy.deepcopy(self.q).requires_grad_(False)
        self.v = mlp(obs_dim, 1, hidden, layer_norm=True)
        self.q_opt = torch.optim.Adam(self.q.parameters(), lr=cfg.critic_lr)
        self.v_opt = torch.optim.Adam(self.v.parameters(), lr=cfg.critic_lr)
        self.register_buffer("fitted", torch.zeros((), dtype=torch.bool))

    def q_values(self, state: Tensor, action: Tensor, target: bool = False) -> Tensor:
        """[E, B]"""
        return (self.q_target if target else self.q)(self.obs_norm(state), action)

    def value(self, state: Tensor) -> Tensor:
        return self.v(self.obs_norm(state)).squeeze(-1)

    def fit(self, windows: dict[str, Tensor], steps: int, next_action: Tensor | None = None,
            tau: float = 0.02, generator: torch.Generator | None = None) -> dict[str, float]:
        """`steps` updates on uniform batches of `windows` (`decision_windows`). Without `next_action`: IQL (V an
        expectile of the target ensemble's mean Q(s, a_data); Q regressed onto r + discount * V(s')). With
        `next_action` [M, k*A], a policy's action at every window's next state: fitted-Q evaluation of that policy,
        each member regressed onto r + discount * its own target Q(s', pi(s')) (so the members' spread carries the
        uncertainty of where pi leaves the data). `generator` draws the minibatches (the gate gives both policies'
        evaluations the same batches)."""
        if not bool(self.fitted):
            self.obs_norm.fit(windows["state"])
            self.fitted.fill_(True)
        n = windows["state"].shape[0]
        q_sum = v_sum = 0.0
        for _ in range(steps):
            i = torch.randint(0, n, (min(self.cfg.batch_size, n),), generator=generator).to(windows["state"].device)
            s, a, r, d, s2 = (windows[k][i] for k in ("state", "action", "reward", "discount", "next_state"))
            if next_action is None:
                with torch.no_grad():
                    q_data = self.q_values(s, a, target=True).mean(0)
                value_loss = expectile_loss(q_data - self.value(s), self.cfg.expectile)
                self.v_opt.zero_grad(set_to_none=True)
                value_loss.backward()
                self.v_opt.step()
                v_sum += float(value_loss.detach())
                with torch.no_grad():
                    target = r + d * self.value(s2)  # [B], the same for every member
            else:
                with torch.no_grad():
                    target = r + d * self.q_values(s2, next_action[i], target=True)  # [E, B]
            q_loss = (self.q_values(s, a) - target).pow(2).mean()
            self.q_opt.zero_grad(set_to_none=True)
            q_loss.backward()
            self.q_opt.step()
            with torch.no_grad():
                for p, pt in zip(self.q.parameters(), self.q_target.parameters(), strict=True):
                    pt.lerp_(p, tau)
            q_sum += float(q_loss.detach())
        return {"critic_loss": q_sum / steps, "value_loss": v_sum / steps}

    @torch.no_grad()
    def advantage(self, windows: dict[str, Tensor], batch: int = 4096) -> Tensor:
        """A = mean_e Q_e(s, a) - V(s) of every dataset decision [M]."""
        out = []
        for i in range(0, windows["state"].shape[0], batch):
            s, a = windows["state"][i:i + batch], windows["action"][i:i + batch]
            out.append(self.q_values(s, a).mean(0) - self.value(s))
        return torch.cat(out)


@torch.no_grad()
def policy_actions(policy: ChunkPolicy, states: Tensor, execute: int, batch: int = 4096) -> Tensor:
    """The executed part of `policy`'s zero-noise chunk at `states`, flattened [B, execute*A]."""
    policy.eval()
    return torch.cat([policy.predict_chunk(states[i:i + batch], deterministic=True)[:, :execute].flatten(1)
                      for i in range(0, states.shape[0], batch)])


def fitted_q(policy: ChunkPolicy, windows: dict[str, Tensor], cfg: RL100Config, execute: int,
             init: ChunkCritic | None = None, batch_seed: int = 0) -> tuple[ChunkCritic, dict[str, float]]:
    """Fitted-Q evaluation of `policy`'s zero-noise actions on the dataset's decisions: a copy of `init` (or a fresh
    critic) trained for `cfg.ope_steps` updates on minibatches drawn from `batch_seed`."""
    state = windows["state"]
    critic = copy.deepcopy(init) if init is not None else ChunkCritic(state.shape[1], policy.action_dim, execute, cfg)
    critic = critic.to(state.device)
    generator = torch.Generator().manual_seed(batch_seed)
    losses = critic.fit(windows, cfg.ope_steps, next_action=policy_actions(policy, windows["next_state"], execute),
                        generator=generator)
    return critic, losses


@torch.no_grad()
def ope_value(critic: ChunkCritic, policy: ChunkPolicy, states: Tensor, pessimism: float) -> float:
    """A policy's estimated value: the mean over `states` of mean_e Q_e(s, pi(s)) - pessimism * std_e Q_e(s, pi(s)),
    with `critic` the policy's own fitted-Q evaluation."""
    q = critic.q_values(states, policy_actions(policy, states, critic.execute))
    return float((q.mean(0) - pessimism * q.std(0)).mean())


def gate(windows: dict[str, Tensor], starts: Tensor, current: ChunkPolicy, candidate: ChunkPolicy, cfg: RL100Config,
         execute: int) -> dict[str, Any]:
    """The OPE gate, from the dataset alone (no env): fitted-Q evaluation of each policy (`fitted_q`; the two start
    from the same fresh weights and see the same minibatches, so they differ only by the policy they evaluate), both
    scored by `ope_value` on the same start states `starts`; the candidate is accepted if its value exceeds the
    current policy's by more than `cfg.margin`. Returns the two values, the decision and the two critics (`critics`:
    current, candidate)."""
    init = ChunkCritic(windows["state"].shape[1], current.action_dim, execute, cfg).to(windows["state"].device)
    seed = int(torch.randint(0, 2**31 - 1, ()))
    now_critic, _ = fitted_q(current, windows, cfg, execute, init, seed)
    new_critic, _ = fitted_q(candidate, windows, cfg, execute, init, seed)
    now = ope_value(now_critic, current, starts, cfg.pessimism)
    new = ope_value(new_critic, candidate, starts, cfg.pessimism)
    return {"ope_current": now, "ope_candidate": new, "accepted": bool(new > now + cfg.margin),
            "critics": (now_critic, new_critic)}


def start_states(data: dict[str, Tensor]) -> Tensor:
    """The first state of every episode of `data` (demos and rollouts: all drawn from the env's resets)."""
    first = torch.cumsum(data["length"], 0) - data["length"]
    return data["state"][first]


def weighted_bc(policy: ChunkPolicy, obs: Tensor, chunks: Tensor, weights: Tensor, steps: int, lr: float,
                batch_size: int) -> float:
    """`steps` BC updates of `policy` on (obs, chunk) pairs drawn with probability proportional to `weights`;
    returns the mean loss."""
    optimiser = torch.optim.Adam([p for p in policy.parameters() if p.requires_grad], lr=lr)
    policy.train()
    total = 0.0
    try:
        for _ in range(steps):
            i = torch.multinomial(weights, batch_size, replacement=True)
            loss = policy.loss(obs[i], chunks[i])
            optimiser.zero_grad(set_to_none=True)
            loss.backward()
            optimiser.step()
            total += float(loss.detach())
    finally:
        policy.eval()
        policy.reset()
    return total / steps


def awr_weights(advantage: Tensor, beta: float, max_weight: float) -> Tensor:
    """exp(beta * A / std(A)), capped at `max_weight` (the std makes beta mean the same for any reward scale)."""
    scale = advantage.std() if advantage.numel() > 1 else advantage.new_ones(())
    return torch.exp(beta * advantage / scale.clamp(min=1e-6)).clamp(max=max_weight)


# -- the method ---------------------------------------------------------------------------------------------------
class RL100(MethodDefaults):
    """One round per `advance()` (module docstring); `stopped` once `rounds` rounds are done."""

    def __init__(self, cfg: RL100Config, base: ChunkPolicy, env: envs.BatchedEnv, device: str | torch.device = "cpu",
                 demos: str | None = None, base_path: str = "") -> None:
        cfg.validate()
        self.cfg, self.env, self.device, self.base_path = cfg, env, torch.device(device), base_path
        self.current = base.to(self.device).eval()
        self.k = self.current.execute
        self.critic = ChunkCritic(base.obs_dim, base.action_dim, self.k, cfg).to(self.device)  # IQL, for the weights
        self.data = empty_data(base.obs_dim, base.action_dim)
        if demos:
            self.data = concat_data(self.data, demo_data(demos, base.obs_dim, base.action_dim))
        self.env_steps = 0
        self.round = 0
        self.records: list[dict[str, Any]] = []
        self.run: Any = None  # the Runner, from `pretrain`: its eval envs and run directory
        self._seed = 0

    @property
    def stopped(self) -> bool:  # type: ignore[override]
        return self.round >= self.cfg.rounds

    def start(self, seed: int) -> None:
        self._seed = seed

    def pretrain(self, run: Any) -> None:
        self.run = run

    # -- one round ------------------------------------------------------------------------------------------------
    @torch.no_grad()
    def collect(self, policy: ChunkPolicy, episodes: int, seed: int) -> tuple[dict[str, Tensor], int]:
        """`episodes` whole episodes of `policy` (the first ones to finish), in `empty_data`'s layout, and the env
        steps it took (episodes cut off when enough had finished count too)."""
        env, cfg = self.env, self.cfg
        n = env.num_envs
        obs = env.reset(seed=seed)
        policy.reset()
        open_eps: list[dict[str, list[Tensor]]] = [{k: [] for k in STEP_KEYS} for _ in range(n)]
        done_eps: list[tuple[dict[str, list[Tensor]], bool]] = []
        solved = torch.zeros(n, dtype=torch.bool)  # any step of the open episode solved the task
        steps = 0
        while len(done_eps) < episodes:
            action = policy.act(obs, deterministic=cfg.collect_deterministic).to(env.device)
            if cfg.collect_noise > 0:
                action = (action + cfg.collect_noise * torch.randn_like(action)).clamp(-1.0, 1.0)
            next_obs, reward, terminated, truncated, info = env.step(action)
            steps += n
            done = terminated | truncated
            final = next_obs["state"].clone()
            if bool(done.any()):
                final[done] = info["final_obs"]["state"][done]
            if "success" in info:
                solved |= info["success"].bool().cpu()
            for e in range(n):
                ep = open_eps[e]
                for key, value in zip(STEP_KEYS, (obs["state"][e], action[e], reward[e], final[e], terminated[e],
                                                   truncated[e]), strict=True):
                    ep[key].append(value.detach().cpu())
                if done[e]:
                    done_eps.append((ep, bool(solved[e])))
                    open_eps[e] = {k: [] for k in STEP_KEYS}
                    solved[e] = False
            policy.reset(done)
            obs = next_obs
        policy.reset()
        chosen = done_eps[:episodes]
        out = {key: torch.cat([torch.stack(ep[key]) for ep, _ in chosen]) for key in STEP_KEYS}
        out["reward"], out["terminated"], out["truncated"] = (
            out["reward"].float(), out["terminated"].bool(), out["truncated"].bool())
        out["length"] = torch.tensor([len(ep["reward"]) for ep, _ in chosen], dtype=torch.long)
        out["round"] = torch.full((len(chosen),), self.round + 1, dtype=torch.long)
        out["success"] = torch.tensor([ok for _, ok in chosen], dtype=torch.bool)
        return out, steps

    def advance(self) -> dict[str, Any]:
        """Collect, fit the critic, train a candidate, gate it; the state changes only once the round is complete,
        so a checkpoint written on Ctrl-C holds the last complete round."""
        cfg, rnd, t0 = self.cfg, self.round + 1, time.monotonic()
        rollouts, steps = self.collect(self.current, cfg.episodes_per_round, self._seed + 7919 * rnd)
        data = concat_data(self.data, rollouts)
        windows = {k: v.to(self.device) for k, v in decision_windows(data, self.k, cfg.gamma).items()}
        critic = copy.deepcopy(self.critic)
        losses = critic.fit(windows, cfg.critic_steps)
        weights = awr_weights(critic.advantage(windows), cfg.beta, cfg.max_weight)
        obs, chunks = chunk_pairs(data["state"], data["action"], data["length"], self.current.horizon)
        candidate = copy.deepcopy(self.current)
        bc_loss = weighted_bc(candidate, obs.to(self.device), chunks.to(self.device), weights, cfg.policy_steps,
                              cfg.policy_lr, cfg.batch_size)
        decision = gate(windows, start_states(data).to(self.device), self.current, candidate, cfg, self.k)
        decision.pop("critics")
        before = None if self.run is None or self.run.last_result is None else self.run.last_result.get("success_rate")
        measured = self.measure(candidate) if cfg.evaluate_candidate else None
        accepted = decision["accepted"]
        record = {
            "round": rnd, **decision, "ope_gain": decision["ope_candidate"] - decision["ope_current"],
            "margin": cfg.margin,
            "success_current": before,  # the policy the round started from, measured by the Runner
            "success_candidate": measured,
            "success_after": (measured if accepted else before),
            "rollout_success_rate": float(rollouts["success"].float().mean()),
            "episodes_collected": int(rollouts["length"].numel()), "env_steps_round": steps,
            "dataset_episodes": int(data["length"].numel()), "dataset_steps": int(data["length"].sum()),
            **{k: round(v, 6) for k, v in losses.items()}, "bc_loss": round(bc_loss, 6),
            "adv_weight_max": float(weights.max()), "adv_weight_mean": float(weights.mean()),
            "wall_time_s": round(time.monotonic() - t0, 2),
        }
        # the round is complete: commit it
        self.data, self.critic, self.round = data, critic, rnd
        self.env_steps += steps
        if accepted:
            self.current = candidate
        self.records = [*self.records, record]
        self.write_outputs(accepted or rnd == 1)
        if self.run is not None:
            verdict = "accepted" if accepted else "rejected"
            seen = "" if measured is None else f" | candidate's real success {measured:.0%} (not used by the gate)"
            self.run.progress.message(
                f"[rl100] round {rnd}/{cfg.rounds}: OPE current {record['ope_current']:.4f}, candidate "
                f"{record['ope_candidate']:.4f} -> {verdict}{seen} | rollouts {record['rollout_success_rate']:.0%} "
                f"success | {record['wall_time_s']:.0f}s")
        metrics: dict[str, Any] = {
            "round": float(rnd), "accepted": float(accepted), "ope_current": record["ope_current"],
            "ope_candidate": record["ope_candidate"], "critic_loss": losses["critic_loss"],
            "value_loss": losses["value_loss"], "bc_loss": bc_loss, "adv_weight_max": record["adv_weight_max"],
            # the rollouts, as train_return_mean and train_success_rate
            "episode_return": episode_returns(rollouts), "success": rollouts["success"].float(),
        }
        if measured is not None:
            metrics["candidate_success_rate"] = measured
        return metrics

    @torch.no_grad()
    def measure(self, policy: ChunkPolicy) -> float | None:
        """`policy`'s success rate on the run's eval envs, from the starts every evaluation of the run uses (a
        number for the log; None without a run or where the task defines no success)."""
        if self.run is None or self.run.eval_env is None:
            return None
        from robot_rl.evaluation import evaluate

        policy.reset()
        result = evaluate(lambda o: policy.act(o, deterministic=True).to(self.run.eval_env.device), self.run.eval_env,
                          seed=self.run.settings.seed + EVAL_SEED_OFFSET, on_done=policy.reset)
        policy.reset()
        return result["success_rate"]

    def write_outputs(self, policy_changed: bool) -> None:
        """`<run_dir>/policy` (when the accepted policy changed, and after the first round) and the rounds file."""
        if self.run is None:
            return
        from robot_rl.datasets.atomic import write_json
        from robot_rl.policies.io import read_metadata, save_policy

        run_dir = Path(self.run.run_dir)
        if policy_changed:
            accepted = [r["round"] for r in self.records if r["accepted"]]
            base_meta = read_metadata(self.base_path) if self.base_path else {}
            metadata = {**{k: v for k, v in base_meta.items() if k not in ("trained_by", "steps", "final_loss")},
                        "trained_by": "robot-rl finetune method=rl100", "base_policy": self.base_path,
                        "accepted_rounds": accepted, "rounds": self.round}
            save_policy(self.current, run_dir / "policy", metadata=metadata)
        summary = {"base_policy": self.base_path, "policy_dir": str(run_dir / "policy"), "rounds_done": self.round,
                   "accepted_rounds": sum(bool(r["accepted"]) for r in self.records), "rounds": self.records}
        write_json(run_dir / ROUNDS_FILE, summary, fsync=True)

    def eval_policy(self):
        policy = self.current
        policy.reset()
        return (lambda obs: policy.act(obs, deterministic=True)), policy.reset

    def log_fields(self) -> dict[str, float | None]:
        return {"accepted_rounds": float(sum(bool(r["accepted"]) for r in self.records))}

    def finish(self, run: Any) -> dict[str, Any]:
        self.run = run
        if not (Path(run.run_dir) / "policy").is_dir():
            self.write_outputs(True)
        return {"policy_dir": str(Path(run.run_dir) / "policy"), "rounds": self.records}

    def state_dict(self) -> dict[str, Any]:
        return {"policy": self.current.state_dict(), "critic": self.critic.state_dict(),
                "critic_opt": [self.critic.q_opt.state_dict(), self.critic.v_opt.state_dict()],
                "replay": dict(self.data), "env_steps": self.env_steps, "rl100_round": self.round,
                "rl100_records": self.records}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.current.load_state_dict(state["policy"])
        self.critic.load_state_dict(state["critic"])
        if "critic_opt" in state:
            self.critic.q_opt.load_state_dict(state["critic_opt"][0])
            self.critic.v_opt.load_state_dict(state["critic_opt"][1])
        if "replay" in state:  # best.pt leaves the dataset out
            self.data = {k: v.cpu() for k, v in state["replay"].items()}
        self.env_steps, self.round = state["env_steps"], state["rl100_round"]
        self.records = list(state["rl100_records"])
