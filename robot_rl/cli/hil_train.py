"""`robot-rl hil-train`: human-in-the-loop RL on a robot (HIL-SERL). Its keys are here; the run is
`robot_rl.hil.run.HilTrainer`."""

from __future__ import annotations

from dataclasses import dataclass, field, make_dataclass
from functools import cache

from robot_rl.cli.robot import TELEOP_DEVICES, RobotArgs, robot_command
from robot_rl.fields import help_field as _help

# The arm presets' SAC settings (configs/experiment/rlpd_push.yaml and friends) but their gamma of 0.95: on the
# bridge push it changed nothing within 12k steps (bench/results/hil_push/gamma0.95, one seed), so 0.99 stays.
_HIL_AGENT = {
    "network": {"actor_layer_norm": True, "critic_layer_norm": True},
    "critic": {"num": 2, "backup_entropy": False},
    "exploration": {"init_temperature": 0.05, "target_entropy_scale": 0.5},
}


# hil-train's default replay capacities (online, prior), state / cameras: a camera transition keeps its frames
# (two 84x84 cameras: 42 kB, up to twice, see robot_rl.hil.learner), so it gets 10x fewer.
CAPACITY = {False: (1_000_000, 200_000), True: (100_000, 50_000)}


@dataclass
class HilTrainArgs(RobotArgs):
    teleop: str | None = _help(
        "scripted", f"operator device: {', '.join(TELEOP_DEVICES)} (null: none; scripted, the ideal operator, and person, a simulated person, take over by themselves)"
    )
    steps: int = _help(6000, "env steps (control ticks with an action) to run")
    run_dir: str | None = _help(None, "run directory (default: runs/<date>_hil_<robot name>)")
    demos: str | None = _help(
        None, "dataset that pre-fills the prior buffer (learning from cameras: with their videos at the served sizes, "
              "e.g. an earlier run's <run_dir>/episodes, or robot-rl collect in the <task>-pixels task)"
    )
    mirror_demos: bool = _help(
        False, "also learn from the demos' mirror images where the robot declares a symmetry (RobotSpec."
               "mirror_state_sign; serve-robot driver=sim_arm task=push does), as train's data.mirror; from cameras "
               "only those the robot declares mirrored (RobotSpec.mirror_cameras; sim_arm's front and wrist)"
    )
    mirror_online: bool = _help(
        False, "also store the mirror image of every transition received (interventions included), as train's "
               "train.mirror_online (camera frames as mirror_demos)"
    )
    intervention_penalty: float = _help(
        0.0, "subtracted from the reward of the policy's last step before each operator takeover, in what the learner "
             "gets (RLIF's intervention signal beside the task reward; the recorded episodes keep the robot's reward)"
    )
    pixels: bool | None = _help(
        None, "learn from the robot's cameras (a DrQ pixel agent on pixels/<camera> at the served sizes, beside the "
              "state): null = whenever the robot serves cameras, true = require them, false = the state only"
    )
    capacity: int | None = _help(
        None, f"online replay capacity in transitions (default {CAPACITY[False][0]:,}; from cameras "
              f"{CAPACITY[True][0]:,})"
    )
    prior_capacity: int | None = _help(
        None, f"prior (demos + interventions) replay capacity (default {CAPACITY[False][1]:,}; from cameras "
              f"{CAPACITY[True][1]:,})"
    )
    record: bool = _help(True, "record the episodes to <run_dir>/episodes (with camera videos when learning from them)")
    rewind: bool = _help(False, "RaC-style rewind segments (operator event REWIND)")
    updates_per_transition: float = _help(
        1.0, "learner updates (each of agent.optimiser.utd critic steps) per transition received; may be fractional"
    )
    learning_starts: int = _help(300, "transitions before the first update")
    seed: int = _help(0, "seed of the networks, the learner's sampling and the episodes")
    threads: int = _help(1, "torch threads of this process")
    log_every: int = _help(500, "env steps between rows of metrics.csv (the training episodes' means)")
    checkpoint_every_s: float = _help(
        120.0, "save the run (<run_dir>/checkpoints/latest.pt, with the learner) this often, and at the end"
    )
    device: str = _help("cpu", "torch device of the learner (cpu, cuda, cuda:1)")
    distributed: bool = _help(
        False, "run the learner as a Ray actor (another process or machine) instead of in this process"
    )
    ray_address: str | None = _help(None, "Ray cluster to join (default: start a local one)")
    learner_name: str = _help("robot-rl-learner", "name of the Ray learner actor")
    reward_classifier: str | None = _help(
        None, "a success classifier directory (robot-rl classifier): this process judges each observation's frames "
              "and the transitions' reward and success come from it instead of the robot's (success ends the "
              "episode); the robot's own stay in hil_metrics.csv as driver_return, driver_success"
    )
    reward_classifier_threshold: float = _help(0.5, "classifier probability at or above which a frame is a success")
    reward_classifier_consecutive: int = _help(1, "success needs this many steps in a row above the threshold")
    # agent: SACConfig with the arm presets' settings (_HIL_AGENT), added by hil_train_args(): SACConfig imports
    # torch, which serve-robot should not wait for.


@cache
def hil_train_args() -> type:
    """The keys of ``hil-train``: HilTrainArgs plus ``agent.<group>.<key>`` (train's SACConfig, the arm presets'
    defaults)."""
    from robot_rl.agents.sac import SACConfig

    agent = field(default_factory=lambda: SACConfig.from_dict(_HIL_AGENT), metadata={"help": "SAC settings, as in train"})
    return make_dataclass("HilTrainArgs", [("agent", SACConfig, agent)], bases=(HilTrainArgs,))


def hil_train(args: HilTrainArgs) -> int:
    """Human-in-the-loop RL (HIL-SERL): a learning policy, an operator who takes over, interventions into the
    online and the prior buffer; the run is `robot_rl.hil.run.HilTrainer` (on Ctrl-C or SIGTERM it holds the robot,
    saves and raises KeyboardInterrupt: exit 130, as for every robot command)."""
    from robot_rl.hil.run import HilTrainer

    trainer = HilTrainer(args)
    print(trainer.header(), flush=True)
    trainer.run()
    return 0


COMMAND = robot_command(
    "hil-train", "learn on the robot with an operator who takes over (HIL-SERL)",
    "Human-in-the-loop RL (HIL-SERL): a learning policy, an operator who takes over, interventions into the online "
    "and the prior buffer.", hil_train_args, hil_train,
    ["robot-rl hil-train robot=127.0.0.1:50051 teleop=scripted steps=6000 run_dir=runs/hil_reach",
     "robot-rl hil-train teleop=gamepad agent.optimiser.utd=2 agent.optimiser.batch_size=128 demos=data/demos",
     "robot-rl hil-train distributed=true device=cuda ray_address=auto",
     "robot-rl hil-train robot=127.0.0.1:50051 demos=data/pixel_demos agent.optimiser.batch_size=64  # from cameras",
     "robot-rl hil-train reward_classifier=runs/clf reward_classifier_consecutive=3  # reward from robot-rl classifier"],
)
