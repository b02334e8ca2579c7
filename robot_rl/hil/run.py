"""`HilTrainer`: a `robot-rl hil-train` run built as `Trainer` and `Finetuner` are, a `robot_rl.runner.Runner` around
`robot_rl.hil.method.HILMethod` (one robot episode per step). Only the end is not the Runner's: a robot run holds the
channel, operator device, recording and maybe a Ray learner, which `run` releases however the run ends (`close`)."""

from __future__ import annotations

import contextlib
import math
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from robot_rl.checkpoint import CheckpointError
from robot_rl.cli.common import default_run_dir
from robot_rl.cli.hil_train import CAPACITY
from robot_rl.cli.robot import TELEOP_DEVICES
from robot_rl.datasets import DatasetError
from robot_rl.device import check_torch_device
from robot_rl.hil import connect
from robot_rl.hil.connect import CommandError
from robot_rl.hil.learner import HILLearner, LearnerConfig, LocalLink, build_policy, load_acting_weights
from robot_rl.hil.method import COLUMNS, HILMethod
from robot_rl.hil.session import Session
from robot_rl.policies.encoders import BackboneWeightsError, load_backbone
from robot_rl.replay import ReplayMemoryError
from robot_rl.runner import Runner, RunSettings
from robot_rl.signals import sigterm_as_interrupt


class HilTrainer(Runner):
    """One hil-train run from its keys (`robot_rl.cli.hil_train.HilTrainArgs` with `agent.*`): set up in the constructor
    (resuming `<run_dir>/checkpoints/latest.pt` when there is one), trained by `run`, released by `close`."""

    def __init__(self, args: Any) -> None:
        if args.device.split(":", 1)[0] in TELEOP_DEVICES:
            raise CommandError(f"device= is the torch device of the learner (cpu, cuda); the operator's device is "
                               f"teleop={args.device}")
        check_torch_device(args.device)
        if not (math.isfinite(args.intervention_penalty) and args.intervention_penalty >= 0):
            raise CommandError(f"intervention_penalty must be a finite number >= 0, got {args.intervention_penalty}")
        torch.set_num_threads(args.threads)
        # the Ray learner's handle is kept for the whole run: a Ray actor dies with its last handle
        self.args, self.teleop, self.writer, self.link, self.handle = args, None, None, None, None
        self.console = None  # robot_rl.console.Attached with console=true
        self.client = connect.client(args)
        try:
            self._setup()
        except BaseException:  # a failed set-up releases what it opened
            self.close()
            raise

    def _setup(self) -> None:
        """Everything built from the robot's spec, in the order its one-line errors are checked."""
        args = self.args
        self.spec = spec = self.client.spec()
        if args.pixels and not spec.cameras:
            raise CommandError(f"pixels=true: {spec.name} serves no cameras; serve them (simulated arm: serve-robot "
                               "pixels=true pixel_size=[84,84]; other drivers: driver_args.cameras) or set pixels=false "
                               "to learn from the state")
        # the learner reads all the robot's cameras (group -> [H, W, 3] as served) unless pixels=false
        self.cameras = {} if args.pixels is False else {c.group: list(c.shape) for c in spec.cameras}
        self.reward = connect.learned_reward(args, spec)
        run_dir = Path(args.run_dir) if args.run_dir else default_run_dir(f"hil_{spec.name.replace(':', '_')}")
        run_dir.mkdir(parents=True, exist_ok=True)
        self.cfg = self._learner_config()
        torch.manual_seed(args.seed)
        self.actor = build_policy(self.cfg)  # the actor, or from cameras actor + encoder (an ActorPolicy)
        learner = self._start_learner(run_dir)
        self.teleop = connect.operator_device(args, spec, "takeover")
        if args.record:
            self.writer = connect.dataset_writer(str(run_dir / "episodes"), spec, True, spec.name, bool(self.cameras))
        from robot_rl.console import attach

        on = self.console = attach(args, self.client, spec, self.teleop, self.writer, self.reward)
        # after the first weights, the learner sends all but a pretrained encoder's frozen backbone
        self.session = Session(on.client, policy=self._act, policy_loader=partial(load_acting_weights, self.actor),
                               teleop=on.teleop, link=self.link, writer=on.writer, rewind=args.rewind,
                               metrics_path=run_dir / "hil_metrics.csv", task=spec.name,
                               link_cameras=tuple(self.cameras), reward_model=on.reward_model,
                               intervention_penalty=args.intervention_penalty, success_frames=args.success_frames)
        on.bind(self.session)
        settings = RunSettings(steps=args.steps, eval_every=args.log_every, seed=args.seed, command="hil-train",
                               title=f"hil-train {spec.name}", checkpoint_every=args.steps,
                               checkpoint_every_s=args.checkpoint_every_s, score="autonomous_success",
                               score_tiebreak_lower="intervention_rate", means_on_host=True, columns=COLUMNS,
                               resume_hint=f"the same command with run_dir={run_dir}")
        latest = run_dir / "checkpoints" / "latest.pt"
        method = HILMethod(self.session, self.actor, self.cfg, learner, self.hold)
        try:
            super().__init__(method, None, run_dir, args, settings, resume=latest.is_file())
        except CheckpointError as e:
            raise CommandError(f"{latest}: {e}") from None
        self.session.log = self.progress.message
        if self.cameras and not args.distributed and args.device.startswith("cpu"):  # once the run is set up
            # measured: hil-train's default camera agent at 64x64 made the simulated arm run 0.68 steps per second
            # instead of 20 (bench/results/hil_pixels)
            print("robot-rl: note: learning from cameras on the CPU in the actor's process: the robot waits for every "
                  "update (about a second each at the default camera agent). Put the learner beside it with "
                  "distributed=true, or on a GPU with device=cuda; pixels=false learns from the state",
                  file=sys.stderr, flush=True)

    def _learner_config(self) -> LearnerConfig:
        """The learner's configuration from the keys and the robot's spec, checked here: before a learner (maybe a
        Ray actor) is built from it, with a pretrained encoder's weights file loaded once to name a bad one."""
        args, spec, sac = self.args, self.spec, self.args.agent
        capacity, prior_capacity = CAPACITY[bool(self.cameras)]
        mirror = args.mirror_demos or args.mirror_online
        if mirror and not spec.mirror_state_sign:
            key = "mirror_demos" if args.mirror_demos else "mirror_online"
            raise CommandError(f"{key}=true: robot {spec.name} declares no mirror symmetry (serve-robot driver=sim_arm "
                               f"task=push or pick_place does): set {key}=false")
        symmetry = dict(mirror_state_sign=list(spec.mirror_state_sign), mirror_action_sign=list(spec.mirror_action_sign),
                        mirror_cameras=[f"pixels/{name}" for name in spec.mirror_cameras]) if mirror else {}
        cfg = LearnerConfig(obs_dim=spec.state_dim, action_dim=spec.action_dim, sac=sac, utd=args.updates_per_transition,
                            learning_starts=args.learning_starts, seed=args.seed, device=args.device,
                            demo_path=args.demos, cameras=self.cameras, capacity=args.capacity or capacity,
                            prior_capacity=args.prior_capacity or prior_capacity, mirror_demos=args.mirror_demos,
                            mirror_online=args.mirror_online, **symmetry)
        try:
            sac.validate()
            cfg.validate()
            if self.cameras and sac.encoder.kind == "pretrained":
                load_backbone(sac.encoder.weights, sac.encoder.backbone)
        except BackboneWeightsError as e:
            raise CommandError(f"agent.encoder.weights: {e}") from None
        except ValueError as e:
            raise CommandError(str(e)) from None
        return cfg

    def _start_learner(self, run_dir: Path) -> HILLearner | None:
        """The learner in this process, trained as chunks arrive (`LocalLink`; the run checkpoints it with its
        buffers), or None with the learner on Ray (`distributed=true`)."""
        if self.args.distributed:
            self._start_ray_learner(run_dir)
            return None
        try:
            learner = HILLearner(self.cfg)
        except (ReplayMemoryError, DatasetError) as e:  # a buffer too big, a demo dataset that does not fit
            raise CommandError(str(e)) from None
        self.link = LocalLink(learner)
        return learner

    def _start_ray_learner(self, run_dir: Path) -> None:
        """The learner as a Ray actor (checkpointing itself in `<run_dir>/learner`), answering before the loop starts:
        a learner takes seconds to come up, longer than the link's call deadline."""
        import ray

        from robot_rl.hil.distributed import RayLink, connect_learner, start_learner

        args = self.args
        if args.ray_address is None:
            # Ray runs its workers at niceness 15, so a learner started here got what CPU the robot loop and every
            # other process left: 385 updates for 1,975 transitions beside two training runs on 2 cores, where the
            # learner in this process made 1,720. A cluster joined by ray_address keeps its own setting.
            os.environ.setdefault("RAY_worker_niceness", "0")
        try:
            ray.init(address=args.ray_address, include_dashboard=False, log_to_driver=False,
                     ignore_reinit_error=True, namespace="robot-rl")
        except Exception as e:  # Ray raises a bare Exception when its node does not come up
            raise CommandError(f"could not start or join Ray ({args.ray_address or 'local'}): {e}") from None
        self.handle = start_learner(args.learner_name, self.cfg, run_dir / "learner", namespace="robot-rl")
        connect_learner(args.learner_name, "robot-rl", timeout_s=120.0)
        self.link = RayLink(args.learner_name, "robot-rl", handle=self.handle)

    def _act(self, obs: Any) -> np.ndarray:
        """The actor's action: from cameras on the dict of the state and each camera group the learner reads (uint8
        frames), else on the state (also of a robot with cameras under pixels=false)."""
        if self.cameras:  # np.array copies: decoded frames are read-only views, which torch will not wrap
            batch = {k: torch.from_numpy(np.array(obs[k]))[None] for k in ("state", *self.cameras)}
            batch["state"] = batch["state"].float()
            return self.actor.act(batch)[0].numpy()
        with torch.no_grad():
            state = obs["state"] if isinstance(obs, dict) else obs
            return self.actor(torch.as_tensor(state, dtype=torch.float32)[None])[0][0].numpy()

    def header(self) -> str:
        """The run's first line: robot, rate, steps, where the learner runs and what it reads, operator, directory."""
        args, spec = self.args, self.spec
        mode = f"learner on Ray ({args.learner_name}, {args.device})" if args.distributed else "learner in this process"
        if self.cameras:
            mode += "; from cameras " + ", ".join(f"{g} {h}x{w}" for g, (h, w, _) in self.cameras.items())
        if self.reward is not None:
            mode += f"; reward from the classifier {args.reward_classifier}"
        return (f"hil-train on {spec.name} at {spec.control_hz:g} Hz for {args.steps:,} steps ({mode}; operator: "
                f"{args.teleop or 'none'}); run directory {self.run_dir}")

    def run(self) -> dict[str, Any]:
        """Connect the operator's device, run the Runner's loop, then hold the robot and `close`, however it ended
        (on Ctrl-C or SIGTERM the Runner has saved the run and re-raises KeyboardInterrupt: exit 130)."""
        try:
            with sigterm_as_interrupt():
                connect.connect_device(self.teleop)
            return super().run()
        finally:
            self.hold()
            self.close()

    def hold(self) -> None:
        """Hold the robot still (interrupted mid-episode, before the checkpoint; at the end); the robot side holds by
        itself when commands stop (its watchdog), so a failure is ignored."""
        with contextlib.suppress(Exception):
            self.client.step(None)

    def close(self) -> None:
        """Release the operator's device, the recording, the Ray learner and the channel, whichever were set up."""
        if self.console is not None:
            self.console.close()
        if self.teleop is not None:
            self.teleop.disconnect()
        if self.writer is not None:
            self.writer.close()
        if self.handle is not None:
            import ray

            if self.link is not None:
                self.link.flush()
            try:
                ray.get(self.handle.stop.remote(save=True), timeout=60)
            except Exception as e:  # the learner may already be gone; its last periodic checkpoint stands
                print(f"warning: could not stop the learner cleanly: {e}", file=sys.stderr)
            ray.shutdown()
        self.client.close()
