"""`robot-rl eval`: deterministic episodes of a run's checkpoint (`run=`) or of a saved policy directory
(`policy=`). A run's run.json says which method wrote it, and so how its checkpoint is rebuilt."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

from robot_rl.cli.common import Command, check_env_spec, parse_args
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help


@dataclass
class EvalEnvArgs:
    spec: str = _help("", "policy=: environment spec to evaluate in (e.g. arm:push-sparse); run=: the run's own")


@dataclass
class EvalArgs:
    run: str = _help("", "run directory to evaluate (its checkpoints/<checkpoint>.pt and config.yaml)")
    policy: str = _help("", "or a saved policy directory (robot-rl bc, ReinFlow/DPPO, robot-rl export); needs env.spec=")
    env: EvalEnvArgs = field(default_factory=EvalEnvArgs)
    checkpoint: str = _help("best", "run=: best or latest")
    episodes: int = _help(10, "evaluation episodes (policy=: one in each of this many parallel envs)")
    video: bool = _help(True, "run=: write videos/eval_<checkpoint>.mp4 in the run directory")
    seed: int | None = _help(None, "seed (default: run=: the run's evaluation seed; policy=: 0), + env index")
    device: str = _help("cpu", "torch device of the policy (cpu, cuda)")
    allow_other_task: bool = _help(False, "policy=: run it on env.spec even if its config.json names another task")


def run(args: list[str]) -> int:
    from robot_rl import checkpoint
    from robot_rl.cli.finetune import POLICY_METHODS, read_run_record
    from robot_rl.config import ConfigError, load_run_config
    from robot_rl.evaluation import MAX_EVAL_ENVS, evaluate, record_video
    from robot_rl.trainer import EVAL_SEED_OFFSET, build_agent, make_env

    check_env_spec(args, "eval")
    a: EvalArgs = parse_args(EvalArgs, args, "eval")
    if bool(a.run) == bool(a.policy):
        raise UserError("eval needs run=<run dir>, or policy=<policy dir> env.spec=<spec>")
    if a.policy and not a.env.spec:
        raise UserError("eval policy=<dir> needs env.spec=<spec>, e.g. env.spec=arm:push-sparse")
    if a.run and a.env.spec:
        raise UserError("eval run=<run dir> evaluates in the run's own environment; env.spec= is for policy=")
    if a.checkpoint not in {"best", "latest"}:
        raise UserError(f"checkpoint must be best or latest, not '{a.checkpoint}'")
    if a.episodes < 1:
        raise UserError("episodes must be >= 1")
    if a.policy:
        return _eval_policy_dir(a)
    run_dir = Path(a.run)
    if (run_dir / "bc_config.json").is_file() and not (run_dir / "config.yaml").is_file():
        bc = json.loads((run_dir / "bc_config.json").read_text())
        spec = bc.get("env", {}).get("spec") or "<the task's env spec>"
        raise UserError(f"{run_dir} is a behaviour-cloning run (robot-rl bc): evaluate its policy with "
                        f"robot-rl eval policy={run_dir / 'policy'} env.spec={spec}")
    record = read_run_record(run_dir)
    if (record or {}).get("method") in POLICY_METHODS:
        return _eval_finetune_run(a, run_dir)
    try:
        cfg = load_run_config(run_dir)
    except ConfigError as e:
        if record is not None or not (run_dir / "config.yaml").is_file():
            raise
        raise UserError(f"{e} ({run_dir} has no run.json: a finetune run from before it records its method when "
                        f"resumed once with robot-rl finetune resume={run_dir} method=<its method>)") from None
    cfg.device = a.device
    ckpt = run_dir / "checkpoints" / f"{a.checkpoint}.pt"
    if a.checkpoint == "best" and not ckpt.is_file() and ckpt.with_name("latest.pt").is_file():
        raise UserError(f"{run_dir} has no best.pt yet (written at its first evaluation); evaluate its latest.pt "
                        f"with checkpoint=latest")
    state = checkpoint.load(ckpt)
    seed = cfg.seed + EVAL_SEED_OFFSET if a.seed is None else a.seed
    with make_env(cfg, min(a.episodes, MAX_EVAL_ENVS)) as env:
        agent = build_agent(cfg, env)
        agent.load_state_dict(state["agent"])
        result = evaluate(lambda o: agent.act(o, deterministic=True).to(env.device), env, seed=seed,
                          episodes=a.episodes, message=print)
    _print_eval(f"{cfg.env.spec} | {a.checkpoint} checkpoint (env step {state['env_steps']:,})", a.episodes, result)
    if a.video:
        height, width = cfg.train.video_size
        path = run_dir / "videos" / f"eval_{a.checkpoint}.mp4"
        with make_env(cfg, 1, render=True, render_size=(height, width)) as video_env:
            record_video(lambda o: agent.act(o, deterministic=True).to(video_env.device), video_env, path, seed,
                         message=lambda m: print(m, flush=True), what=f"videos/{path.name}")
        print(f"video: {path}", flush=True)
    return 0


def _print_eval(what: str, episodes: int, result: dict) -> None:
    """The one result line of `robot-rl eval run=`: return mean ± std, and the success rate where defined."""
    line = (f"{what} | {episodes} episodes | return {result['eval_return_mean']:.2f} ± "
            f"{result['eval_return_std']:.2f}")
    if result["success_rate"] is not None:
        line += f" | success rate {result['success_rate']:.0%}"
    print(line, flush=True)


def _eval_finetune_run(a: EvalArgs, run_dir: Path) -> int:
    """`eval run=` of a `finetune method=...` run: the method's own evaluation policy (residual: base plus
    correction; DSRL: noise actor through the base; ReinFlow/DPPO: the fine-tuned chain) from its checkpoint."""
    from robot_rl import checkpoint, envs
    from robot_rl.config import load_run_config
    from robot_rl.evaluation import MAX_EVAL_ENVS, evaluate
    from robot_rl.finetune.config import FinetuneConfig
    from robot_rl.finetune.loop import build_method
    from robot_rl.policies.io import load_policy
    from robot_rl.runner import EVAL_SEED_OFFSET

    cfg = load_run_config(run_dir, schema=FinetuneConfig)
    cfg.device = a.device
    ckpt = run_dir / "checkpoints" / f"{a.checkpoint}.pt"
    state = checkpoint.load(ckpt)
    state = state.get("method", state)  # runs written before the Runner nested the method's state
    n = min(a.episodes, MAX_EVAL_ENVS)
    cfg.replay_capacity = max(n, 1)  # nothing is collected: the replay only has to exist
    seed = cfg.seed + EVAL_SEED_OFFSET if a.seed is None else a.seed
    with envs.make(cfg.env.spec, num_envs=n, device=cfg.device, max_episode_steps=cfg.env.max_episode_steps) as env:
        method = build_method(cfg, load_policy(cfg.base_policy, device=cfg.device), env)
        replay = getattr(method, "replay", None)
        if "replay" not in state and replay is not None:  # best.pt leaves the replay out
            state = {**state, "replay": replay.state_dict()}
        method.load_state_dict(state)
        act, on_done = method.eval_policy()
        result = evaluate(act, env, seed=seed, on_done=on_done, episodes=a.episodes, message=print)
    what = f"{cfg.env.spec} | {cfg.method} fine-tuning, {a.checkpoint} checkpoint (env step {state['env_steps']:,})"
    _print_eval(what, a.episodes, result)
    if a.video:
        print("(no video for fine-tuning runs: `robot-rl eval policy=<run>/policy` records ReinFlow/DPPO policies "
              "through their saved policy directory)", flush=True)
    return 0


def _eval_policy_dir(a: EvalArgs) -> int:
    from robot_rl.api import delay_text
    from robot_rl.bc import evaluate_policy
    from robot_rl.envs.delay import ActionDelay
    from robot_rl.evaluation import MAX_EVAL_ENVS
    from robot_rl.export import check_task
    from robot_rl.policies.io import load_policy, read_metadata

    check_task(a.policy, a.env.spec, a.allow_other_task)
    policy = load_policy(a.policy, device=a.device)
    # A policy trained under env_delay is evaluated under the same delay (a delay-aware one reads the actions in
    # flight: without the delay its input would not even fit).
    trained = read_metadata(a.policy).get("delay")
    delay = ActionDelay.from_dict(trained) if trained else None
    result = evaluate_policy(policy, a.env.spec, num_envs=min(a.episodes, MAX_EVAL_ENVS),
                             seed=0 if a.seed is None else a.seed, episodes=a.episodes, message=print, delay=delay)
    line = f"{a.env.spec} | {a.policy} | {a.episodes} episodes | return {result['return_mean']:.2f}"
    if trained:
        line += f" | under its trained delay of {delay_text(trained)}"
    line += f" | length {result['length_mean']:.1f}"
    if result["success_rate"] is not None:
        line += f" | success rate {result['success_rate']:.0%}"
    print(line, flush=True)
    return 0


COMMAND = Command(
    name="eval", summary="evaluate a run's checkpoint or a saved policy directory", run=run, schema=lambda: EvalArgs,
    usage=["usage: robot-rl eval run=<run dir> [checkpoint=best|latest] [episodes=10] [video=true] [seed=N] [device=cpu]",
           "       robot-rl eval policy=<policy dir> env.spec=<spec> [episodes=10] [seed=N] [device=cpu]"],
    about=[
        "run=: runs deterministic episodes of a trained agent, prints mean and std return (and success rate",
        "where the task defines it), and writes videos/eval_<checkpoint>.mp4 in the run directory.",
        "policy=: the same for a saved policy directory (robot-rl bc, ReinFlow/DPPO, any run via robot-rl export), one",
        "episode in each of `episodes` parallel envs of env.spec, seeded with seed (default 0) + env index.",
    ],
    examples=["robot-rl eval run=runs/<run dir> episodes=10 checkpoint=latest",
              "robot-rl eval policy=runs/<run>/policy env.spec=arm:push-sparse episodes=100"],
)
