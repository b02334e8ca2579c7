"""`robot-rl train`: SAC (with the RLPD options) on a batched environment, one run directory per run; and the
TrainConfig run that `robot-rl finetune method=wsrl` shares with it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from robot_rl.cli.common import Command, check_overrides, new_run_dir, resumed, run_seed_list, setting, slug
from robot_rl.errors import UserError

if TYPE_CHECKING:
    from robot_rl.agents.sac import SACConfig

EXAMPLES = [
    "robot-rl train                                          # SAC on Pendulum-v1, a few minutes",
    "robot-rl train experiment=cartpole_swingup agent=rlpd",
    "robot-rl train env.spec=dmc:cartpole-swingup agent.optimiser.utd=4 train.steps=100000 seed=3",
    "robot-rl train experiment=rlpd_push                     # SAC + 20 demos (data/push_demos), sparse push",
    "robot-rl train resume=runs/<run dir> [train.steps=...]   # continue from the latest checkpoint",
]


def train_config_run(overrides: list[str], command: str, method: str) -> int:
    """A TrainConfig run (`train`, `finetune method=wsrl`), or a seed list of them."""
    from robot_rl.config import compose_train_config
    from robot_rl.seeds import split_seed_overrides

    seeds, jobs, rest = split_seed_overrides(overrides)
    if seeds is None:
        return _train(rest, command, method)
    check_overrides(rest)
    cfg = compose_train_config(rest)
    cfg.validate()
    return run_seed_list(command, rest, seeds, jobs, cfg.train.steps, cfg.name or slug(cfg.env.spec), cfg.run_dir)


def _train(overrides: list[str], command: str, method: str) -> int:
    from robot_rl.config import compose_train_config
    from robot_rl.device import bf16_cpu_hint
    from robot_rl.trainer import Trainer

    check_overrides(overrides)
    if resume := setting(overrides, "resume"):
        run_dir, cfg = resumed(resume, overrides)
    else:
        cfg = compose_train_config(overrides)
        run_dir = new_run_dir(cfg.run_dir, cfg.name or slug(cfg.env.spec))
        cfg.run_dir = str(run_dir)
    if method == "wsrl" and not (cfg.data.path or cfg.offline.init):
        raise UserError(
            "finetune starts from data or a pretrained agent: pick an experiment (e.g. experiment=wsrl_push) or set "
            "data.path=<dataset> offline.steps=N, or offline.init=<checkpoint.pt>"
        )

    trainer = Trainer(cfg, run_dir, resume=bool(resume), command=command, method_name=method)
    if not cfg.quiet:
        print(f"run directory: {run_dir}", flush=True)
        print(
            f"training {cfg.env.spec} for {cfg.train.steps:,} env steps "
            f"({_describe_agent(cfg.agent)}, {cfg.env.num_envs} env(s), {cfg.device})",
            flush=True,
        )
        if hint := bf16_cpu_hint(cfg.device, cfg.agent.optimiser.bf16, cfg.train.steps):
            print(hint, flush=True)
    summary = trainer.run()
    best = summary["best_eval_return"]
    repeat = cfg.env.action_repeat
    repeated = f" (x{repeat} action repeat = {summary['env_steps'] * repeat:,} control steps)" if repeat > 1 else ""
    print(
        f"done: {summary['env_steps']:,} env steps{repeated} in {summary['wall_time_s']:.0f}s | "
        f"last eval return {summary['last_eval_return']:.1f} | best {best:.1f} | outputs in {run_dir}",
        flush=True,
    )
    return 0


def _describe_agent(agent: SACConfig) -> str:
    """One phrase for the run header: which networks and critic, how many critics and updates per step."""
    net, critic, opt = agent.network, agent.critic, agent.optimiser
    if net.kind == "hyper":
        support = f"{critic.num_atoms}-atom" if critic.num_atoms > 1 else "scalar"
        nets = f"SAC, hyperspherical {net.critic_width}-wide critic ({support})"
    else:
        nets = f"SAC, MLP {'x'.join(map(str, net.hidden_dims))} critic"
    count = "1 critic" if critic.num == 1 else f"{critic.num} critics"
    precision = "bf16" if opt.bf16 else "fp32"
    return f"{nets}: {count}, UTD {opt.utd}, {precision}{', compiled' if opt.compile else ''}"


def _resolved_train_config(settings: list[str]) -> tuple[Any, str]:
    """The config a `train` run with `settings` would write to its config.yaml, for `--help`: the presets composed,
    then what the run resolves from its env (the critic count: `resolve_critics`), from a one-env instance of it.
    Returns (config, a note for the help); with settings that do not compose, the schema's defaults and why."""
    from robot_rl.agents.sac import resolve_critics
    from robot_rl.config import TrainConfig, compose_train_config
    from robot_rl.trainer import make_env

    try:
        cfg = compose_train_config([s for s in settings if not s.startswith(("resume=", "run_dir="))])
    except Exception as e:  # noqa: BLE001 - help must print whatever the settings are
        return TrainConfig(), f"(these settings do not compose: {e}; showing the schema's defaults)"
    try:
        env = make_env(cfg, num_envs=1)
        try:
            cfg.agent = resolve_critics(cfg.agent, env.can_terminate)
        finally:
            env.close()
    except Exception as e:  # noqa: BLE001 - an env that cannot be built here still gets its help
        return cfg, f"(agent.critic.num=null resolves from the env, which could not be built here: {e})"
    return cfg, ""


def train_help(settings: list[str] | None, command: str = "train", intro: list[str] | None = None,
               examples: list[str] = EXAMPLES) -> str:
    """`train --help` (and the second half of `finetune --help`): the keys with the values a run with `settings`
    would use, as its config.yaml would record them (tests: help equals a default run's config.yaml)."""
    from robot_rl.cli.common import page
    from robot_rl.config import TrainConfig, presets

    if settings is None:
        cfg, note = TrainConfig(), "(the schema's defaults; presets change many: robot-rl train [presets] --help)"
    else:
        cfg, note = _resolved_train_config(settings)
    given = " ".join(settings or []) or "a default run"
    about = [
        *(intro or [
            "Trains SAC (with the RLPD options) on a batched environment and writes a run directory:",
            "config.yaml, run.json, metrics.csv, tensorboard/ (or wandb/: logger=wandb), checkpoints/{latest,best}.pt,",
            "learning_curve.png, videos/.",
        ]),
        "",
        "Presets:",
        f"  env=        {', '.join(presets('env'))}",
        f"  agent=      {', '.join(presets('agent'))}",
        f"  experiment= {', '.join(presets('experiment'))}   (env + training length together)",
    ]
    heading = f"Keys, with the values {given} uses{':' if not note else ' ' + note + ':'}"
    return page([f"usage: robot-rl {command} [group=preset ...] [key=value ...]"], about, examples, TrainConfig,
                heading=heading, instance=cfg)


COMMAND = Command(
    name="train", summary="train an agent (SAC, RLPD; from the state or cameras)", examples=EXAMPLES,
    run=lambda overrides: train_config_run(overrides, "train", "sac"),  # one run, or a seed list
    help=lambda settings: train_help([s for s in settings if s not in {"-h", "--help"}]),
)
