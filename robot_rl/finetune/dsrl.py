"""DSRL: steering a frozen diffusion or flow policy through its initial noise (Wagenmaker et al. 2025).

The policy's sampler is a deterministic map from (state, initial noise) to an action chunk when no noise is
injected along the chain (DDIM with eta = 0, an Euler-integrated flow). DSRL leaves the policy frozen and runs
SAC with that noise as its action: the SAC actor outputs w in [-1, 1]^(H*A) (tanh-squashed, so the noise's
magnitude is bounded by `noise_bound`, 1-2.5 in the paper), the chunk is denoised from x = noise_bound * w,
and the env plays its first `execute` actions. Each chunk is one SAC transition (a macro step of
`robot_rl.finetune.chunks`): reward sum_j gamma^j r_j of its executed actions, bootstrap discount gamma^k.

Mechanics that matter, each checked by tests:
- one denoising per executed chunk, and only for the envs that need a new chunk (a peer denoises twice);
- `env_steps` counts executed actions, not chunks, so the sample cost compares with per-step methods;
- chunks start at each episode's first observation (per-env queues), so with a time limit that is a
  multiple of `execute` every macro step has its exact discount. The replay buffer applies
  gamma' = gamma^execute; a chunk cut short by a time limit that is not such a multiple is bootstrapped with
  gamma^execute instead of gamma^k, a small bias (termination always cuts the bootstrap).
Before `learning_starts` executed steps the noise is uniform in the bounded box (random steering).

The actor and critics see `base.features(obs)`: the state for a state policy; for a policy that reads cameras its
own frozen conditioning (normalised state fused with its camera features), computed once per step, so no second
image encoder is trained and the replay holds feature vectors, not frames.

Noise aliasing (`dsrl.aliased=true`, the paper's DSRL-NA): many noises denoise to nearly the same chunk, so a
critic over the noise, learned only from the noises that were tried, sees few samples of each outcome. DSRL-NA
learns Q^A(s, a) over the executed actions instead (TD on the stored transitions; the next action is the
denoised chunk of the actor's next noise), then distils it into the noise critic Q^W(s, w) by regression on
noises that were never executed: Q^W(s, w) <- Q^A(s, denoise(s, w)) for w drawn half from the actor and half
uniformly from the box. The actor follows Q^W as in SAC. The replay then stores the executed actions, not w.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor

from robot_rl import envs
from robot_rl.agents.sac import SAC, SACConfig, min_of_random_subset, resolve_critics
from robot_rl.fields import help_field as _help
from robot_rl.finetune.chunks import ChunkRunner
from robot_rl.policies import QEnsemble
from robot_rl.policies.chunk_policy import ChunkPolicy
from robot_rl.policies.chunking import ActionChunker
from robot_rl.policies.composed import steered_chunk
from robot_rl.replay import Batch, ReplayBuffer
from robot_rl.runner import MethodDefaults


@dataclass
class DSRLConfig:
    noise_bound: float = _help(1.5, "the SAC action w in [-1, 1] maps to the initial noise noise_bound * w")
    learning_starts: int = _help(2000, "executed env steps with uniformly random noise before updates")
    aliased: bool = _help(
        False, "DSRL-NA: learn Q over executed actions and distil it into the noise critic on unexecuted noises"
    )

    def validate(self) -> None:
        if not 0.0 < self.noise_bound <= 5.0:
            raise ValueError("dsrl.noise_bound must be in (0, 5]")
        if self.learning_starts < 0:
            raise ValueError("dsrl.learning_starts must be >= 0")


class DSRL(MethodDefaults):
    """SAC in the noise space of a frozen chunk policy; `advance()` is one executed env step plus updates."""

    def __init__(
        self,
        cfg: DSRLConfig,
        sac: SACConfig,
        base: ChunkPolicy,
        env: envs.BatchedEnv,
        capacity: int,
        device: str | torch.device = "cpu",
    ) -> None:
        cfg.validate()
        if sac.critic.n_step != 1:
            raise ValueError("DSRL stores one transition per chunk; set agent.critic.n_step=1")
        sac = resolve_critics(sac, env.can_terminate)  # the same for a resumed run: it depends on the env alone
        self.cfg, self.sac_cfg, self.env = cfg, sac, env
        self.base = base.to(device).eval().requires_grad_(False)
        self.noise_shape = base.noise_shape
        self.noise_dim = self.noise_shape[0] * self.noise_shape[1]
        dim = base.features_dim
        self.agent = SAC(dim, self.noise_dim, sac, device)
        self.agent.zero_actor_mean()  # the deterministic steering starts at zero noise: the BC policy's mean path
        self.runner = ChunkRunner(env, base.execute, sac.critic.gamma, features=self.base.features)
        # The replay's action: the noise w (DSRL), or the executed actions, flattened (DSRL-NA).
        self.executed_dim = base.execute * base.action_dim
        self.replay = ReplayBuffer(
            capacity, 1, {"state": ((dim,), torch.float32)},
            self.executed_dim if cfg.aliased else self.noise_dim, device, gamma=sac.critic.gamma**base.execute,
            capacity_key="replay_capacity",
        )
        if cfg.aliased:
            self.action_critic = QEnsemble(
                dim, self.executed_dim, sac.critic.num, sac.network.hidden_dims, sac.network.critic_layer_norm
            ).to(device)
            self.action_critic_target = copy.deepcopy(self.action_critic).requires_grad_(False)
            self.action_critic_opt = torch.optim.AdamW(
                self.action_critic.parameters(), lr=sac.optimiser.critic_lr,
                weight_decay=sac.optimiser.critic_weight_decay
            )
            self._polyak_pairs = (list(self.action_critic_target.parameters()), list(self.action_critic.parameters()))
        self.updates = 0

    @property
    def env_steps(self) -> int:
        return self.runner.env_steps

    def start(self, seed: int) -> None:
        self.runner.reset(seed)

    def denoise(self, features: Tensor, w: Tensor) -> Tensor:
        """The chunk [M, H, A] the frozen policy makes at `base.features` [M, F] from steering actions w [M, H*A]."""
        return steered_chunk(self.base, features, w, self.cfg.noise_bound)

    def executed(self, state: Tensor, w: Tensor) -> Tensor:
        """The executed actions of `denoise`'s chunks, flattened [M, execute * A]: Q^A's action."""
        return self.executed_part(self.denoise(state, w))

    def executed_part(self, chunk: Tensor) -> Tensor:
        return chunk[:, : self.base.execute].flatten(1)

    def advance(self) -> dict[str, Tensor]:
        ids = self.runner.need_ids()
        if ids.numel():
            state = self.runner.state[ids]
            if self.env_steps < self.cfg.learning_starts:
                w = torch.rand(ids.numel(), self.noise_dim, device=state.device) * 2 - 1
            else:
                w = self.agent.act({"state": state}).to(state.device)
            chunk = self.denoise(state, w)
            stored = self.executed_part(chunk) if self.cfg.aliased else w
            self.runner.plan(ids, chunk, {"action": stored})
        result = self.runner.step()
        metrics: dict[str, Tensor] = {}
        macro = result.macro
        if macro is not None:
            self.agent.observe({"state": macro.obs}, macro.reward, macro.terminated | macro.truncated,
                               macro.env_ids, self.env.num_envs)
            self.replay.extend(
                {"state": macro.obs}, macro.payload["action"], macro.reward, {"state": macro.next_obs},
                macro.terminated, macro.truncated,
            )
            if self.env_steps >= self.cfg.learning_starts and len(self.replay) >= self.sac_cfg.optimiser.batch_size:
                update = self.update_aliased if self.cfg.aliased else self.agent.update
                for _ in range(macro.env_ids.numel()):  # one update per new transition
                    metrics = update(self.agent.sample(self.replay))
                    self.updates += 1
        return {**metrics, **result.finished}

    def update_aliased(self, batch: Batch) -> dict[str, Tensor]:
        """DSRL-NA on a [utd, B] batch of executed-action transitions: utd steps of Q^A (TD) and Q^W
        (distillation), then one actor and temperature step against Q^W."""
        cfg = self.sac_cfg
        for i in range(batch.action.shape[0]):
            b = batch.index(i)
            state, next_state = b.obs["state"], b.next_obs["state"]
            with torch.no_grad():
                next_w, _ = self.agent.actor(next_state)
                next_q = self.action_critic_target(next_state, self.executed(next_state, next_w))
                target = b.reward + b.discount * min_of_random_subset(next_q, cfg.critic.num_target)
            q = self.action_critic(state, b.action)
            action_loss = F.mse_loss(q, target.expand_as(q), reduction="none").mean(1).sum()
            self.action_critic_opt.zero_grad(set_to_none=True)
            action_loss.backward()
            self.action_critic_opt.step()
            with torch.no_grad():
                torch._foreach_lerp_(*self._polyak_pairs, cfg.critic.tau)
                # Noises that were never executed: half where the actor samples, half anywhere in the box.
                half = state.shape[0] // 2
                anywhere = torch.rand(state.shape[0] - half, self.noise_dim, device=state.device) * 2 - 1
                w = torch.cat([self.agent.actor(state[:half])[0], anywhere])
                # Q^A is in reward units; Q^W in the agent's (agent.critic.reward_scale)
                distil_target = self.action_critic(state, self.executed(state, w)).mean(0) * self.agent.reward_scale()
            noise_loss, _ = self.agent.critic_loss(state, w, distil_target.unsqueeze(-1))
            self.agent.step_critic(noise_loss)  # (also moves Q^W's target network, which DSRL-NA never reads)
        metrics = self.agent.update_actor_and_temperature(state)
        return {**metrics, "critic_loss": action_loss.detach(), "q_mean": q.detach().mean(),
                "distill_loss": noise_loss.detach()}

    def eval_policy(self) -> tuple[Callable[[dict[str, Tensor]], Tensor], Callable[[Tensor], None]]:
        """(act, on_done) for `robot_rl.evaluation.evaluate`: the deterministic steering action per chunk."""
        chunker = ActionChunker(self.base.horizon, self.base.execute)

        def act(obs: dict[str, Tensor]) -> Tensor:
            def plan() -> Tensor:
                features = self.base.features(obs)
                return self.denoise(features, self.agent.act({"state": features}, deterministic=True))

            return chunker.act(plan)

        return act, chunker.reset

    def state_dict(self) -> dict:
        state = {"agent": self.agent.state_dict(), "replay": self.replay.state_dict(), "updates": self.updates,
                 "env_steps": self.runner.env_steps, "decisions": self.runner.decisions}
        if self.cfg.aliased:
            state["action_critic"] = {"critic": self.action_critic.state_dict(),
                                      "target": self.action_critic_target.state_dict(),
                                      "opt": self.action_critic_opt.state_dict()}
        return state

    def load_state_dict(self, state: dict) -> None:
        self.agent.load_state_dict(state["agent"])
        if self.cfg.aliased:
            self.action_critic.load_state_dict(state["action_critic"]["critic"])
            self.action_critic_target.load_state_dict(state["action_critic"]["target"])
            self.action_critic_opt.load_state_dict(state["action_critic"]["opt"])
        self.replay.load_state_dict(state["replay"])
        self.updates = state["updates"]
        self.runner.env_steps, self.runner.decisions = state["env_steps"], state["decisions"]
