"""Behaviour cloning: chunk pairs within episodes, training each policy type, evaluation resets, the CLI."""

from pathlib import Path

import pytest
import torch
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.io import load_policy, read_metadata

from robot_rl.bc import BCConfig, BCError, chunk_pairs, evaluate_policy, train_bc
from robot_rl.cli import main
from robot_rl.collect import CollectArgs, CollectEnvArgs, collect

TINY = dict(
    steps=300, batch_size=64, hidden=[64, 64], horizon=4, execute=2, log_every=50, threads=1, quiet=True
)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory) -> Path:
    """12 episodes of the scripted reach expert (a proportional controller), about 60 frames."""
    out = tmp_path_factory.mktemp("data") / "reach"
    collect(
        CollectArgs(env=CollectEnvArgs("arm:reach", num_envs=4), out=str(out), episodes=12, seed=0), message=lambda s: None
    )
    return out


def test_chunks_stay_inside_their_episode_and_repeat_the_last_action():
    obs = torch.arange(5.0)[:, None]
    actions = torch.tensor([[10.0], [11.0], [12.0], [20.0], [21.0]])  # episodes of 3 and 2 frames
    pair_obs, chunks = chunk_pairs(obs, actions, torch.tensor([3, 2]), horizon=3)
    assert torch.equal(pair_obs, obs)
    assert chunks[..., 0].tolist() == [
        [10, 11, 12],
        [11, 12, 12],
        [12, 12, 12],
        [20, 21, 21],
        [21, 21, 21],
    ]
    with pytest.raises(ValueError, match="sum to 4"):
        chunk_pairs(obs, actions, torch.tensor([2, 2]), horizon=3)


@pytest.mark.parametrize("policy", ["mlp", "diffusion", "flow", "flow-shortcut"])
def test_training_lowers_the_loss_and_saves_a_loadable_policy(reach_demos, tmp_path, policy):
    run = tmp_path / "run"
    shortcut = policy == "flow-shortcut"
    policy = policy.removesuffix("-shortcut")
    summary = train_bc(BCConfig(dataset=str(reach_demos), policy=policy, run_dir=str(run), shortcut=shortcut, **TINY))
    assert summary["final_loss"] < 0.6 * summary["first_loss"], summary["loss_curve"]
    assert (run / "metrics.csv").read_text().count("\n") == 1 + 300 // 50
    assert (run / "bc_config.json").is_file()
    # a BC run is a run like the others: TensorBoard scalars and a plot beside metrics.csv (before: the CSV only)
    assert any((run / "tensorboard").iterdir()) and (run / "learning_curve.png").stat().st_size > 1000
    loaded = load_policy(run / "policy")
    assert loaded.horizon == 4 and loaded.execute == 2 and (loaded.obs_dim, loaded.action_dim) == (29, 4)
    assert getattr(loaded, "shortcut", False) == shortcut
    assert read_metadata(run / "policy")["dataset"] == str(reach_demos)
    action = loaded.act({"state": torch.zeros(3, 29)}, deterministic=True)
    assert action.shape == (3, 4) and action.abs().max() <= 1
    with pytest.raises(BCError, match="already holds a trained policy"):
        train_bc(BCConfig(dataset=str(reach_demos), policy=policy, run_dir=str(run), **TINY))


class RecordingPolicy(MLPPolicy):
    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.resets: list[torch.Tensor | None] = []

    def reset(self, env_ids=None):
        self.resets.append(None if env_ids is None else torch.as_tensor(env_ids).clone())
        super().reset(env_ids)


def test_evaluation_resets_the_queue_of_every_env_that_finished():
    torch.manual_seed(0)
    policy = RecordingPolicy(29, 4, horizon=8, execute=8, hidden=(16,))
    result = evaluate_policy(policy, "arm:reach", num_envs=3, seed=0, max_episode_steps=5)
    assert result["length_mean"] == 5 and result["success_rate"] is not None
    assert policy.resets[0] is None and policy.resets[-1] is None  # fresh queues before and after
    masks = [m for m in policy.resets[1:-1]]
    assert len(masks) == 5 and masks[-1].tolist() == [True, True, True]  # every step passes its done mask
    with pytest.raises(BCError, match="policy expects 29 and 4"):
        evaluate_policy(policy, "gym:Pendulum-v1", num_envs=1)


def _run(capsys, *args):
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_cli_trains_evaluates_and_saves(reach_demos, tmp_path, capsys):
    run = tmp_path / "run"
    code, out, err = _run(
        capsys,
        "bc",
        f"dataset={reach_demos}",
        "policy=flow",
        f"run_dir={run}",
        "steps=40",
        "batch_size=32",
        "hidden=[32,32]",
        "log_every=20",
        "num_inference_steps=4",
        "env.spec=arm:reach",
        "eval_episodes=2",
        "eval_max_episode_steps=10",
        "threads=1",
    )
    assert code == 0, err
    assert "[bc] step 40/40" in out and "done: flow policy, 40 steps" in out and "success rate" in out
    assert load_policy(run / "policy").num_inference_steps == 4


def test_cli_help_lists_bc_and_its_keys(capsys):
    assert "robot-rl bc dataset=" in _run(capsys, "--help")[1]
    code, out, _ = _run(capsys, "bc", "--help")
    assert code == 0
    for key in ["dataset=", "policy=mlp", "horizon=8", "execute=4", "num_inference_steps=10", "env.spec="]:
        assert key in out


@pytest.mark.parametrize(
    "args, expected",
    [
        (["policy=mlp"], "bc needs dataset=<dataset dir>"),
        (["dataset=/nonexistent/data"], "dataset /nonexistent/data does not exist"),
        (
            ["dataset={ds}", "policy=transformer"],
            "unknown policy 'transformer'; choose one of: mlp, diffusion, flow",
        ),
        (["dataset={ds}", "bogus=1"], "unknown key 'bogus' for bc; valid keys: dataset, policy"),
        (["dataset={ds}", "steps=many"], "steps"),
        (["dataset={ds}", "horizon=2", "execute=3"], "need 1 <= execute <= horizon"),
        (["dataset={ds}", "policy=mlp", "shortcut=true"], "shortcut=true is an option of policy=flow"),
        (["dataset={ds}", "--steps", "3"], "unknown option '--steps'"),
        (["dataset={tmp}"], "not a LeRobot dataset"),
        (["dataset={ds}", "steps=1", "env.spec=gym:Pendulum-v1"], "policy expects 29 and 4"),
        (["dataset={ds}", "steps=1", "env.spec=arm:nope"], "nope"),
    ],
)
def test_cli_user_errors_are_one_line(reach_demos, tmp_path, capsys, args, expected):
    args = [a.format(ds=reach_demos, tmp=tmp_path) for a in args]
    code, _, err = _run(capsys, "bc", f"run_dir={tmp_path / 'run'}", "threads=1", "quiet=true", *args)
    assert code == 2
    assert err.startswith("robot-rl: error:") and err.count("\n") == 1, err
    assert expected in err, err
    assert not (tmp_path / "run" / "policy").exists()  # every mistake is caught before training
