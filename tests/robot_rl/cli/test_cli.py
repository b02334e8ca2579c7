"""CLI smoke tests: help, one-line errors for user mistakes, a short train + eval end to end."""

import csv
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from robot_rl.cli import main
from robot_rl.config import TrainConfig, describe, load_run_config

FAST = [
    "agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32",
    "train.steps=400",
    "train.learning_starts=100",
    "train.eval_every=200",
    "env.num_eval_envs=2",
    "env.max_episode_steps=50",
    "train.video_size=[64,64]",
]


def _run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_console_script_help():
    exe = shutil.which("robot-rl", path=str(Path(sys.executable).parent))
    assert exe, "the robot-rl console script is not installed"
    out = subprocess.run([exe, "--help"], capture_output=True, text=True, check=True).stdout
    assert "train" in out and "eval" in out


def test_train_help_lists_keys_and_presets(capsys):
    code, out, _ = _run(capsys, "train", "--help")
    assert code == 0
    for key in ["env.spec=", "agent.optimiser.utd=", "agent.critic.num=", "train.steps=", "seed=", "resume="]:
        assert key in out
    assert "cartpole_swingup" in out and "rlpd" in out


@pytest.mark.parametrize(
    "args, expected",
    [
        (["agent.bogus=1"], "unknown config key 'agent.bogus'; valid keys under agent:"),
        (["+agent.bogus=1"], "unknown config key 'agent.bogus' in '+agent.bogus=1'; valid keys under agent:"),
        (["++bogus=1"], "unknown config key 'bogus'"),
        (["bogus=1"], "unknown config key 'bogus'"),
        # Hydra's own line named only the override ("Error merging override agent.optimiser.utd=abc"), not what is wrong
        (["agent.optimiser.utd=abc"], "bad value for agent.optimiser.utd: Value 'abc' of type 'str' could not be converted to Integer"),
        (["train.steps=1e5"], "bad value for train.steps:"),
        (["agent.optimiser.compile=maybe"], "bad value for agent.optimiser.compile: Value 'maybe' is not a valid bool"),
        (["agent.critic.num=0"], "agent.critic.num must be between 1 and 20"),
        (["env=nope"], "unknown preset env=nope; choose one of: cartpole_swingup"),
        (["env.spec=gym:NoSuchEnv-v0"], "NoSuchEnv"),
        (["env.spec=foo:bar"], "gym:"),
        (["--steps", "3"], "unknown option '--steps'"),
        (["resume=/nonexistent/run"], "not a run directory"),
        # the hint names the run's own env (before: env.spec=<spec>, a placeholder to fill in)
        (["env.spec=arm:reach", "data.path=/nonexistent/demos"],
         "robot-rl collect env.spec=arm:reach policy=expert episodes=20 out=/nonexistent/demos"),
    ],
)
def test_train_user_errors_are_one_line(capsys, tmp_path, args, expected):
    code, _, err = _run(capsys, "train", f"run_dir={tmp_path / 'run'}", *args)
    assert code == 2
    assert err.startswith("robot-rl: error:") and err.count("\n") == 1, err
    assert expected in err, err


def test_version_and_python_dash_m(capsys, tmp_path):
    import robot_rl

    code, out, _ = _run(capsys, "--version")
    assert code == 0 and out.startswith(f"robot-rl {robot_rl.__version__} (Python ") and "torch " in out
    # `python -m robot_rl` is the same command line, from any directory
    run = subprocess.run([sys.executable, "-m", "robot_rl", "--version"], capture_output=True, text=True,
                         cwd=tmp_path, check=True)
    assert run.stdout == out
    bad = subprocess.run([sys.executable, "-m", "robot_rl", "trian"], capture_output=True, text=True, cwd=tmp_path)
    assert bad.returncode == 2 and "unknown command 'trian'" in bad.stderr


def test_package_version_matches_pyproject():
    import tomllib

    import robot_rl

    project = tomllib.loads((Path(__file__).resolve().parents[3] / "pyproject.toml").read_text())["project"]
    assert robot_rl.__version__ == project["version"]


def test_unknown_command(capsys):
    code, _, err = _run(capsys, "trian")
    assert code == 2 and "choose one of: train, finetune, eval, collect" in err


def test_train_then_eval_writes_the_run_directory(capsys, tmp_path):
    run = tmp_path / "run"
    code, out, err = _run(capsys, "train", f"run_dir={run}", "quiet=true", *FAST)
    assert code == 0, err
    assert (run / "config.yaml").is_file()
    assert (run / "checkpoints" / "latest.pt").is_file() and (run / "checkpoints" / "best.pt").is_file()
    assert (run / "learning_curve.png").stat().st_size > 1000
    assert (run / "videos" / "final.mp4").stat().st_size > 1000
    assert any((run / "tensorboard").iterdir())
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_step"]) for r in rows] == [200, 400]
    for column in ["wall_time_s", "eval_return_mean", "eval_return_std", "critic_loss", "actor_loss"]:
        assert rows[-1][column] != "", column
    assert rows[-1]["success_rate"] == ""  # Pendulum defines no success

    code, out, err = _run(capsys, "eval", f"run={run}", "episodes=2", "checkpoint=latest")
    assert code == 0, err
    assert "return" in out and "±" in out
    assert (run / "videos" / "eval_latest.mp4").is_file()

    # a second run into the same directory is refused rather than overwriting it
    code, _, err = _run(capsys, "train", f"run_dir={run}", *FAST)
    assert code == 2 and "resume=" in err

    # `--help` with the same settings prints what that run wrote to its config.yaml, key for key. Before: the
    # schema's defaults, 12 of them not what runs (utd 1 vs 2, network mlp vs hyper, num_atoms 1 vs 101, ...)
    code, out, _ = _run(capsys, "train", f"run_dir={run}", "quiet=true", *FAST, "--help")
    assert code == 0
    settings = [re.split(r"\s{2,}", line.strip())[0] for line in out.split("Keys, with the values")[1].splitlines()[1:]]
    shown = dict(setting.split("=", 1) for setting in settings if re.fullmatch(r"[\w.]+=.*", setting))
    written = {k: v for k, v, _ in describe(TrainConfig, instance=load_run_config(run))}
    assert shown.keys() == written.keys()
    differ = {k: (shown[k], written[k]) for k in shown if shown[k] != written[k] and k not in {"run_dir", "resume"}}
    assert not differ, differ


def test_eval_user_errors(capsys, tmp_path):
    assert _run(capsys, "eval")[0] == 2
    code, _, err = _run(capsys, "eval", f"run={tmp_path}")
    assert code == 2 and "not a run directory" in err
    code, _, err = _run(capsys, "eval", f"run={tmp_path}", "checkpoint=worst")
    assert code == 2 and "best or latest" in err


@pytest.mark.slow  # minutes on a CPU (MJX compiles, Warp steps slowly); `make test` runs it
@pytest.mark.parametrize("spec", ["mjx:cartpole-swingup", "warp:cartpole-swingup"])
def test_gpu_fast_preset_trains_on_the_gpu_backends(capsys, tmp_path, spec):
    """`experiment=gpu_fast env.spec=mjx:...` is the same command as any other train (here shrunk for a CPU)."""
    import torch

    run = tmp_path / "run"
    num_envs, steps, starts, per_step = 8, 8 * 40, 8 * 15, 3
    code, out, err = _run(
        capsys,
        "train",
        "experiment=gpu_fast",
        f"env.spec={spec}",
        f"run_dir={run}",
        "quiet=true",
        f"env.num_envs={num_envs}",
        # Evaluation on as many envs as training reuses the compiled MJX step (each batch size compiles anew,
        # which takes a minute on a CPU); the video env (a batch of one) is checked on Warp only.
        f"env.num_eval_envs={num_envs}",
        f"train.video={spec.startswith('warp:')}",
        "env.max_episode_steps=20",
        "agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32",
        "agent.optimiser.batch_size=64",
        "agent.optimiser.compile=false",
        f"train.steps={steps}",
        f"train.learning_starts={starts}",
        f"train.updates_per_step={per_step}",
        "train.eval_every=160",
        "train.replay_capacity=4096",
        "train.video_size=[64,64]",
    )
    assert code == 0, err
    state = torch.load(run / "checkpoints" / "latest.pt", weights_only=False)
    assert state["env_steps"] == steps
    # updates_per_step updates per batched step once learning starts, not one per transition
    assert state["updates"] == per_step * (steps - starts) // num_envs + per_step
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_step"]) for r in rows] == [160, 320] and rows[-1]["eval_return_mean"] != ""
    if spec.startswith("warp:"):
        assert (run / "videos" / "final.mp4").stat().st_size > 1000


def test_train_without_separate_eval_env(capsys, tmp_path):
    """env.num_eval_envs=0 (simulators with one env per process): training episodes stand in for evaluation."""
    run = tmp_path / "run"
    shorter = {"train.steps": "200", "train.eval_every": "100", "env.num_eval_envs": "0"}
    args = [a for a in FAST if a.split("=")[0] not in shorter] + [f"{k}={v}" for k, v in shorter.items()]
    code, out, err = _run(capsys, "train", f"run_dir={run}", "quiet=true", *args)
    assert code == 0, err
    with open(run / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["env_step"]) for r in rows] == [100, 200]
    assert rows[-1]["eval_return_mean"] == rows[-1]["train_return_mean"] != ""
    assert not (run / "videos" / "final.mp4").exists() and "no video" in out + err
    assert (run / "checkpoints" / "best.pt").is_file()


# -- one dialect for all eleven commands ----------------------------------------------------------------------
@pytest.mark.parametrize(
    "command, rows",
    [
        ("train", ["train.steps=10000 ", "device=cpu ", "env.spec=gym:Pendulum-v1 "]),
        ("finetune", ["steps=50000 ", "train.steps=10000 ", "device=cpu "]),
        ("eval", ["episodes=10 ", "env.spec= ", "checkpoint=best ", "device=cpu "]),
        ("collect", ["env.spec=arm:push ", "episodes=20 ", "device=cpu "]),
        ("bc", ["steps=2000 ", "policy=mlp ", "hidden=[256, 256, 256] ", "env.spec= "]),
        ("serve-robot", ["port=50051 ", "host=127.0.0.1 ", "run_for=0.0 ", "driver_args={} ", "token_file=None "]),
        ("teleop", ["robot=127.0.0.1:50051 ", "teleop=keyboard ", "teleop_args={} ", "episodes=10 ", "out=None "]),
        ("hil-train", ["teleop=scripted ", "device=cpu ", "steps=6000 ", "updates_per_transition=1.0 ",
                       "agent.optimiser.batch_size=256 ", "agent.optimiser.utd=1 ", "record=True "]),
        ("deploy", ["teleop=None ", "checkpoint= ", "stochastic=False ", "step_timeout_s=0.5 ", "policy_server=None ",
                    "splice_max_change=0.2 "]),
        ("serve-policy", ["checkpoint= ", "port=50061 ", "max_clients=8 ", "idle_timeout_s=30.0 ", "token_file=None "]),
        ("export", ["run= ", "out= ", "format=policy "]),
        ("classifier", ["dataset= ", "out= ", "steps=2000 ", "holdout=0.2 ", "cameras=[] ", "device=cpu "]),
    ],
)
def test_every_command_help_lists_its_keys_with_defaults(capsys, command, rows):
    code, out, _ = _run(capsys, command, "--help")
    assert code == 0 and out.startswith(f"usage: robot-rl {command}")
    heading = "Keys, with the values a default run uses:\n" if command == "train" else "Keys (default):\n"
    assert heading in out
    for row in rows:
        assert f"  {row}" in out, (row, out)
    keys = out.split(heading, 1)[1].split("\n\n", 1)[0].splitlines()
    assert keys and all(line.startswith("  ") and "=" in line for line in keys if not line.startswith("   ")), keys


def test_usage_lists_eleven_commands_in_one_dialect(capsys):
    code, out, _ = _run(capsys, "--help")
    assert code == 0
    for command in ["train", "finetune", "eval", "collect", "bc", "export", "classifier", "serve-robot", "teleop",
                    "hil-train", "deploy", "serve-policy"]:
        assert f"  {command} " in out, command
    assert " --" not in out.replace("--help", "").replace("--version", ""), out  # no --flags left


def test_device_is_the_torch_device_and_teleop_the_operators():
    from robot_rl.cli.common import parse_args as _parse_args
    from robot_rl.cli.deploy import DeployArgs
    from robot_rl.cli.hil_train import hil_train_args
    from robot_rl.cli.teleop import TeleopArgs

    a = _parse_args(hil_train_args(), ["teleop=gamepad", "device=cuda", "teleop_args.noise=0.3",
                                       "teleop_args.frame=beside", "agent.optimiser.utd=2",
                                       "agent.network.hidden_dims=[32,32]"],
                    "hil-train")
    assert (a.teleop, a.device) == ("gamepad", "cuda")
    assert a.teleop_args == {"noise": 0.3, "frame": "beside"}
    assert a.agent.optimiser.utd == 2 and a.agent.network.hidden_dims == [32, 32]
    assert a.agent.critic.num == 2 and a.agent.critic.backup_entropy is False  # the HIL defaults
    t = _parse_args(TeleopArgs, ["teleop=null", "append=true"], "teleop")
    assert t.teleop is None and t.append is True
    assert _parse_args(DeployArgs, [], "deploy").teleop is None
    # the last setting wins, null too: a script's `teleop=scripted "$@"` with teleop=null appended runs no operator
    assert _parse_args(hil_train_args(), ["teleop=scripted", "teleop=null"], "hil-train").teleop is None
    assert _parse_args(hil_train_args(), ["teleop=null", "teleop=gamepad"], "hil-train").teleop == "gamepad"


@pytest.mark.parametrize(
    "args, expected",
    [
        (["teleop",
          "device=keyboard"], "teleop has no device= (device= is a torch device); the operator's device is teleop="),
        (["deploy", "device=keyboard"], "the operator's device is teleop="),
        (["hil-train",
          "device=keyboard"], "device= is the torch device of the learner (cpu, cuda); the operator's device "
                                           "is teleop=keyboard"),
        (["hil-train", "agent.bogus=1"], "unknown key 'agent.bogus' for hil-train; valid keys under agent: network,"),
        (["teleop", "episodes=many"], "bad value for episodes"),
        (["deploy"], "deploy needs checkpoint=<run dir, checkpoint file or policy dir>"),
        (["serve-policy"], "serve-policy needs checkpoint=<run dir, checkpoint file or policy dir>"),
        (["collect", "env=arm:reach", "out=x"], "'env=arm:reach': the environment of collect is env.spec=<spec>, "
                                                "e.g. env.spec=arm:reach"),
        (["eval", "policy=x", "env=arm:reach"], "the environment of eval is env.spec=<spec>"),
        (["eval", "policy=x"], "eval policy=<dir> needs env.spec=<spec>"),
        (["collect", "env.bogus=1"], "unknown key 'env.bogus' for collect; valid keys under env: spec"),
        (["collect", "env.spec=arm:push-pixels", "out=x", "env.pixel_size=[8,8]"],
         "env.pixel_size must be [height, width], each >= 16"),
        (["hil-train", "steps=-5"], "steps=-5: must be > 0"),
        (["teleop", "episodes=0"], "episodes=0: must be > 0"),
        (["train", "device=gpu"], "device=gpu: not a torch device; use cpu, cuda, cuda:<index> or mps"),
        (["hil-train", "device=gpu"], "device=gpu: not a torch device"),
        (["bc", "dataset=x", "env=arm:push"], "'env=arm:push': the environment of bc is env.spec=<spec>, "
                                              "e.g. env.spec=arm:push"),
        (["hil-train", "--run-dir", "x"], "unknown option '--run-dir'; settings are key=value (see robot-rl hil-train"),
    ],
)
def test_one_line_errors_of_the_unified_keys(capsys, args, expected):
    code, _, err = _run(capsys, *args)
    assert code == 2 and err.startswith("robot-rl: error: ") and err.count("\n") == 1, err
    assert expected in err, err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
@pytest.mark.parametrize("command", ["train", "finetune", "bc", "eval", "collect", "hil-train"])
def test_device_cuda_without_cuda_is_one_line(capsys, command):
    """Was a 35-line traceback from torch's lazy CUDA init, after the envs were built."""
    code, _, err = _run(capsys, command, "device=cuda")
    assert code == 2 and err.count("\n") == 1, err
    assert "device=cuda: no CUDA GPU is usable here" in err and "use device=cpu" in err


def test_missing_best_checkpoint_and_run_dir_as_policy(capsys, tmp_path):
    """A run without best.pt but with latest.pt says so (was: "has not reached its first checkpoint"); a bc run
    directory given where its policy directory belongs names the policy directory."""
    run = tmp_path / "run"
    assert _run(capsys, "train", f"run_dir={run}", "quiet=true", *FAST)[0] == 0
    (run / "checkpoints" / "best.pt").unlink()
    code, _, err = _run(capsys, "eval", f"run={run}", "video=false")
    assert code == 2 and "has no best.pt yet" in err and "checkpoint=latest" in err, err
    assert _run(capsys, "eval", f"run={run}", "video=false", "checkpoint=latest")[0] == 0

    from robot_rl.policies.io import PolicyFormatError, load_policy

    (tmp_path / "bc" / "policy").mkdir(parents=True)
    (tmp_path / "bc" / "policy" / "config.json").write_text("{}")
    with pytest.raises(PolicyFormatError, match=f"{tmp_path / 'bc'} is a run directory; its policy is "):
        load_policy(tmp_path / "bc")
    # eval run= of a bc run points to eval policy= with the run's own task (before: "not a run directory")
    (tmp_path / "bc" / "bc_config.json").write_text('{"env": {"spec": "arm:push-sparse"}}')
    code, _, err = _run(capsys, "eval", f"run={tmp_path / 'bc'}")
    assert code == 2 and err.count("\n") == 1, err
    assert f"eval policy={tmp_path / 'bc' / 'policy'} env.spec=arm:push-sparse" in err, err


@pytest.mark.parametrize("command", ["serve-robot", "hil-train"])
def test_robot_commands_without_the_bridge_extra_say_how_to_install_it(capsys, monkeypatch, command):
    """gRPC is an extra (`.[robot]`) of the simulation install; without it a robot command is one line."""
    import sys

    monkeypatch.setitem(sys.modules, "grpc", None)  # `import grpc` raises ImportError
    code, _, err = _run(capsys, command)
    assert code == 2 and err.count("\n") == 1, err
    assert f"{command} needs the robot bridge's packages (grpcio is not installed)" in err and "-e '.[robot]'" in err
    import types

    monkeypatch.setitem(sys.modules, "grpc", types.SimpleNamespace(__version__="1.48.2"))  # TensorBoard's floor
    code, _, err = _run(capsys, command)
    assert code == 2 and "(grpcio 1.48.2 is older than 1.85)" in err, err


def test_finetune_takes_train_steps_and_steps_with_every_method():
    from robot_rl.cli.finetune import _loop_spelling

    # the policy methods (FinetuneConfig: top-level steps) ...
    assert _loop_spelling(["experiment=residual_push", "train.steps=7", "train.eval_every=3"], "") == [
        "experiment=residual_push", "steps=7", "eval_every=3"]
    # ... and wsrl (TrainConfig: train.steps)
    assert _loop_spelling(["experiment=wsrl_push", "steps=7", "seed=0,1"], "train.") == [
        "experiment=wsrl_push", "train.steps=7", "seed=0,1"]


def test_text_keys_take_the_text_as_typed():
    """YAML would read a token 0123 as the octal number 83; a text key keeps what was typed."""
    from robot_rl.cli.common import parse_args as _parse_args
    from robot_rl.cli.deploy import DeployArgs
    from robot_rl.collect import CollectArgs

    a = _parse_args(DeployArgs, ["token=0123", "out=1e3", "episodes=3", "teleop=null"], "deploy")
    assert (a.token, a.out, a.episodes, a.teleop) == ("0123", "1e3", 3, None)
    c = _parse_args(CollectArgs, ["env.spec=arm:reach", "task=true", "noise=0.5"], "collect")
    assert (c.env.spec, c.task, c.noise) == ("arm:reach", "true", 0.5)


def test_finetune_takes_the_method_from_the_command_line_or_the_runs_record(tmp_path, capsys):
    """No guessing from config.yaml's keys: method=, the preset's method, wsrl by default; on resume= the run's
    run.json, and a run without one is one line saying what to pass."""
    import json

    from robot_rl.cli.finetune import choose_method

    assert choose_method(["method=dsrl", "base_policy=x"]) == "dsrl"
    assert choose_method(["experiment=reinflow_push"]) == "reinflow"
    assert choose_method(["experiment=wsrl_push"]) == choose_method(["data.path=d", "offline.steps=5"]) == "wsrl"
    policy_run, sac_run, old_run = tmp_path / "policy", tmp_path / "sac", tmp_path / "old"
    for run, record in ((policy_run, {"command": "finetune", "method": "dsrl"}),
                        (sac_run, {"command": "train", "method": "sac"}), (old_run, None)):
        run.mkdir()
        (run / "config.yaml").write_text("method: dsrl\nsteps: 100\n")
        if record:
            (run / "run.json").write_text(json.dumps(record))
    assert choose_method([f"resume={policy_run}", "train.steps=200"]) == "dsrl"
    assert choose_method([f"resume={old_run}", "method=dsrl"]) == "dsrl"
    for args, expected in (
        ([f"resume={old_run}"], f"{old_run} has no run.json saying which method wrote it: resume it with method=<wsrl|"),
        ([f"resume={sac_run}"], f"{sac_run} is a train run: resume it with robot-rl train resume={sac_run}"),
        ([f"resume={policy_run}", "method=residual"], "is a method=dsrl run; resume it without method=residual"),
        (["method=ppo"], "method=ppo: choose one of wsrl, residual, dsrl, reinflow, dppo"),
        (["base_policy=x", "env.spec=arm:push"], "base_policy= is read by method=<residual|dsrl|reinflow|dppo|rl100>"),
    ):
        code, _, err = _run(capsys, "finetune", *args)
        assert code == 2 and err.count("\n") == 1 and expected in err, err
    code, _, err = _run(capsys, "eval", f"run={old_run}")  # eval reads the method there too
    assert code == 2 and err.count("\n") == 1 and f"finetune resume={old_run} method=<its method>" in err, err


def test_the_run_header_counts_one_critic_in_the_singular() -> None:
    """The default agent now runs one critic on Pendulum, `make train`'s task: its header said "1 critics"."""
    from robot_rl.agents.sac import CriticConfig, NetworkConfig, SACConfig
    from robot_rl.cli.train import _describe_agent

    one = _describe_agent(SACConfig(network=NetworkConfig(kind="hyper"), critic=CriticConfig(num_atoms=101, num=1)))
    assert "critic (101-atom): 1 critic, UTD" in one and "critics" not in one
    assert ": 2 critics, UTD" in _describe_agent(SACConfig(critic=CriticConfig(num=2)))


def test_the_run_header_names_the_precision() -> None:
    """A compile + bf16 run and an fp32 one printed the same header, so a log did not say which was measured."""
    from robot_rl.agents.sac import OptimiserConfig, SACConfig
    from robot_rl.cli.train import _describe_agent

    assert _describe_agent(SACConfig()).endswith(", fp32")
    assert _describe_agent(SACConfig(optimiser=OptimiserConfig(bf16=True, compile=True))).endswith(", bf16, compiled")


def test_eval_policy_on_another_task_is_one_line_unless_allowed(capsys, tmp_path):
    """A push BC policy evaluated on arm:reach ran silently; its config.json names its task (issue 56, item 2)."""
    from robot_rl.envs.arm import STATE_DIM
    from robot_rl.policies.bc_mlp import MLPPolicy
    from robot_rl.policies.io import save_policy

    save_policy(MLPPolicy(STATE_DIM, 4, horizon=2, execute=1, hidden=[8]), tmp_path / "bc" / "policy",
                metadata={"trained_by": "robot-rl bc", "tasks": ["push-sparse"]})
    code, _, err = _run(capsys, "eval", f"policy={tmp_path / 'bc' / 'policy'}", "env.spec=arm:reach", "episodes=1")
    assert code == 2 and err.count("\n") == 1, err
    assert "trained on push-sparse (task push), not on arm:reach (task reach)" in err
    assert "allow_other_task=true" in err
    code, _, err = _run(capsys, "eval", f"policy={tmp_path / 'bc' / 'policy'}", "env.spec=arm:reach", "episodes=1",
                        "allow_other_task=true")
    assert code == 0, err
    code, _, err = _run(capsys, "eval", f"policy={tmp_path / 'bc' / 'policy'}", "env.spec=arm:push", "episodes=1")
    assert code == 0, err  # the same task with another reward: its own task


def test_aggregate_of_runs_without_a_common_evaluation_step_is_one_line(capsys, tmp_path):
    """Was a TypeError traceback from formatting the final step (issue 56, item 4)."""
    for name, steps in (("a", (100, 200)), ("b", (150, 250))):
        (tmp_path / name).mkdir()
        rows = "".join(f"{s},{s / 100}\n" for s in steps)
        (tmp_path / name / "metrics.csv").write_text("env_step,eval_return_mean\n" + rows)
    code, _, err = _run(capsys, "aggregate", str(tmp_path / "a"), str(tmp_path / "b"), f"out={tmp_path / 'agg'}")
    assert code == 2 and err.count("\n") == 1, err
    assert "share no evaluation step" in err and "steps 150..250 (2)" in err
    assert not (tmp_path / "agg" / "seeds.json").exists()
