"""The typed training configuration. Hydra composes YAML presets from `configs/`; this schema names and checks
every key, so a typo or a bad value fails at start with the key's name instead of deep inside a run."""

from __future__ import annotations

import dataclasses
import re
import sys
from dataclasses import dataclass, field, make_dataclass
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from robot_rl.agents.calql import CalQLConfig
from robot_rl.agents.iql import IQLConfig
from robot_rl.agents.sac import FLAT_KEYS, SACConfig, nest_flat_keys
from robot_rl.errors import UserError
from robot_rl.fields import help_field as _help
from robot_rl.jump_start import JumpStartConfig
from robot_rl.logger import LOGGERS, WANDB_MODES, wandb_missing
from robot_rl.replay import PRIOR_FRACTION_RANGE, prior_fraction_ok


@dataclass
class EnvConfig:
    spec: str = _help(
        "gym:Pendulum-v1", "environment spec: gym:<gymnasium id> (or gym:<module>:<id>), dmc:<domain>-<task>, "
        "mujoco:<task>, arm:<reach|push|pick_place|track>[-sparse][-pixels], mjx:<task>, warp:<task> or isaaclab:<task id>"
    )
    num_envs: int = _help(1, "parallel training environments")
    num_eval_envs: int = _help(
        10,
        "evaluation environments; each evaluation runs one episode in each. 0: no separate evaluation env, the "
        "training episodes' mean return stands in, and no final video (for simulators that allow one env per "
        "process, such as Isaac Lab)",
    )
    action_repeat: int = _help(1, "repeat each action this many times (dm_control convention: 2-8)")
    max_episode_steps: int | None = _help(None, "time limit in agent steps (default: the task's own)")
    pixel_size: list[int] = _help([84, 84], "camera observations' height and width (arm:<task>-pixels)")
    reward_classifier: str | None = _help(
        None, "a success classifier directory (robot-rl classifier): the training envs' reward becomes 1 when it sees "
        "success, 0 otherwise, and episodes end there; evaluation keeps the task's own reward and success. On a "
        "state arm task (arm:push-sparse) the training envs render the classifier's cameras for it and the learner "
        "still reads the state"
    )
    reward_classifier_threshold: float = _help(0.5, "classifier probability at or above which a frame is a success")
    reward_classifier_consecutive: int = _help(1, "success needs this many steps in a row above the threshold")
    end_on_task_success: bool = _help(
        True, "arm: tasks: training episodes end at the task's own success. false: they go on past it, and only the "
        "time limit or the reward classifier's success ends them, as on a robot, where nothing but the classifier "
        "knows of success (with the task's end, a success the classifier misses or sees a frame late earns 0 and "
        "ends the episode, and consecutive > 1 can never reward it). Evaluation episodes always end there"
    )
    practice: bool = _help(
        False, "arm: tasks: autonomous practice without a person's resets. Between training episodes the scene is put "
        "back by env.practice_reset (the cube moved to a fresh start by a scripted reset controller, or left where it "
        "is), the arm goes home by its own reset motion, and a new target is drawn; only a scene the arm cannot "
        "recover (the cube out of reach or off the table) gets a person's reset, counted in the metrics column "
        "human_resets (and the reset controller's control steps in reset_steps). On push and pick_place the scene has "
        "ramps and fences that keep a pushed cube within reach (docs/arm.md). Evaluation episodes start from the "
        "task's own resets, in the plain scene"
    )
    practice_reset: str = _help(
        "expert", "env.practice=true: what puts the scene back between episodes. expert: a scripted reset controller "
        "(the hand lets go of the cube and clears it, then the push expert moves the cube to a fresh start of the task, "
        "within 3 cm, or the pick_place expert carries it there where a push cannot reach it; on a robot a script "
        "that reads the cube's measured pose; docs/arm.md). home: only the arm goes "
        "home, the cube stays where the episode left it"
    )


@dataclass
class DelayConfig:
    steps: int = _help(
        0, "observation-to-action delay in control steps: each action lands this many steps after the observation "
        "it was computed from, as on a robot (camera, transport, inference); the first steps of an episode apply the "
        "zero action. 0: none. Training and evaluation envs both run under it"
    )
    ms: float | None = _help(None, "the delay in milliseconds instead, converted with the env's control rate "
                                   "(arm tasks: 20 Hz, so 250 ms = 5 steps)")
    sample_steps: list[int] | None = _help(
        None, "a delay drawn per episode from this list of steps (each entry equally likely: a measured "
        "distribution, e.g. [4,5,5,6])"
    )
    sample_ms: list[float] | None = _help(None, "the same in milliseconds (e.g. the delays robot-rl deploy measured)")
    aware: bool = _help(
        False, "delay-aware learner: the actions still in flight (the largest delay's worth, oldest first) are "
        "appended to the state observation, and a drawn delay too, so the policy knows what happens before its "
        "action lands; deploy and serve-policy append the same from the actions they sent"
    )

    def to_delay(self) -> Any:
        """These keys as `robot_rl.envs.delay.ActionDelay` (errors name `env_delay.<key>`); None when unset."""
        from robot_rl.envs.delay import ActionDelay

        delay = ActionDelay(int(self.steps), None if self.ms is None else float(self.ms),
                            tuple(self.sample_steps or ()), tuple(self.sample_ms or ()), bool(self.aware),
                            name="env_delay")
        return delay if delay.enabled else None


@dataclass
class LoopConfig:
    steps: int = _help(10_000, "environment steps (transitions, summed over envs) to train for")
    learning_starts: int = _help(1_000, "uniform-random actions for this many steps before learning")
    eval_every: int = _help(1_000, "evaluate (and checkpoint) every this many environment steps")
    checkpoint_every: int | None = _help(None, "checkpoint every this many env steps (default: eval_every)")
    replay_capacity: int = _help(1_000_000, "replay buffer size in transitions")
    updates_per_step: int | None = _help(
        None,
        "agent updates (each of agent.optimiser.utd critic steps) per batched env step; default num_envs, i.e. one per "
        "transition. With hundreds of envs (experiment=gpu_fast) a few large-batch updates per step instead",
    )
    critic_warmup_updates: int = _help(
        0, "critic-only updates once learning starts, before the actor moves: a pretrained agent's critic is first "
        "fit to its own policy's values (WSRL; residual RL's residual.critic_warmup_updates does the same)"
    )
    mirror_online: bool = _help(
        False, "also store the mirror image of every online transition where the task declares a symmetry (as "
        "data.mirror does for the prior data): two replay transitions per env step, so the reflections take half of "
        "train.replay_capacity; camera frames are flipped left to right (with agent.encoder.cache_embeddings before "
        "the backbone sees them)"
    )
    video: bool = _help(True, "record an MP4 of one evaluation episode at the end of training")
    video_size: list[int] = _help([240, 320], "video height and width")


@dataclass
class DataConfig:
    path: str | None = _help(
        None, "prior data: a dataset directory (LeRobot v3 layout, e.g. from `robot-rl collect`) of demos or logs"
    )
    max_episodes: int | None = _help(None, "use only the first N episodes of the dataset")
    mix_online: bool = _help(
        True, "sample prior data in every online batch (RLPD); false = online data only (WSRL after pretraining)"
    )
    prior_fraction: float = _help(0.5, "fraction of each online batch drawn from the prior data (RLPD: 0.5; 0: none)")
    mirror: bool = _help(
        False, "also learn from the prior data's mirror image where the task declares a symmetry (arm:push and "
        "arm:pick_place, y -> -y; from cameras too, their frames flipped left to right): twice the demos' coverage"
    )


@dataclass
class OfflineConfig:
    algorithm: str = _help("calql", "offline pretraining: calql, cql (Cal-QL without calibration) or iql")
    steps: int = _help(0, "offline gradient steps on data.path before online training (0: no pretraining)")
    eval_every: int = _help(2_000, "evaluate the policy every this many offline steps")
    init: str | None = _help(
        None, "start from the agent of this checkpoint file (e.g. <run>/checkpoints/pretrained.pt) instead: its "
              "weights, optimiser moments and the temperature Cal-QL/CQL learned (after IQL, which learns none, "
              "agent.exploration.init_temperature)"
    )
    freeze_statistics: bool = _help(
        False, "a pretrained agent keeps its dataset's observation and return statistics online "
        "(agent.network.obs_norm, agent.critic.reward_scale), so the WSRL warm-up policy is exactly the pretrained one "
        "(experiment=wsrl_reach sets it: with the temperature from 0.001 no dip on reach, bench/results/wsrl_reach_temperature)"
    )
    calql: CalQLConfig = field(default_factory=CalQLConfig)
    iql: IQLConfig = field(default_factory=IQLConfig)


OFFLINE_ALGORITHMS = ("calql", "cql", "iql")


@dataclass
class WandbConfig:
    project: str = _help("robot_rl", "W&B project (logger=wandb)")
    entity: str | None = _help(None, "W&B entity, a user or team (default: your default entity)")
    mode: str | None = _help(
        None, "online, offline (no network; `wandb sync <run_dir>/wandb/offline-run-*` uploads later) or disabled; "
        "default: $WANDB_MODE, else online"
    )


@dataclass
class RunConfig:
    """The run-level keys of every training command (`train`, `finetune`): seed, device, where the run is written
    and where its metrics go. One schema, so a run-level option added here reaches both commands and their
    `--help`; each command's own keys follow these in its schema."""

    seed: int = _help(0, "seed of networks, sampling and environments")
    device: str = _help("cpu", "torch device of the networks and replay (cpu, cuda, cuda:1)")
    threads: int | None = _help(
        None, "torch CPU threads (default: an equal share of the cores among the robot-rl runs alive on this machine, "
              "kept up to date as runs start and end, and less where other work keeps cores busy; a notice says when "
              "it is below torch's one per core)")
    name: str | None = _help(None, "run name (default: derived from the env spec, and in finetune the method)")
    run_dir: str | None = _help(None, "run directory (default: runs/<date>_<name>)")
    resume: str | None = _help(None, "run directory to resume from its latest checkpoint")
    quiet: bool = _help(False, "no live progress line; one log line per evaluation")
    logger: str = _help(
        "tensorboard", "where the metrics go besides metrics.csv: tensorboard, wandb (Weights & Biases) or none"
    )
    wandb: WandbConfig = field(default_factory=WandbConfig)

    def run_checks(self) -> list[tuple[bool, str]]:
        """The checks of the run-level keys, as (ok, message) pairs for the command's `validate`."""
        return [
            (self.threads is None or self.threads >= 1, "threads must be >= 1 or null"),
            (self.logger in LOGGERS, f"logger must be one of {', '.join(LOGGERS)}"),
            (self.logger != "wandb" or not wandb_missing(),
             "logger=wandb needs the wandb package: pip install 'robot_rl[wandb]'"),
            (self.wandb.mode is None or self.wandb.mode in WANDB_MODES,
             f"wandb.mode must be one of {', '.join(WANDB_MODES)} or null"),
        ]


@dataclass
class TrainConfig(RunConfig):
    GROUPS = ("env", "agent", "experiment")  # preset groups that may be chosen on the command line

    env: EnvConfig = field(default_factory=EnvConfig)
    env_delay: DelayConfig = field(default_factory=DelayConfig)
    agent: SACConfig = field(default_factory=SACConfig)
    train: LoopConfig = field(default_factory=LoopConfig)
    data: DataConfig = field(default_factory=DataConfig)
    offline: OfflineConfig = field(default_factory=OfflineConfig)
    jsrl: JumpStartConfig = field(default_factory=JumpStartConfig)

    def validate(self) -> None:
        """Raise ValueError naming the first bad value (types are checked by the schema merge)."""
        self.agent.validate()
        checks = [*self.jsrl.checks(),
            (self.env.num_envs >= 1, "env.num_envs must be >= 1"),
            (self.env.num_eval_envs >= 0, "env.num_eval_envs must be >= 0"),
            (self.env.action_repeat >= 1, "env.action_repeat must be >= 1"),
            (self.env.max_episode_steps is None or self.env.max_episode_steps >= 1,
             "env.max_episode_steps must be >= 1 or null"),
            (len(self.env.pixel_size) == 2 and min(self.env.pixel_size) >= 16,
             "env.pixel_size must be [height, width], each >= 16"),
            (0.0 < self.env.reward_classifier_threshold <= 1.0, "env.reward_classifier_threshold must be in (0, 1]"),
            (self.env.reward_classifier_consecutive >= 1, "env.reward_classifier_consecutive must be >= 1"),
            (self.env.end_on_task_success or self.env.spec.startswith("arm:"),
             f"env.end_on_task_success=false needs an arm: spec (only that backend can go on past a task's success), "
             f"got {self.env.spec}"),
            (not self.env.practice or self.env.spec.startswith("arm:"),
             f"env.practice=true needs an arm: spec (only its scene can go on without a reset), got {self.env.spec}"),
            (self.env.practice_reset in ("expert", "home"),
             f"env.practice_reset must be one of 'expert', 'home', got {self.env.practice_reset!r}"),
            (self.train.steps >= 1, "train.steps must be >= 1"),
            (self.train.learning_starts >= 0, "train.learning_starts must be >= 0"),
            (self.train.critic_warmup_updates >= 0, "train.critic_warmup_updates must be >= 0"),
            (self.train.eval_every >= 1, "train.eval_every must be >= 1"),
            (self.train.checkpoint_every is None or self.train.checkpoint_every >= 1,
             "train.checkpoint_every must be >= 1 or null"),
            (self.train.replay_capacity >= self.env.num_envs, "train.replay_capacity must be >= env.num_envs"),
            (self.train.updates_per_step is None or self.train.updates_per_step >= 0,
             "train.updates_per_step must be >= 0 or null"),
            (len(self.train.video_size) == 2 and min(self.train.video_size) >= 16,
             "train.video_size must be [height, width], each >= 16"),
            (self.data.max_episodes is None or self.data.max_episodes >= 1, "data.max_episodes must be >= 1 or null"),
            (prior_fraction_ok(self.data.prior_fraction), f"data.prior_fraction must be in {PRIOR_FRACTION_RANGE}"),
            (self.offline.algorithm in OFFLINE_ALGORITHMS,
             f"offline.algorithm must be one of {', '.join(OFFLINE_ALGORITHMS)}"),
            (self.offline.steps >= 0, "offline.steps must be >= 0"),
            (self.offline.eval_every >= 1, "offline.eval_every must be >= 1"),
            (not self.data.mirror or self.data.path is not None, "data.mirror=true needs data.path=<dataset dir>"),
            (self.offline.steps == 0 or self.data.path is not None,
             "offline.steps > 0 needs a dataset: set data.path=<dataset dir>"),
            (self.offline.steps == 0 or self.offline.init is None, "set either offline.steps or offline.init, not both"),
            *self.run_checks(),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(message)
        self.env_delay.to_delay()  # its own one-line errors, naming env_delay.<key> and the choices
        self.offline.calql.validate()
        self.offline.iql.validate()


def describe(cls: type = TrainConfig, prefix: str = "", instance: Any = None) -> list[tuple[str, str, str]]:
    """(key, default, help) for every leaf of a config dataclass, for `--help`."""
    instance = instance if instance is not None else cls()
    rows = []
    for f in dataclasses.fields(cls):
        value = getattr(instance, f.name)
        if dataclasses.is_dataclass(value):
            rows += describe(type(value), f"{prefix}{f.name}.", value)
        else:
            rows.append((prefix + f.name, repr(value) if value is None else str(value), f.metadata.get("help", "")))
    return rows


def key_lines(rows: list[tuple[str, str, str]], max_width: int | None = None) -> list[str]:
    """`--help`'s "Keys (default)" lines for `describe` rows: `key=default` padded to one column, then the help;
    a setting wider than `max_width` gets its help on the next line."""
    width = max(len(k) + len(d) for k, d, _ in rows) + 4
    width = min(width, max_width) if max_width else width
    lines = []
    for key, default, text in rows:
        setting = f"{key}={default}"
        lines.append(f"  {setting:<{width}} {text}" if len(setting) < width else f"  {setting}\n  {'':<{width}} {text}")
    return lines


class ConfigError(UserError, ValueError):
    """A user mistake in the configuration; its message is one line naming the key and the valid choices."""


def presets(group: str) -> list[str]:
    """Names of the presets shipped in configs/<group>/."""
    from importlib.resources import files

    return sorted(p.name[:-5] for p in files("robot_rl.configs").joinpath(group).iterdir() if p.name.endswith(".yaml"))


def compose_train_config(overrides: list[str]) -> TrainConfig:
    """Compose configs/train.yaml with Hydra command-line overrides; a bad key or value raises ConfigError."""
    return compose_config("train", TrainConfig, overrides)


def compose_config(config_name: str, schema: type, overrides: list[str]) -> Any:
    """Compose configs/<config_name>.yaml over `schema` (registered as `<config_name>_schema`) with Hydra
    overrides, and validate; a bad key or value raises ConfigError naming it."""
    from hydra import compose, initialize_config_module
    from hydra.core.config_store import ConfigStore
    from hydra.core.global_hydra import GlobalHydra

    overrides = renamed_agent_overrides(overrides)
    _check_added_keys(overrides, schema)
    node = OmegaConf.structured(schema)
    has_agent = "agent" in node
    if has_agent:  # composed as an open dict, so that a YAML file's flat agent keys of the release before the groups
        # are read as their groups; the schema checks every key and type when merged over it below
        node = OmegaConf.structured(make_dataclass(schema.__name__, [("agent", Any, field(
            default_factory=lambda: OmegaConf.to_container(OmegaConf.structured(schema).agent)))], bases=(schema,)))
        OmegaConf.set_struct(node.agent, False)
    ConfigStore.instance().store(name=f"{config_name}_schema", node=node)
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="robot_rl.configs", version_base=None):
            cfg = compose(config_name=config_name, overrides=overrides)
        composed = OmegaConf.to_container(cfg)
        if has_agent:
            composed["agent"] = _composed_agent(composed["agent"])
        obj = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema), composed))
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(_one_line(e, schema)) from e
    finally:
        GlobalHydra.instance().clear()
    _validate(obj)
    return obj


def load_run_config(run_dir: str | Path, overrides: list[str] = (), schema: type = TrainConfig) -> Any:
    """The saved config of a run, with `key=value` overrides (e.g. a longer train.steps when resuming)."""
    path = Path(run_dir) / "config.yaml"
    if not path.is_file():
        raise ConfigError(f"{run_dir} is not a run directory (no config.yaml in it)")
    overrides = renamed_agent_overrides(overrides)
    for o in overrides:
        if "=" not in o or o.split("=", 1)[0] in {"env", "agent", "experiment"} or o.startswith(("+", "~")):
            raise ConfigError(f"override '{o}' cannot be applied to a saved run; use key=value, e.g. train.steps=50000")
    saved = OmegaConf.load(path)
    if OmegaConf.is_dict(saved) and OmegaConf.is_dict(saved.get("agent")):  # a run of the release before the groups
        saved.agent = OmegaConf.create(renamed_agent_section(OmegaConf.to_container(saved.agent), str(path)))
    spec = OmegaConf.select(saved, "env.spec")
    for o in overrides:  # its agent and replay belong to its own task: another task resumed silently (issue 56)
        key, _, value = o.partition("=")
        if key == "env.spec" and spec is not None and value != spec:
            raise ConfigError(f"env.spec={value}: {run_dir} is a run on {spec}, and resuming continues it there; "
                              f"start a new run for {value} (run_dir=<another dir>)")
    try:
        merged = OmegaConf.merge(OmegaConf.structured(schema), saved, OmegaConf.from_dotlist(list(overrides)))
        obj = OmegaConf.to_object(merged)
    except Exception as e:
        raise ConfigError(_one_line(e, schema)) from e
    _validate(obj)
    return obj


_NOTED: set[str] = set()


def _deprecation_note(text: str, names: str = "name") -> None:
    """One line on stderr, once per process: a command composes a config more than once (`--help`, seeds)."""
    if text not in _NOTED:
        _NOTED.add(text)
        print(f"robot-rl: note: {text} (the old {names} work{'s' if names == 'name' else ''} until the next "
              "release)", file=sys.stderr, flush=True)


def renamed_agent_overrides(overrides: list[str]) -> list[str]:
    """`agent.<old flat key>=v` settings as their group keys (`agent.utd=2` -> `agent.optimiser.utd=2`), each with a
    one-line notice: the old names work for one release, for train, finetune and hil-train alike."""
    renamed = []
    for o in overrides:
        body = o.lstrip("+~")
        key, eq, value = body.partition("=")
        group, _, leaf = key.partition(".")
        if group == "agent" and leaf in FLAT_KEYS:
            new = f"agent.{FLAT_KEYS[leaf]}"
            _deprecation_note(f"{key} is now {new}")
            o = f"{o[: len(o) - len(body)]}{new}{eq}{value}"
        renamed.append(o)
    return renamed


def renamed_agent_section(agent: dict[str, Any], where: str) -> dict[str, Any]:
    """A saved or user-written `agent:` section with its old flat keys moved into their groups; one notice names
    the file and the first old key."""
    nested, old = nest_flat_keys(agent)
    if old:
        more = f", and {len(old) - 1} more old agent key{'s' if len(old) > 2 else ''} there" if len(old) > 1 else ""
        _deprecation_note(f"{where}: agent.{old[0]} is now agent.{FLAT_KEYS[old[0]]}{more}",
                          "names" if len(old) > 1 else "name")
    return nested


def _composed_agent(agent: dict[str, Any]) -> dict[str, Any]:
    """A composed `agent` section in its groups. An old flat `network: mlp` (or `encoder:`) in a YAML file has
    replaced the whole group the presets before it set, which cannot be told apart, so it is refused in one line."""
    for group in ("network", "encoder"):
        if isinstance(kind := agent.get(group), str):
            raise ConfigError(f"a config file sets agent.{group}: {kind}, the old flat key, which replaces the presets' "
                              f"whole agent.{group} group; write it as agent.{group}.kind: {kind}")
    return renamed_agent_section(agent, "a config file")


def _check_added_keys(overrides: list[str], schema: type) -> None:
    """Hydra's `+key=value` adds a key the schema does not have and the run would go on without it; a `+` is
    only needed to add a preset group (`+experiment=hopper`), so any other `+key` must name a known key."""
    for o in overrides:
        if not o.startswith("+") or "=" not in o:
            continue
        name = o.lstrip("+").split("=", 1)[0]
        parent, _, leaf = name.rpartition(".")
        valid = _keys_under(parent, schema)
        if leaf not in valid:
            where = f" under {parent}" if parent else ""
            raise ConfigError(f"unknown config key '{name}' in '{o}'; valid keys{where}: {', '.join(valid)}")


def _validate(cfg: Any) -> None:
    try:
        cfg.validate()
    except ValueError as e:
        raise ConfigError(str(e)) from e


def _one_line(e: Exception, schema: type = TrainConfig) -> str:
    """Turn Hydra/OmegaConf's multi-line errors into one line that names the key and the valid choices."""
    text = str(e)
    cause = e.__cause__ or e.__context__
    missing = re.search(r"Could not find '(\w+)/([^']*)'", text)
    if missing:
        group, name = missing.groups()
        return f"unknown preset {group}={name}; choose one of: {', '.join(presets(group))}"
    key = re.search(r"full_key: ([\w.\[\]]+)", text + "\n" + str(cause or ""))
    bad_override = re.search(r"Could not override '([\w.]+)'", text)
    if bad_override or "not in struct" in text or (cause is not None and "not in" in str(cause)):
        name = bad_override.group(1) if bad_override else (key.group(1) if key else "?")
        parent, _, leaf = name.rpartition(".")
        valid = _keys_under(parent, schema)
        if parent and not valid:  # the group itself does not exist here (train.* in policy fine-tuning)
            group = parent.split(".")[0]
            return (f"unknown config key '{name}': this command has no '{group}' group; "
                    f"valid keys: {', '.join(_keys_under('', schema))}")
        if leaf not in valid:
            return f"unknown config key '{name}'; valid keys{' under ' + parent if parent else ''}: {', '.join(valid)}"
    first = _first_line(text) or type(e).__name__
    cause_first = _first_line(str(cause)) if cause is not None else None
    if key and cause_first is not None and first.startswith("Error merging override"):
        # Hydra's line names only the override; the reason (`train.steps=1e5` is not an integer) is in its cause
        return f"bad value for {key.group(1)}: {cause_first}"
    if key and key.group(1) not in first:
        return f"bad value for {key.group(1)}: {first}"
    if cause_first is not None and first.startswith("Could not override"):
        return f"{first} {cause_first}"
    return first


def _first_line(text: str) -> str:
    """The first non-blank line of `text`, stripped ("" if none)."""
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def _keys_under(parent: str, schema: type = TrainConfig) -> list[str]:
    node: Any = schema()
    for part in filter(None, parent.split(".")):
        node = getattr(node, part, None)
        if not dataclasses.is_dataclass(node):
            return []
    keys = [f.name for f in dataclasses.fields(node)]
    groups = [g for g in getattr(schema, "GROUPS", ()) if g not in keys] if not parent else []
    return keys + groups
