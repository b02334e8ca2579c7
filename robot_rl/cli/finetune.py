"""`robot-rl finetune`: one command, several methods registered by name. `wsrl` is offline-to-online SAC from a
dataset (the keys of `train`, TrainConfig); `residual`, `dsrl`, `reinflow`, `dppo` and `rl100` fine-tune a saved BC
policy (FinetuneConfig). The method comes from the command line (`method=`, or the `experiment=` preset) or, on
`resume=`, from the run's run.json: nothing is guessed from which keys a config happens to have.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from robot_rl.cli.common import Command, check_overrides, new_run_dir, resumed, run_seed_list, setting, slug
from robot_rl.cli.train import train_config_run, train_help
from robot_rl.errors import UserError

#: The methods by name. wsrl runs on TrainConfig (train's keys: `train.steps=`, ...); the others on FinetuneConfig
#: (`steps=`, ...); `steps`, `eval_every` and `replay_capacity` take either spelling with every method.
METHODS = {
    "wsrl": "offline-to-online SAC from a dataset (Cal-QL/CQL/IQL pretraining, then WSRL); train's keys",
    "residual": "SAC on a bounded correction of the frozen policy (ResFiT); any policy; demos via data=",
    "dsrl": "SAC in the initial-noise space of a frozen diffusion or flow policy",
    "reinflow": "PPO on a flow policy with learned noise at each Euler step (many envs)",
    "dppo": "PPO over the last DDIM steps of a diffusion policy (many envs)",
    "rl100": "RL-100: rounds of offline improvement on the policy's rollouts, each kept only if an OPE says so",
}
POLICY_METHODS = [m for m in METHODS if m != "wsrl"]
LOOP_KEYS = ("steps", "eval_every", "replay_capacity")


def run(overrides: list[str]) -> int:
    """`robot-rl finetune`: the chosen method's run, one or a seed list."""
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig
    from robot_rl.seeds import split_seed_overrides

    method, resume = choose_method(overrides), setting(overrides, "resume")
    overrides = _loop_spelling([o for o in overrides if not o.startswith("method=")], "train." * (method == "wsrl"))
    if method == "wsrl":
        if setting(overrides, "base_policy") is not None:
            raise UserError(f"base_policy= is read by method=<{'|'.join(POLICY_METHODS)}>; method=wsrl (the default "
                            "without method= or a preset) fine-tunes from data: add method=<...>")
        return train_config_run(overrides, "finetune", method)
    overrides = [f"finetune={o.split('=', 1)[1]}" if o.startswith("experiment=") else o for o in overrides]
    if resume is None:
        overrides.append(f"method={method}")
    seeds, jobs, rest = split_seed_overrides(overrides)
    check_overrides(rest)
    if seeds is None:
        return _finetune_policy(rest)
    cfg = compose_config("finetune", FinetuneConfig, rest)
    return run_seed_list("finetune", rest, seeds, jobs, cfg.steps, cfg.name or f"{method}-{slug(cfg.env.spec)}",
                         cfg.run_dir)


def read_run_record(run_dir: Path) -> dict | None:
    """The run's run.json (`robot_rl.runner.RUN_RECORD`: the command and method that wrote it), or None."""
    import json

    from robot_rl.runner import RUN_RECORD

    try:
        return json.loads((Path(run_dir) / RUN_RECORD).read_text())
    except (OSError, ValueError):
        return None


def choose_method(overrides: list[str]) -> str:
    """The method of this command line: a resumed run's own (its run.json), else `method=`, else the preset's,
    else wsrl."""
    from importlib.resources import files

    from omegaconf import OmegaConf

    from robot_rl.config import presets

    given, resume = setting(overrides, "method"), setting(overrides, "resume")
    if given is not None and given not in METHODS:
        raise UserError(f"method={given}: choose one of {', '.join(METHODS)}")
    if resume is not None:
        record = read_run_record(Path(resume))
        if record is None:
            if given is None and (Path(resume) / "config.yaml").is_file():
                raise UserError(f"{resume} has no run.json saying which method wrote it: resume it with "
                                f"method=<{'|'.join(METHODS)}> (the run's method)")
            return given or "wsrl"  # not a run directory: load_run_config says so
        saved = record.get("method")
        if record.get("command") != "finetune" or saved not in METHODS:
            raise UserError(f"{resume} is a {record.get('command')} run: resume it with "
                            f"robot-rl {record.get('command')} resume={resume}")
        if given is not None and given != saved:
            raise UserError(f"{resume} is a method={saved} run; resume it without method={given}")
        return saved
    if given is not None:
        return given
    preset = setting(overrides, "experiment") or setting(overrides, "finetune")
    if preset in presets("finetune"):  # the `method:` the configs/finetune preset declares
        text = files("robot_rl.configs").joinpath("finetune", f"{preset}.yaml").read_text()
        return str(OmegaConf.create(text).get("method", "residual"))
    return "wsrl"


def _loop_spelling(overrides: list[str], prefix: str) -> list[str]:
    """`train.steps=` (as in train) and `steps=` mean the same in finetune: the spelling of the method's schema."""
    out = []
    for o in overrides:
        key, sep, value = o.partition("=")
        bare = key.lstrip("+").removeprefix("train.")
        if sep and bare in LOOP_KEYS:
            o = f"{prefix}{bare}={value}"
        out.append(o)
    return out


def _finetune_policy(overrides: list[str]) -> int:
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig
    from robot_rl.finetune.loop import Finetuner

    if resume := setting(overrides, "resume"):
        run_dir, cfg = resumed(resume, overrides, FinetuneConfig)
    else:
        cfg = compose_config("finetune", FinetuneConfig, overrides)
        if not Path(cfg.base_policy).is_dir():
            raise UserError(
                f"base_policy {cfg.base_policy} does not exist; train one with robot-rl bc (it writes "
                "<run_dir>/policy), see the preset's header for the commands"
            )
        run_dir = new_run_dir(cfg.run_dir, cfg.name or f"{cfg.method}-{slug(cfg.env.spec)}")
        cfg.run_dir = str(run_dir)
    finetuner = Finetuner(cfg, run_dir, resume=bool(resume))
    if not cfg.quiet:
        print(f"run directory: {run_dir}", flush=True)
        length = (f"{cfg.rl100.rounds} rounds of {cfg.rl100.episodes_per_round} episodes" if cfg.method == "rl100"
                  else f"{cfg.steps:,} env steps")
        print(f"fine-tuning {cfg.base_policy} with {cfg.method} on {cfg.env.spec} for {length} "
              f"({cfg.env.num_envs} env(s), {cfg.device})", flush=True)
    summary = finetuner.run()
    last = summary["last"] or {}
    success = "" if last.get("success_rate") is None else f" | last success rate {last['success_rate']:.0%}"
    saved = f" | policy in {summary['policy_dir']}" if summary["policy_dir"] else ""
    print(f"done: {summary['env_steps']:,} env steps in {summary['wall_time_s']:.0f}s | last eval return "
          f"{last.get('eval_return_mean', float('nan')):.1f}{success}{saved} | outputs in {run_dir}", flush=True)
    return 0


EXAMPLES = [
    "robot-rl finetune experiment=residual_push                  # a BC policy (robot-rl bc), the preset's base",
    "robot-rl finetune method=dsrl base_policy=runs/<bc run>/policy env.spec=arm:push-sparse steps=20000",
    "robot-rl finetune method=rl100 base_policy=runs/<bc run>/policy data=<its demos> env.spec=arm:push-sparse "
    "rl100.rounds=3",
    "robot-rl finetune experiment=wsrl_push                      # method=wsrl: Cal-QL, warm-up, online SAC",
    "robot-rl finetune experiment=wsrl_push train.learning_starts=0  # naive fine-tuning",
    "robot-rl finetune experiment=wsrl_push offline.algorithm=iql",
    "robot-rl finetune experiment=wsrl_push offline.steps=0 offline.init=runs/<run>/checkpoints/pretrained.pt",
    "robot-rl finetune resume=runs/<run dir> steps=100000        # the run's own method (its run.json)",
]


def _resolved_policy_config(settings: list[str]) -> tuple[str, Any]:
    """`--help`'s heading and the config a policy fine-tuning run with `settings` would use, its preset resolved
    (as `train --help` prints what runs), or the schema's defaults where the settings name none or do not compose."""
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig

    given = [f"finetune={s.split('=', 1)[1]}" if s.startswith("experiment=") else s for s in settings
             if "=" in s and not s.startswith(("resume=", "run_dir="))]
    if not given:
        return "Keys (default):", None
    try:  # base_policy= is required to run, not to show what a run would use
        placeholder = [] if setting(given, "base_policy") is not None else ["base_policy='<policy dir>'"]
        cfg = compose_config("finetune", FinetuneConfig, given + placeholder)
    except Exception:  # noqa: BLE001 - help prints whatever the settings are
        return "Keys (default; these settings are not a policy fine-tuning run's, see 2. below):", None
    return f"Keys, with the values {' '.join(s for s in settings if '=' in s)} uses:", cfg


def _help(settings: list[str]) -> str:
    from robot_rl.cli.common import page
    from robot_rl.config import presets
    from robot_rl.finetune.config import FinetuneConfig

    policy = page(
        ["usage: robot-rl finetune method=<method> | experiment=<preset> [key=value ...]"],
        [
            "Methods (method=; an experiment= preset names its own; without either: wsrl; resume= takes the run's):",
            *(f"  {name:<9} {summary}" for name, summary in METHODS.items()),
            "",
            "1. Fine-tuning a behaviour-cloning policy saved by `robot-rl bc` (docs/finetuning.md): residual, dsrl,",
            "reinflow, dppo, rl100. Writes config.yaml, run.json, metrics.csv (steps = executed env actions),",
            "learning_curve.png, checkpoints/{latest,best}.pt, and for reinflow/dppo/rl100 the fine-tuned policy in",
            "<run_dir>/policy (rl100: also rl100_rounds.json, each round's OPE values and decision).",
            "",
            f"Presets: experiment=  {', '.join(presets('finetune'))}",
            "",
            "steps=, eval_every= and replay_capacity= may also be spelt train.steps= etc. (as in train), with every",
            "method; these are the keys of methods residual, dsrl, reinflow, dppo and rl100:",
        ],
        EXAMPLES, FinetuneConfig, *_resolved_policy_config(settings), max_width=48,
    )
    return policy + "\n" + train_help(None, "finetune", intro=[
        "2. method=wsrl: offline-to-online RL from a dataset (`robot-rl collect` writes one). The same keys as",
        "`train`; the data.* and offline.* keys choose the recipe:",
        "  WSRL:   data.path=D offline.steps=N data.mix_online=false train.learning_starts=5000",
        "          (pretrain with Cal-QL, warm up with the pretrained policy, then SAC on online data only)",
        "  naive:  the same with train.learning_starts=0 (online updates start at once)",
        "  RLPD:   data.path=D (no pretraining; every batch half prior data, half online data)",
        "Outputs as for train, plus offline_metrics.csv and checkpoints/pretrained.pt.",
    ], examples=[])


COMMAND = Command(name="finetune", summary="fine-tune a BC policy, or offline-to-online RL from data", run=run,
                  examples=EXAMPLES, help=_help)
