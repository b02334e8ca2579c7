"""Distillation of a multi-step policy into a one-step flow: the student learns the teacher's noise-to-chunk map, is
saved and exported as any policy, and the command's mistakes are one line."""

from pathlib import Path

import pytest
import torch
from robot_rl.policies.flow import FlowPolicy
from robot_rl.policies.io import load_policy, read_metadata

from robot_rl.bc import BCConfig, BCEnvArgs, train_bc
from robot_rl.cli import main
from robot_rl.collect import CollectArgs, CollectEnvArgs, collect
from robot_rl.datasets import read_dataset
from robot_rl.distill import DistillConfig, DistillError, distill, make_student, one_step

pytestmark = pytest.mark.usefixtures("one_thread")
TINY_BC = dict(steps=300, batch_size=64, hidden=[64, 64], horizon=4, execute=2, log_every=100, threads=1, quiet=True)


@pytest.fixture(scope="module")
def reach_demos(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("data") / "reach"
    collect(CollectArgs(env=CollectEnvArgs("arm:reach", num_envs=4), out=str(out), episodes=12, seed=0),
            message=lambda s: None)
    return out


@pytest.fixture(scope="module", params=["flow", "diffusion"])
def teacher(request, reach_demos, tmp_path_factory) -> Path:
    run = tmp_path_factory.mktemp("teacher") / request.param
    train_bc(BCConfig(dataset=str(reach_demos), policy=request.param, run_dir=str(run), num_inference_steps=8,
                      **TINY_BC))
    return run / "policy"


def _teacher_gap(student, teacher, obs, noise):
    """Mean squared distance, in the normalised space, from the teacher's 8-step chunk to the student's one step."""
    cond = teacher.condition(obs)
    with torch.no_grad():
        target = teacher._sample(cond, noise, True, None)
        return float(((one_step(student, cond, noise).clamp(-1, 1) - target) ** 2).mean())


def test_the_student_learns_the_teachers_chunks_from_the_same_noise(teacher, reach_demos, tmp_path):
    summary = distill(DistillConfig(teacher=str(teacher), dataset=str(reach_demos), run_dir=str(tmp_path / "d"),
                                    steps=400, batch_size=128, lr=1e-3, log_every=100, threads=1,
                                    latency_repeats=20, quiet=True))
    student, tutor = load_policy(summary["policy_dir"]), load_policy(teacher)
    assert isinstance(student, FlowPolicy) and student.num_inference_steps == 1
    assert (student.horizon, student.execute, student.action_dim) == (tutor.horizon, tutor.execute, tutor.action_dim)
    torch.manual_seed(1)
    obs = read_dataset(reach_demos).transitions.obs["state"]
    noise = torch.randn(obs.shape[0], *tutor.noise_shape)
    gap = _teacher_gap(student, tutor, obs, noise)
    # the untrained net's one step is far from the teacher's chain, and so is the teacher's own single step (a
    # flow's one Euler step lands on its conditional mean, not on its chain's end); the student is close
    assert gap < 0.1 * _teacher_gap(make_student(tutor, warm_start=False), tutor, obs, noise)
    with torch.no_grad():
        cond = tutor.condition(obs)
        own_step = float(((tutor._sample(cond, noise, True, 1) - tutor._sample(cond, noise, True, None)) ** 2).mean())
    assert gap < 0.5 * own_step
    assert summary["final_loss"] < 0.5 * summary["first_loss"], summary["loss_curve"]
    assert summary["latency"]["speedup_median"] > 2.0, summary["latency"]  # 8 network calls against 1
    meta = read_metadata(summary["policy_dir"])
    assert meta["trained_by"] == "robot-rl distill" and meta["teacher_steps"] == 8 and meta["tasks"]


def test_the_student_copies_the_teachers_normalisers_and_is_warm_started_from_a_flow(reach_demos, tmp_path):
    run = tmp_path / "flow"
    train_bc(BCConfig(dataset=str(reach_demos), policy="flow", run_dir=str(run), **TINY_BC))
    tutor = load_policy(run / "policy")
    student = make_student(tutor)
    assert torch.equal(student.obs_norm.shift, tutor.obs_norm.shift)
    assert torch.equal(student.action_norm.scale, tutor.action_norm.scale)
    assert all(torch.equal(a, b) for a, b in zip(student.net.parameters(), tutor.net.parameters(), strict=True))
    cold = make_student(tutor, warm_start=False)
    assert torch.equal(cold.obs_norm.shift, tutor.obs_norm.shift)  # normalisers always come along
    assert not torch.equal(next(cold.net.parameters()), next(tutor.net.parameters()))


def test_a_one_step_policy_is_refused_as_teacher(reach_demos, tmp_path):
    run = tmp_path / "mlp"
    train_bc(BCConfig(dataset=str(reach_demos), policy="mlp", run_dir=str(run), **TINY_BC))
    with pytest.raises(DistillError, match="MLPPolicy, which acts in one network call already"):
        distill(DistillConfig(teacher=str(run / "policy"), dataset=str(reach_demos), run_dir=str(tmp_path / "d"),
                              quiet=True))
    assert not (tmp_path / "d").exists()


def test_cli_distills_evaluates_and_exports_to_onnx(reach_demos, tmp_path, capsys):
    pytest.importorskip("onnx")
    run = tmp_path / "flow"
    train_bc(BCConfig(dataset=str(reach_demos), policy="flow", run_dir=str(run), **TINY_BC))
    out = tmp_path / "student"
    code = main(["distill", f"teacher={run / 'policy'}", f"dataset={reach_demos}", f"run_dir={out}", "steps=60",
                 "batch_size=32", "log_every=30", "threads=1", "env.spec=arm:reach", "eval_episodes=2",
                 "eval_max_episode_steps=10", "latency_repeats=5"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "[distill] step 60/60" in captured.out and "faster per chunk" in captured.out
    assert "success teacher" in captured.out
    code = main(["export", f"run={out}", f"out={tmp_path / 'exported'}", "format=onnx"])
    assert code == 0, capsys.readouterr().err
    assert (tmp_path / "exported" / "policy.onnx").is_file()


@pytest.mark.parametrize("args, expected", [
    ([], "distill needs teacher=<policy dir>"),
    (["teacher={tmp}/none"], "distill needs dataset="),
    (["teacher={tmp}/none", "dataset={ds}"], "teacher {tmp}/none does not exist"),
    (["teacher={tmp}", "dataset={tmp}/none"], "dataset {tmp}/none does not exist"),
    (["teacher={tmp}", "dataset={ds}", "zero_noise_fraction=1"], "zero_noise_fraction must be in [0, 1)"),
    (["teacher={tmp}", "dataset={ds}", "bogus=1"], "unknown key 'bogus' for distill"),
])
def test_cli_user_errors_are_one_line(reach_demos, tmp_path, capsys, args, expected):
    args = [a.format(ds=reach_demos, tmp=tmp_path) for a in args]
    code = main(["distill", f"run_dir={tmp_path / 'run'}", "threads=1", "quiet=true", *args])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("robot-rl: error:") and err.count("\n") == 1, err
    assert expected.format(tmp=tmp_path) in err, err
    assert not (tmp_path / "run").exists()


def test_help_lists_distill(capsys):
    assert main(["--help"]) == 0 and "robot-rl distill teacher=" in capsys.readouterr().out
    assert main(["distill", "--help"]) == 0
    out = capsys.readouterr().out
    assert "teacher=" in out and "zero_noise_fraction=0.125" in out


def test_a_diffusion_teachers_noise_network_does_not_initialise_the_student(reach_demos, tmp_path):
    run = tmp_path / "diffusion"
    train_bc(BCConfig(dataset=str(reach_demos), policy="diffusion", run_dir=str(run), **TINY_BC))
    tutor = load_policy(run / "policy")
    student = make_student(tutor)  # warm_start=True, but a noise predictor is no velocity field
    assert torch.equal(student.obs_norm.scale, tutor.obs_norm.scale)
    assert not torch.equal(next(student.net.parameters()), next(tutor.net.parameters()))


def test_dagger_adds_the_students_own_observations_labelled_by_the_teacher(reach_demos, tmp_path):
    run = tmp_path / "flow"
    train_bc(BCConfig(dataset=str(reach_demos), policy="flow", run_dir=str(run), **TINY_BC))
    summary = distill(DistillConfig(teacher=str(run / "policy"), dataset=str(reach_demos), run_dir=str(tmp_path / "d"),
                                    steps=20, batch_size=16, log_every=10, threads=1, latency_repeats=0, quiet=True,
                                    dagger_episodes=3, env=BCEnvArgs("arm:reach"), eval_episodes=1,
                                    eval_max_episode_steps=8))
    # 3 envs x 8 steps of the student's episodes join the dataset's frames
    assert summary["observations"] == {"dataset": len(read_dataset(reach_demos)), "student_episodes": 24}
    with pytest.raises(DistillError, match="dagger_episodes needs env.spec"):
        DistillConfig(teacher="t", dataset="d", dagger_episodes=2).validate()
