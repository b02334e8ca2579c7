"""`robot-rl finetune method=...` end to end on the arm: each method from a saved BC policy, the run directory,
resume, and one-line user errors."""

import csv
from pathlib import Path

import pytest
import torch
from robot_rl.policies.actor_policy import ActorPolicy
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import load_policy, save_policy

from robot_rl import envs
from robot_rl.cli import main
from robot_rl.config import compose_config, presets
from robot_rl.finetune.config import FinetuneConfig

SPEC = "arm:reach-sparse"
COMMON = ["env.spec=" + SPEC, "env.max_episode_steps=12", "env.num_eval_envs=2", "threads=1", "quiet=true",
          "steps=48", "eval_every=24"]
SMALL_SAC = ["agent.network.hidden_dims=[32,32]", "agent.network.critic_width=32", "agent.network.actor_width=32",
             "agent.optimiser.batch_size=16"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    """Untrained tiny policies of each kind, saved as robot-rl bc would."""
    with envs.make(SPEC) as env:
        (obs_dim,), act_dim = env.observation_spec["state"][0], env.action_dim
    root = tmp_path_factory.mktemp("bases")
    torch.manual_seed(0)
    kinds = {
        "mlp": MLPPolicy(obs_dim, act_dim, horizon=4, execute=2, hidden=[16]),
        "flow": FlowPolicy(obs_dim, act_dim, horizon=4, execute=2, hidden=[16], num_inference_steps=2),
        "diffusion": DiffusionPolicy(obs_dim, act_dim, horizon=4, execute=2, hidden=[16], num_train_steps=20,
                                     num_inference_steps=3),
    }
    kinds["actor"] = ActorPolicy(obs_dim, act_dim, hidden=[16])  # an exported SAC result: not a base policy
    return {k: save_policy(p, root / k) for k, p in kinds.items()}


def rows(run_dir: Path) -> list[dict]:
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize(
    "method, base, extra",
    [
        ("residual", "mlp", ["residual.learning_starts=16", "residual.critic_warmup_updates=8", *SMALL_SAC]),
        ("dsrl", "flow", ["dsrl.learning_starts=16", *SMALL_SAC]),
        ("dsrl", "flow", ["dsrl.learning_starts=16", "dsrl.aliased=true", *SMALL_SAC]),
        ("reinflow", "flow", ["env.num_envs=2", "ppo.rollout_steps=12", "ppo.minibatch_size=8"]),
        ("dppo", "diffusion", ["env.num_envs=2", "ppo.rollout_steps=12", "ppo.minibatch_size=8", "dppo.ft_steps=3",
         "dppo.num_inference_steps=3"]),
    ],
)
def test_each_method_runs_from_a_saved_policy_and_resumes(bases, tmp_path, capsys, method, base, extra) -> None:
    run_dir = tmp_path / "run"
    args = ["finetune", f"method={method}", f"base_policy={bases[base]}", f"run_dir={run_dir}", *COMMON, *extra]
    assert main(args) == 0, capsys.readouterr().err
    logged = rows(run_dir)
    assert [int(float(r["env_step"])) for r in logged][0] == 0  # the BC starting point is evaluated first
    assert int(float(logged[-1]["env_step"])) >= 48 and logged[-1]["success_rate"] != ""
    assert (run_dir / "checkpoints" / "latest.pt").is_file() and (run_dir / "learning_curve.png").is_file()
    if method in ("reinflow", "dppo"):  # the policy itself was fine-tuned: it is saved as a policy directory
        assert isinstance(load_policy(run_dir / "policy"), type(load_policy(bases[base])))
        capsys.readouterr()
        assert main(["eval", f"policy={run_dir / 'policy'}", f"env.spec={SPEC}", "episodes=3"]) == 0
        assert "3 episodes" in (out := capsys.readouterr().out) and "success rate" in out, out
    assert main(["finetune", f"resume={run_dir}", "steps=72"]) == 0, capsys.readouterr().err
    assert int(float(rows(run_dir)[-1]["env_step"])) >= 72
    # eval run= of a fine-tuning run (was "unknown config key 'method'"): its method's evaluation policy
    capsys.readouterr()
    assert main(["eval", f"run={run_dir}", "episodes=3", "video=false"]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"{method} fine-tuning, best checkpoint" in out and "| 3 episodes |" in out and "success rate" in out


@pytest.mark.parametrize(
    "args, expected",
    [
        (["method=dsrl", "base_policy=MLP"], "dsrl steers a diffusion or flow policy"),
        (["method=reinflow", "base_policy=MLP"], "reinflow fine-tunes a flow policy"),
        (["method=ppo", "base_policy=MLP"], "method=ppo: choose one of wsrl, residual, dsrl, reinflow, dppo"),
        (["method=residual", "base_policy=nowhere"], "base_policy nowhere does not exist"),
        (["method=residual", "base_policy=ACTOR"], "is a ActorPolicy; fine-tuning starts from a behaviour-cloning"),
        (["method=residual", "base_policy=MLP", "residual.scal=0.1"], "residual.scal"),
        (["method=residual", "base_policy=MLP", "env.spec=gym:Pendulum-v1"], "use the env it was trained on"),
        (["experiment=residual_nothing"], None),
        # was "valid keys under train: " and an empty list
        (["method=residual", "base_policy=MLP",
          "train.bogus=1"], "this command has no 'train' group; valid keys: seed, device"),
    ],
)
def test_user_errors_are_one_line(bases, tmp_path, capsys, args, expected) -> None:
    args = [a.replace("MLP", str(bases["mlp"])).replace("ACTOR", str(bases["actor"])) for a in args]
    code = main(["finetune", f"run_dir={tmp_path / 'r'}", *COMMON, *args])
    err = capsys.readouterr().err.strip()
    if expected is None and "push" in " ".join(args):  # the arm's push has another observation size
        expected = "use the env it was trained on"
    if expected is None:  # an unknown preset falls back to the offline-to-online finetune, which says what it needs
        assert code == 2 and err.count("\n") == 0
        return
    assert code == 2 and err.startswith("robot-rl: error:") and expected in err and err.count("\n") == 0, err


@pytest.mark.parametrize("name", presets("finetune"))
def test_every_preset_composes_and_names_its_method(name: str) -> None:
    cfg = compose_config("finetune", FinetuneConfig, [f"finetune={name}"])
    method, task = name.split("_", 1)
    assert cfg.method == method and all(word in cfg.env.spec.lower() for word in task.split("_"))
    assert cfg.base_policy.startswith("runs/")


@pytest.mark.parametrize(
    "args, expected",
    [
        (["policy=MLP"], "needs env.spec=<spec>"),
        (["policy=MLP", "run=somewhere", f"env.spec={SPEC}"], "run=<run dir>, or policy=<policy dir> env.spec=<spec>"),
        (["policy=nowhere", f"env.spec={SPEC}"], "nowhere"),
        (["policy=MLP", "env.spec=gym:Pendulum-v1"], "Pendulum"),
    ],
)
def test_eval_of_a_policy_directory_explains_bad_input(bases, capsys, args, expected) -> None:
    code = main(["eval", *(a.replace("MLP", str(bases["mlp"])) for a in args)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and expected in err and err.count("\n") == 0, err
