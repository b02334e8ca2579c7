"""The agent's config in groups (issue 56): the old flat keys still work for one release, mapped once, with one
notice, on the command line, in an old run's config.yaml and in a checkpoint; validation names the dotted key."""

import dataclasses

import pytest
from omegaconf import OmegaConf

from robot_rl import config
from robot_rl.agents.sac import FLAT_KEYS, SACConfig
from robot_rl.config import ConfigError, compose_train_config, load_run_config, presets

NOTE = "robot-rl: note: agent.utd is now agent.optimiser.utd (the old name works until the next release)\n"


@pytest.fixture(autouse=True)
def _fresh_notes(monkeypatch):
    """Each notice is printed once per process; each test starts as a fresh process would."""
    monkeypatch.setattr(config, "_NOTED", set())


def _flat(cfg) -> dict:
    """`cfg` as the release before the groups wrote it: a flat `agent:` section."""
    saved = OmegaConf.to_container(OmegaConf.structured(cfg))
    saved["agent"] = {old: saved["agent"][new.split(".")[0]][new.split(".")[1]] for old, new in FLAT_KEYS.items()}
    return saved


OLD_KEYS = (  # SACConfig's fields in the release before the groups
    "network hidden_dims critic_width critic_blocks actor_width actor_blocks num_critics num_target_critics "
    "target_reduce actor_q num_atoms v_max reward_scale obs_norm obs_norm_preserve critic_layer_norm "
    "actor_layer_norm utd batch_size gamma n_step tau actor_lr critic_lr temperature_lr lr_end_fraction "
    "init_temperature target_entropy_scale backup_entropy critic_weight_decay bc_weight noise_repeat_max "
    "noise_repeat_exponent compile bf16 encoder encoder_weights encoder_backbone encoder_spatial_features "
    "encoder_readout cache_embeddings encoder_feature_dim encoder_channels encoder_layers image_shift"
).split()


def test_every_old_flat_key_names_exactly_one_group_key() -> None:
    groups = {f"{g.name}.{k.name}" for g in dataclasses.fields(SACConfig)
              for k in dataclasses.fields(getattr(SACConfig(), g.name))}
    new = {"optimiser.actor_each_update"}  # added after the groups: no flat name, and `agent.<leaf>` is not one
    assert sorted(FLAT_KEYS) == sorted(OLD_KEYS) and sorted(FLAT_KEYS.values()) == sorted(groups - new)
    assert "actor_each_update" not in FLAT_KEYS
    assert FLAT_KEYS["utd"] == "optimiser.utd" and FLAT_KEYS["encoder_weights"] == "encoder.weights"


def test_an_old_key_on_the_command_line_resolves_as_the_new_one_with_one_notice(capsys) -> None:
    old = compose_train_config(["agent.utd=3", "agent.utd=3"])
    assert capsys.readouterr().err == NOTE  # one line, though set twice
    assert old == compose_train_config(["agent.optimiser.utd=3"])
    assert capsys.readouterr().err == ""
    # the mlp/hyper choice: `agent.network=` is the old key, `agent.network.kind=` the new one
    assert compose_train_config(["agent=sac", "agent.network=mlp"]).agent.network.kind == "mlp"
    assert "agent.network is now agent.network.kind" in capsys.readouterr().err


def test_an_old_runs_flat_config_yaml_resumes_as_the_same_config_with_one_notice(tmp_path, capsys) -> None:
    cfg = compose_train_config(["experiment=rlpd_push"])
    OmegaConf.save(OmegaConf.create(_flat(cfg)), tmp_path / "config.yaml")
    loaded = load_run_config(tmp_path)
    assert loaded == cfg
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"robot-rl: note: {tmp_path / 'config.yaml'}: agent.network is now "
                                                   "agent.network.kind, and 44 more old agent keys there (the old names work")
    assert load_run_config(tmp_path, ["agent.utd=5"]).agent.optimiser.utd == 5  # old keys as overrides too
    assert capsys.readouterr().err == NOTE


def test_a_users_yaml_with_a_flat_agent_section_composes_as_the_groups(tmp_path, capsys) -> None:
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nagent:\n  utd: 3\n  num_atoms: 11\n")
    cfg = compose_train_config([f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])
    assert cfg == compose_train_config(["agent.optimiser.utd=3", "agent.critic.num_atoms=11"])
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "agent.utd is now agent.optimiser.utd, and 1 more old agent key there (the" in err
    # `network: mlp` over a preset's network group replaced the whole group: said, not guessed
    (tmp_path / "experiment" / "mine.yaml").write_text("# @package _global_\nagent:\n  network: mlp\n")
    with pytest.raises(ConfigError, match="write it as agent.network.kind: mlp$"):
        compose_train_config([f"hydra.searchpath=[file://{tmp_path}]", "experiment=mine"])


def test_a_run_of_the_release_before_resumes_evaluates_and_exports(tmp_path, capsys) -> None:
    """A run written with the flat keys (its config.yaml and its checkpoints' config): resume, eval and export."""
    import torch

    from robot_rl import checkpoint
    from robot_rl.cli import main
    from robot_rl.export import policy_from_run
    from robot_rl.trainer import Trainer

    run = tmp_path / "run"
    cfg = compose_train_config(["env.spec=gym:Pendulum-v1", "agent.network.critic_width=16",
                                "agent.network.actor_width=16", "train.steps=40", "train.learning_starts=20",
                                "train.eval_every=40", "env.num_eval_envs=1", "train.video=false", "quiet=true",
                                "threads=1"])
    Trainer(cfg, run).run()
    flat = _flat(OmegaConf.load(run / "config.yaml"))
    OmegaConf.save(OmegaConf.create(flat), run / "config.yaml")
    for path in (run / "checkpoints").glob("*.pt"):
        state = checkpoint.load(path)
        checkpoint.atomic_save({**state, "config": {**state["config"], "agent": flat["agent"]}}, path)
    capsys.readouterr()
    policy, _ = policy_from_run(run)  # export reads the checkpoint's own (flat) config
    assert policy.act({"state": torch.zeros(1, 3)}).shape == (1, 1)
    assert main(["eval", f"run={run}", "episodes=1", "video=false"]) == 0
    assert main(["train", f"resume={run}", "train.steps=60", "quiet=true"]) == 0
    err = capsys.readouterr().err
    assert err.count("robot-rl: note:") == 1 and "agent.network is now agent.network.kind" in err
    assert OmegaConf.load(run / "config.yaml").agent.optimiser.utd == 2  # rewritten in the groups


def test_checkpoints_with_a_flat_agent_config_load_and_export(tmp_path) -> None:
    """export, collect and eval read a checkpoint's own config: a flat one gives the same SACConfig."""
    cfg = compose_train_config([])
    assert SACConfig.from_dict(_flat(cfg)["agent"]) == cfg.agent
    assert SACConfig.from_dict(dataclasses.asdict(cfg.agent)) == cfg.agent


def test_finetune_and_hil_train_take_the_same_groups_and_old_names(capsys) -> None:
    from robot_rl.cli.common import parse_args
    from robot_rl.cli.hil_train import hil_train_args
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig

    ft = compose_config("finetune", FinetuneConfig, ["finetune=residual_push", "base_policy=p", "agent.utd=2"])
    assert isinstance(ft.agent, SACConfig) and ft.agent.optimiser.utd == 2 and ft.agent.critic.n_step == 3
    assert capsys.readouterr().err == NOTE
    config._NOTED.clear()
    hil = parse_args(hil_train_args(), ["agent.utd=2"], "hil-train")
    assert isinstance(hil.agent, SACConfig) and hil.agent.optimiser.utd == 2
    assert hil.agent.critic.num == 2 and hil.agent.network.actor_layer_norm  # hil-train's preset defaults
    assert capsys.readouterr().err == NOTE


def test_finetune_help_prints_the_presets_agent(capsys) -> None:
    """As train's, finetune's --help prints the values the preset runs with, not the schema's defaults."""
    from robot_rl.cli import main

    assert main(["finetune", "experiment=residual_push", "--help"]) == 0
    out = capsys.readouterr().out
    assert "Keys, with the values experiment=residual_push uses:" in out
    assert "  agent.critic.n_step=3 " in out and "  agent.optimiser.actor_lr=0.0001 " in out


@pytest.mark.parametrize("setting", ["agent.critic.num=30", "agent.num_critics=30"])
def test_validation_names_the_full_dotted_key(setting) -> None:
    with pytest.raises(ConfigError, match=r"^agent\.critic\.num must be between 1 and 20$"):
        compose_train_config([setting])


def test_shipped_presets_use_the_group_keys_only(capsys) -> None:
    from robot_rl.config import compose_config
    from robot_rl.finetune.config import FinetuneConfig

    for preset in presets("agent"):
        compose_train_config([f"agent={preset}"])
    for preset in presets("experiment"):
        compose_train_config([f"experiment={preset}"])
    for preset in presets("finetune"):
        compose_config("finetune", FinetuneConfig, [f"finetune={preset}", "base_policy=p"])
    assert capsys.readouterr().err == ""
