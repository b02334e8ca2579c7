"""The training loop: collect from N envs, update, evaluate on separate envs, log, checkpoint, resume.

With prior data (`data.path`) the same loop runs RLPD (prior and online data in every batch), and with
`offline.steps` it first pretrains offline (Cal-QL, CQL or IQL), then warms up by rolling out the pretrained
policy for `train.learning_starts` steps without updates, then fine-tunes online: WSRL (see `robot_rl.offline`).

A run directory holds everything needed to continue: `config.yaml`, `checkpoints/latest.pt` (weights,
optimisers, replay, RNG states, counters), `checkpoints/best.pt` (weights of the best evaluation),
`checkpoints/pretrained.pt` (after offline pretraining), `metrics.csv` (`offline_metrics.csv`),
`tensorboard/`, `learning_curve.png` and `videos/`.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import torch

from robot_rl import checkpoint, envs
from robot_rl.agents.sac import SAC, camera_groups, resolve_critics
from robot_rl.config import ConfigError, TrainConfig
from robot_rl.device import fit_default_replay_capacity
from robot_rl.evaluation import record_video
from robot_rl.jump_start import JumpStart, make_guide
from robot_rl.logger import METRIC_COLUMNS, Episodes
from robot_rl.observations import Mirror, ObservationPipeline
from robot_rl.offline import pretrain
from robot_rl.policies.encoders import BackboneWeightsError
from robot_rl.prior_data import OfflineData
from robot_rl.replay import ReplayBuffer
from robot_rl.runner import EVAL_SEED_OFFSET, MethodDefaults, Runner, RunSettings, prepare
from robot_rl.transitions import Transitions

__all__ = ["EVAL_SEED_OFFSET", "OnlineSAC", "Trainer", "build_agent", "make_env"]

# metrics.csv's extra columns with env.reward_classifier: the training episodes' ends judged by the classifier
# (train_success_rate) and by the task, and how often the classifier called a success the task did not, or missed one
LEARNED_REWARD_COLUMNS = ["train_success_rate", "train_env_success_rate", "train_reward_false_success",
                          "train_reward_missed_success"]


# env.practice: the training episodes' success rate, how many episodes ran and how many scenes a person put back.
PRACTICE_COLUMNS = ["train_success_rate", "train_episodes", "human_resets", "reset_steps"]


def make_env(cfg: TrainConfig, num_envs: int, learned_reward: bool = False, **options) -> envs.BatchedEnv:
    """The env of `cfg.env`; with `learned_reward` (the training envs) and `env.reward_classifier` set, its reward
    and success come from that classifier (`robot_rl.classifier_reward`); evaluation envs keep the task's own. On
    a state arm task the training envs render the classifier's cameras for it, and the learner sees the state only.
    `env.end_on_task_success=false` keeps the training envs' episodes going past the task's success."""
    spec, pixel_size, view = cfg.env.spec, tuple(cfg.env.pixel_size), None
    classifier = cfg.env.reward_classifier if learned_reward else None
    if classifier:
        from robot_rl.classifier import ClassifierError
        from robot_rl.classifier_reward import classifier_view, wrap_if_configured

        try:
            view = classifier_view(spec, classifier)
        except ClassifierError as e:
            raise ClassifierError(f"env.reward_classifier: {e}") from None
        if view is not None:
            spec, pixel_size = view
            options["full_state"] = True
    if learned_reward and not cfg.env.end_on_task_success:
        options["end_on_success"] = False
    if learned_reward and cfg.env.practice:  # the training envs practise without resets; evaluation keeps them
        options["practice"] = True
        options["practice_reset"] = cfg.env.practice_reset
    env = envs.make(
        spec,
        num_envs=num_envs,
        device=cfg.device,  # GPU backends (mjx:, warp:, isaaclab:) then simulate where the learner is
        action_repeat=cfg.env.action_repeat,
        max_episode_steps=cfg.env.max_episode_steps,
        pixel_size=pixel_size,
        delay=cfg.env_delay.to_delay(),  # env_delay: the observation-to-action delay (robot_rl.envs.delay)
        **options,
    )
    if not classifier:
        return env
    return wrap_if_configured(env, classifier, cfg.env.reward_classifier_threshold,
                              cfg.env.reward_classifier_consecutive, hide_frames=view is not None)


def build_agent(cfg: TrainConfig, env: envs.BatchedEnv) -> SAC:
    """SAC for `env`: a pixel agent (DrQ encoders) when the env has camera groups. Critics left at their default
    are resolved for this env first (`resolve_critics`: one critic where episodes cannot terminate), in `cfg`
    itself, so that the run's config.yaml and checkpoints record what was built."""
    (obs_dim,) = env.observation_spec["state"][0]
    try:
        cfg.agent = resolve_critics(cfg.agent, env.can_terminate)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    try:
        return SAC(obs_dim, env.action_dim, cfg.agent, device=cfg.device, cameras=camera_groups(env.observation_spec))
    except BackboneWeightsError as e:
        raise ConfigError(f"agent.encoder.weights: {e}") from None


class OnlineSAC(MethodDefaults):
    """Online SAC as a `robot_rl.runner.Method`: RLPD with prior data, after an optional offline pretraining
    phase (WSRL). Owns the training envs, agent and replay; `advance()` is one batched env step plus updates."""

    def __init__(self, cfg: TrainConfig, env: envs.BatchedEnv) -> None:
        self.cfg, self.env = cfg, env
        if "state" not in env.observation_spec:
            raise ValueError(f"{cfg.env.spec} has no 'state' observation group; SAC needs state observations")
        cameras = tuple(camera_groups(env.observation_spec))
        self.agent = build_agent(cfg, env)
        # Only the groups the agent reads are stored (`state` and the cameras); camera frames once per step, not
        # as obs and next_obs (ReplayBuffer's `frames`), which halves what an image costs.
        self.groups = ("state", *cameras)
        online = [self._mirror(env, cfg.env.spec, "train.mirror_online", cameras)] if cfg.train.mirror_online else []
        prior = [self._mirror(env, cfg.env.spec, "data.mirror")] if cfg.data.mirror and cfg.data.path else []
        self.pipeline = ObservationPipeline(self.agent, self.groups, online, prior)
        replay_spec = self.pipeline.replay_spec({k: env.observation_spec[k] for k in self.groups})
        cfg.train.replay_capacity = fit_default_replay_capacity(  # unset and too big for memory: what fits
            cfg.train.replay_capacity, replay_spec, env.action_dim, cfg.device, cameras, env.max_episode_steps)
        self.replay = ReplayBuffer(
            cfg.train.replay_capacity,
            cfg.env.num_envs * self.pipeline.copies,
            replay_spec,
            env.action_dim,
            device=cfg.device,
            gamma=cfg.agent.critic.gamma,
            n_step=cfg.agent.critic.n_step,
            capacity_key="train.replay_capacity",
            frames=cameras,
            episode_steps=env.max_episode_steps,
        )
        self.prior: OfflineData | None = None
        self.prior_replay: ReplayBuffer | None = None
        if cfg.data.path:
            self.prior = OfflineData.load(cfg.data.path, cfg.agent.critic.gamma, cfg.data.max_episodes, cfg.device,
                                          cameras=cameras, env_spec=cfg.env.spec)
            self.prior.check_fits(self.agent.obs_dim, self.agent.action_dim, f"dataset {cfg.data.path}",
                                  camera_groups(env.observation_spec))
            # data.mirror's reflections, the statistics, and with cached embeddings the frames as backbone features
            self.prior = self.pipeline.prior_data(self.prior)
            if cfg.data.mix_online:
                self.prior_replay = self.prior.to_replay(cfg.agent.critic.gamma, cfg.agent.critic.n_step, cfg.device)
        # A pretrained agent explores with its own policy before learning starts (WSRL warm-up), not uniformly.
        self.pretrained = cfg.offline.steps > 0 or cfg.offline.init is not None
        self.updates_per_step = env.num_envs if cfg.train.updates_per_step is None else cfg.train.updates_per_step
        self.offline_updates = 0
        self.env_steps = 0
        self.updates = 0
        # env.practice: training episodes run, scenes a person had to reset among them, and the reset controller's
        # control steps; counted on the env's device and read only when logged or saved (no host sync per step)
        self._practice_counts = torch.zeros(3, dtype=torch.long, device=env.device)
        self._obs: dict[str, torch.Tensor] | None = None
        self.jump_start: JumpStart | None = None
        if cfg.jsrl.guide is not None:  # JSRL: a guide drives each training episode's first steps
            if env.max_episode_steps is None:
                raise ConfigError(f"jsrl.guide: {cfg.env.spec} has no episode length to start the handover from; set "
                                  "env.max_episode_steps")
            guide, guide_reset = make_guide(cfg.jsrl, env, cfg.seed, cfg.device)
            self.jump_start = JumpStart(cfg.jsrl, guide, guide_reset, env.num_envs, env.max_episode_steps, env.device)

    @staticmethod
    def _mirror(env: envs.BatchedEnv, spec: str, key: str, cameras: tuple[str, ...] = ()) -> Mirror:
        """The symmetry that `key` (data.mirror, train.mirror_online) uses: the env's, flipping `cameras`, or a
        one-line error (a dataset's cameras are `ObservationPipeline.prior_data`'s to check)."""
        reflection = env.reflection()
        if reflection is None:
            raise ConfigError(f"{key}=true: {spec} declares no mirror symmetry (arm:push and arm:pick_place, "
                              f"with or without -pixels, do): set {key}=false")
        if uncovered := Mirror(reflection).uncovered(cameras):
            raise ConfigError(f"{key}=true: {spec}'s reflection does not cover camera {uncovered[0]}: set {key}=false")
        return Mirror(reflection)

    def load_init_agent(self, path: Path) -> None:
        state = checkpoint.load(path)
        try:
            self.agent.load_state_dict(state["agent"])
        except (KeyError, RuntimeError, ValueError) as e:
            raise checkpoint.CheckpointError(
                f"offline.init={path}: its agent does not fit this configuration ({e}); use the same env and "
                "agent settings as the run that wrote it"
            ) from e
        # IQL never trains the temperature, so an IQL checkpoint from before any online step holds only its run's
        # agent.exploration.init_temperature: this run's applies (it was silently replaced). Cal-QL and CQL learn it as SAC
        # does, and fine-tuning continues from what they learned.
        if state.get("config", {}).get("offline", {}).get("algorithm") == "iql" and not state.get("env_steps"):
            with torch.no_grad():
                self.agent.log_alpha.fill_(math.log(self.cfg.agent.exploration.init_temperature))

    def start(self, seed: int) -> None:
        self._obs = self.env.reset(seed=seed)
        self.pipeline.start(self._obs)

    def pretrain(self, run: Runner) -> None:
        """Offline pretraining up to `offline.steps` (resumable), then the pretrained policy's evaluation at
        step 0: the starting point of the online phase."""
        if self.offline_updates < self.cfg.offline.steps:
            assert self.prior is not None

            def save(step: int) -> None:
                self.offline_updates = step
                run.save_checkpoint()
                if step == self.cfg.offline.steps:
                    run.save_extra("pretrained.pt", {"agent": self.agent.state_dict()})

            pretrain(self.cfg, self.agent, self.prior, self.offline_updates, run, save)
        if self.pretrained and self.env_steps == 0 and run.evals == 0:
            run._evaluate_and_log({}, 0.0)

    def advance(self) -> dict[str, Any]:
        cfg, env, agent, obs = self.cfg, self.env, self.agent, self._obs
        if obs is None:
            raise RuntimeError("call start(seed) first")
        n = env.num_envs
        if self.env_steps < cfg.train.learning_starts and not self.pretrained:
            action = torch.rand(n, env.action_dim, device=env.device) * 2 - 1
        else:
            action = agent.act(self.pipeline.acting(obs)).to(env.device)
        if self.jump_start is not None:
            action = self.jump_start.act(obs, action)
        next_obs, reward, terminated, truncated, info = env.step(action)
        done = terminated | truncated
        if self.jump_start is not None:  # an episode's score: its success where the task has one, else its return
            self.jump_start.step(done, info["success"].float() if "success" in info else info["episode_return"])
        # A pretrained agent's networks were fit to its dataset's statistics: moving them with online data changes
        # the WSRL warm-up policy without an update (70% -> 55% on reach). Frozen, with the temperature from 0.05
        # the dip once updates began was deeper; from 0.001 there was none (bench/results/wsrl_reach_temperature):
        # an option, which experiment=wsrl_reach sets
        self.pipeline.add_step(self.replay, Transitions(obs, action, reward, info["final_obs"], terminated, truncated),
                               next_obs, statistics=not (self.pretrained and cfg.offline.freeze_statistics))
        self._obs = next_obs
        self.env_steps += n
        metrics: dict[str, Any] = {"episode_return": Episodes(info["episode_return"], done)}
        if cfg.env.practice:  # what a person did for the run (robot time only: no person resets the scene otherwise)
            self._practice_counts[0] += done.sum()
            if "human_reset" in info:
                self._practice_counts[1] += info["human_reset"].sum()
            if "reset_steps" in info:
                self._practice_counts[2] += info["reset_steps"].sum()
            if "success" in info and "env_success" not in info:
                metrics["success"] = Episodes(info["success"].float(), done)
        if "env_success" in info:  # a learned reward (env.reward_classifier): its verdicts against the task's own
            learned, task = info["success"], info["env_success"]
            metrics |= {"success": Episodes(learned.float(), done),
                        "train_env_success_rate": Episodes(task.float(), done),
                        "train_reward_false_success": Episodes((learned & ~task).float(), done),
                        "train_reward_missed_success": Episodes((task & ~learned).float(), done)}
        batch_size = cfg.agent.optimiser.batch_size
        if self.env_steps >= cfg.train.learning_starts and len(self.replay) >= batch_size:
            agent.set_lr_progress(self.env_steps / cfg.train.steps)
            for _ in range(self.updates_per_step):
                update_metrics = agent.learn(self.replay, self.prior_replay, cfg.data.prior_fraction,
                                             actor=self.updates >= cfg.train.critic_warmup_updates)
                for k, v in update_metrics.items():
                    metrics.setdefault(k, []).append(v)
                self.updates += 1
        return metrics

    def eval_policy(self):
        return lambda o: self.agent.act(o, deterministic=True).to(self.env.device), None

    def log_fields(self) -> dict[str, float | None]:
        fields: dict[str, float | None] = {"updates": self.updates}
        if self.jump_start is not None:
            fields["jsrl_horizon"] = self.jump_start.horizon
        if self.cfg.env.practice:
            episodes, human_resets, reset_steps = self._practice_counts.tolist()
            fields |= {"train_episodes": episodes, "human_resets": human_resets, "reset_steps": reset_steps}
        return fields

    def finish(self, run: Runner) -> dict[str, Any]:
        if self.cfg.train.video:
            self._record_final_video(run)
        return {"best_eval_return": run.best_score}

    def _record_final_video(self, run: Runner) -> None:
        if run.eval_env is None:
            run.progress.message("no video: env.num_eval_envs=0 (one env per process)")
            return
        height, width = self.cfg.train.video_size
        path = run.run_dir / "videos" / "final.mp4"
        try:
            with make_env(self.cfg, 1, render=True, render_size=(height, width)) as video_env:
                info = record_video(
                    lambda o: self.agent.act(o, deterministic=True).to(video_env.device),
                    video_env,
                    path,
                    seed=self.cfg.seed + EVAL_SEED_OFFSET,
                    message=run.progress.message,
                    what="the final video",
                )
            run.progress.message(f"video: {path} (return {info['return']:.1f})")
        except Exception as e:  # rendering needs a GL context; never lose a finished run over it
            run.progress.message(f"warning: no video recorded ({type(e).__name__}: {e})")

    def state_dict(self) -> dict[str, Any]:
        state = {"env_steps": self.env_steps, "offline_updates": self.offline_updates, "updates": self.updates,
                 "agent": self.agent.state_dict(), "replay": self.replay.state_dict()}
        if self.jump_start is not None:
            state["jsrl"] = self.jump_start.state_dict()
        if self.cfg.env.practice:
            episodes, human_resets, reset_steps = self._practice_counts.tolist()
            state["practice"] = {"episodes": episodes, "human_resets": human_resets, "reset_steps": reset_steps}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.agent.load_state_dict(state["agent"])
        self.replay.load_state_dict(state["replay"])
        self.env_steps, self.updates = state["env_steps"], state["updates"]
        self.offline_updates = state.get("offline_updates", 0)
        if self.jump_start is not None and "jsrl" in state:
            self.jump_start.load_state_dict(state["jsrl"])
        practice = state.get("practice", {})
        self._practice_counts.copy_(torch.tensor([practice.get(key, 0) for key in ("episodes", "human_resets",
                                                                                  "reset_steps")]))

    @property
    def episodes(self) -> int:
        """env.practice: training episodes run so far."""
        return int(self._practice_counts[0])

    @property
    def human_resets(self) -> int:
        """env.practice: scenes a person had to put back so far."""
        return int(self._practice_counts[1])

    @property
    def reset_steps(self) -> int:
        """env.practice_reset=expert: control steps the reset controller ran so far (robot time between episodes)."""
        return int(self._practice_counts[2])


class Trainer(Runner):
    """One training run (`robot-rl train`, and `robot-rl finetune` from data): `OnlineSAC` driven by a Runner."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, resume: bool = False, command: str = "train",
                 method_name: str = "sac") -> None:
        prepare(cfg)
        self.cfg = cfg
        env = make_env(cfg, cfg.env.num_envs, learned_reward=True)
        eval_env = make_env(cfg, cfg.env.num_eval_envs) if cfg.env.num_eval_envs > 0 else None
        method = OnlineSAC(cfg, env)
        if not resume and cfg.offline.init:
            method.load_init_agent(Path(cfg.offline.init))
        t = cfg.train
        settings = RunSettings(
            steps=t.steps, eval_every=t.eval_every, checkpoint_every=t.checkpoint_every, seed=cfg.seed,
            command=command, method=method_name, title=cfg.env.spec, quiet=cfg.quiet,
            columns=list(dict.fromkeys([*METRIC_COLUMNS, *(LEARNED_REWARD_COLUMNS if cfg.env.reward_classifier else []),
                                        *(["jsrl_horizon"] if cfg.jsrl.guide else []),
                                        *(PRACTICE_COLUMNS if cfg.env.practice else [])])),
        )
        super().__init__(method, eval_env, run_dir, cfg, settings, resume=resume)

    # The method's parts, where callers (tests, bench) look for them.
    env = property(lambda self: self.method.env)
    agent = property(lambda self: self.method.agent)
    replay = property(lambda self: self.method.replay)
    prior = property(lambda self: self.method.prior)
    prior_replay = property(lambda self: self.method.prior_replay)
