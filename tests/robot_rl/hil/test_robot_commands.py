"""The robot commands end to end on loopback: ``serve-robot`` in its own process, the others against it."""

from __future__ import annotations

import contextlib
import csv
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from robot_rl.cli import main
from robot_rl.datasets import read_dataset

TOKEN = "cli-test-token"
CLI = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())"]


@contextlib.contextmanager
def served_robot(*extra: str, control_hz: int = 50):
    """``robot-rl serve-robot`` (simulated reach at `control_hz`, plus `extra` keys) in a subprocess; yields its
    address."""
    env = {**os.environ, "ROBOT_RL_TOKEN": TOKEN}
    proc = subprocess.Popen(
        [*CLI, "serve-robot", "port=0", "task=reach", f"control_hz={control_hz}", "status_every=0", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
    )
    try:
        line = ""
        while "serving" not in line and proc.poll() is None:
            line = proc.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        assert match, f"serve-robot did not start: {line}{proc.stdout.read() if proc.poll() is not None else ''}"
        yield f"127.0.0.1:{match.group(1)}"
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=20)
        assert "server stopped; robot stopped" in out, out


@pytest.fixture
def robot_server():
    with served_robot() as address:
        yield address


def test_serve_robot_refuses_to_start_without_a_token(capsys, monkeypatch):
    monkeypatch.delenv("ROBOT_RL_TOKEN", raising=False)
    assert main(["serve-robot", "port=0"]) == 2
    assert "no token" in capsys.readouterr().err
    assert main(["serve-robot", "host=0.0.0.0", "allow_unauthenticated=true", "port=0"]) == 2
    assert "non-loopback" in capsys.readouterr().err


def test_teleop_without_an_operator_device_says_so_before_connecting(capsys):
    # nothing listens on this port: the missing device is named before the channel is opened
    assert main(["teleop", "robot=127.0.0.1:9", "teleop=null", "episodes=1"]) == 2
    err = capsys.readouterr().err
    assert "teleop needs an operator device: teleop=<keyboard|" in err and "connect" not in err


def test_wrong_token_is_one_clear_line(robot_server, capsys):
    code = main(["teleop", f"robot={robot_server}", "token=nope", "teleop=scripted", "episodes=1"])
    assert code == 2
    assert "refused the token" in capsys.readouterr().err


def test_teleop_records_demonstrations(robot_server, tmp_path, capsys):
    out = tmp_path / "demos"
    args = ["teleop", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", "teleop=scripted", "episodes=3",
            f"out={out}", "seed=0"]
    assert main(args) == 0
    assert "3 episodes (3 successful)" in capsys.readouterr().out
    data = read_dataset(out)
    assert len(data.episodes) == 3
    assert bool(data.intervention.all()) and int(data.transitions.terminated.sum()) == 3
    assert main(args) == 2  # the dataset exists: refuse to overwrite ...
    assert "append=true" in capsys.readouterr().err
    assert main([*args, "append=true", "episodes=1"]) == 0  # ... unless told to append
    assert len(read_dataset(out).episodes) == 4


def test_hil_train_then_deploy(robot_server, tmp_path, capsys):
    run = tmp_path / "hil"
    code = main(["hil-train", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", "steps=150", f"run_dir={run}",
                 "learning_starts=50", "agent.optimiser.batch_size=32", "agent.network.hidden_dims=[32,32]",
                 "teleop_args.patience=3", "teleop_args.takeover_steps=5"])
    assert code == 0
    out = capsys.readouterr().out
    assert "intervention rate" in out
    rows = list(csv.DictReader((run / "hil_metrics.csv").open()))
    assert rows and int(rows[-1]["env_steps"]) >= 150
    assert sum(int(r["interventions"]) for r in rows) > 0  # the scripted operator took over at least once
    data = read_dataset(run / "episodes")
    assert len(data) == int(rows[-1]["env_steps"])
    assert int(data.intervention.sum()) == sum(int(r["interventions"]) for r in rows)
    # the Runner's files, as for train and finetune: a row per log_every steps, TensorBoard, curve, checkpoints
    logged = list(csv.DictReader((run / "metrics.csv").open()))
    assert [int(r["env_step"]) for r in logged] == [int(rows[-1]["env_steps"])]  # log_every=500 > steps: the end
    assert float(logged[-1]["critic_loss"]) == float(logged[-1]["critic_loss"])  # the learner updated (not NaN)
    assert float(logged[-1]["intervention_rate"]) > 0
    # the human side: take-overs counted per episode, operator minutes over the run (the robot runs at 50 Hz)
    assert sum(int(r["takeovers"]) for r in rows) >= 1
    assert all(int(r["takeovers"]) <= int(r["interventions"]) for r in rows)
    driven = sum(int(r["interventions"]) for r in rows)
    assert float(logged[-1]["operator_minutes"]) == pytest.approx(driven / 50 / 60)
    assert "take-overs per episode" in out
    assert (run / "learning_curve.png").is_file() and (run / "tensorboard").is_dir()
    from robot_rl import checkpoint

    latest = checkpoint.load(run / "checkpoints" / "latest.pt")
    assert latest["learner"]["counters"]["transitions"] == int(rows[-1]["env_steps"])
    assert "replay" not in checkpoint.load(run / "checkpoints" / "best.pt")

    code = main(["deploy", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", f"checkpoint={run}",
                 "episodes=1"])
    assert code == 0
    assert "done: 1 episodes" in capsys.readouterr().out


def test_hil_train_with_the_simulated_person(robot_server, tmp_path, capsys):
    """teleop=person: the operator model takes over, its decisions timed in the robot's ticks (50 Hz here)."""
    run = tmp_path / "hil"
    code = main(["hil-train", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", "steps=100", f"run_dir={run}",
                 "learning_starts=50", "agent.optimiser.batch_size=16", "agent.network.hidden_dims=[16,16]",
                 "teleop=person", "teleop_args.patience_s=0.2", "teleop_args.seed=3"])
    assert code == 0, capsys.readouterr().err
    rows = list(csv.DictReader((run / "hil_metrics.csv").open()))
    assert sum(int(r["takeovers"]) for r in rows) >= 1 and sum(int(r["interventions"]) for r in rows) > 0


def test_hil_train_with_the_learner_on_ray(robot_server, tmp_path, capsys, monkeypatch):
    pytest.importorskip("ray")
    monkeypatch.delenv("RAY_worker_niceness", raising=False)
    run = tmp_path / "hil_ray"
    code = main(["hil-train", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", "steps=120", f"run_dir={run}",
                 "learning_starts=40", "agent.optimiser.batch_size=32", "agent.network.hidden_dims=[32,32]", "distributed=true",
                 "learner_name=test-learner"])
    out = capsys.readouterr()
    if code == 2 and "could not start or join Ray" in out.err:
        pytest.skip(f"Ray could not start on this machine: {out.err.strip()}")
    assert code == 0, out.err
    assert "learner on Ray" in out.out
    rows = list(csv.DictReader((run / "hil_metrics.csv").open()))
    assert int(rows[-1]["env_steps"]) >= 120
    ckpt = run / "learner" / "checkpoints" / "learner.pt"
    assert ckpt.is_file()
    from robot_rl import checkpoint

    state = checkpoint.load(ckpt)["learner"]
    assert state["counters"]["transitions"] >= 100  # the learner got (nearly) everything the actor sent
    assert state["counters"]["updates"] > 0
    # The Ray learner's counters reach the run's metrics (they were empty), and a local Ray cluster runs the learner
    # at the robot loop's priority (Ray's default niceness of 15 starved it on a busy machine).
    logged_rows = list(csv.DictReader((run / "metrics.csv").open()))
    logged = logged_rows[-1]
    assert int(float(logged["updates"])) > 0 and int(float(logged["transitions"])) > 0 and logged["pending_updates"] != ""
    # ... and so do its losses and Q (they were missing: a diverging Ray learner went unseen)
    assert any(r.get("critic_loss") not in (None, "", "nan") and r.get("q_mean") not in (None, "") for r in logged_rows)
    import os

    assert os.environ["RAY_worker_niceness"] == "0"
    assert main(["deploy", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", f"checkpoint={ckpt}", "episodes=1"]) == 0
    # the run's own checkpoints hold the actor weights the robot ran: deploy takes the run directory as well
    assert main(["deploy", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", f"checkpoint={run}", "episodes=1"]) == 0


def test_deploy_rejects_a_foreign_checkpoint(robot_server, tmp_path, capsys):
    bad = tmp_path / "x.pt"
    bad.write_bytes(b"not a checkpoint")
    assert main(["deploy", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", f"checkpoint={bad}"]) == 2
    assert "corrupt or not a robot_rl checkpoint" in capsys.readouterr().err


def test_serve_robot_runs_for_a_set_time():
    env = {**os.environ, "ROBOT_RL_TOKEN": TOKEN}
    t = time.monotonic()
    out = subprocess.run([*CLI, "serve-robot", "port=0", "run_for=1.5", "status_every=0.5"],
                         capture_output=True, text=True, env=env, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "[status]" in out.stdout and "server stopped" in out.stdout
    assert time.monotonic() - t < 30


def test_sigterm_during_hil_train_saves_the_learner_and_a_rerun_resumes(robot_server, tmp_path):
    """SIGTERM (a scheduler's or `kill`'s stop) takes hil-train's Ctrl-C path: the robot is held, the run saved
    (exit 130) and the same command resumes from it. Before, SIGTERM killed the process with nothing saved."""
    run = tmp_path / "hil"
    args = ["hil-train", f"robot={robot_server}", f"token={TOKEN}", "step_timeout_s=5", f"run_dir={run}",
            "learning_starts=50", "agent.optimiser.batch_size=32", "agent.network.hidden_dims=[32,32]"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen([*CLI, *args, "steps=100000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env)
    metrics, deadline = run / "hil_metrics.csv", time.monotonic() + 300
    while not (metrics.exists() and len(metrics.read_text().splitlines()) >= 2):  # header + the first episode
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, (proc.returncode, out, err)
    assert "checkpoint saved" in out and f"run_dir={run}" in out
    from robot_rl.checkpoint import load

    saved = load(run / "checkpoints" / "latest.pt")
    transitions, steps = saved["learner"]["counters"]["transitions"], saved["hil"]["env_steps"]
    # the session holds each transition back one step (to mark the episode's last one), so the interrupted
    # episode's newest step may not have reached the learner
    assert transitions >= 1 and 0 <= steps - transitions <= 1

    out = subprocess.run([*CLI, *args, f"steps={steps + 20}"], capture_output=True, text=True, env=env, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"resumed {run} at step {steps:,}" in out.stdout
    resumed = load(run / "checkpoints" / "latest.pt")
    assert resumed["learner"]["counters"]["transitions"] >= transitions + 20  # the buffers came back, then grew


def test_keyboard_teleop_without_a_terminal_is_one_line(robot_server, capsys, monkeypatch):
    """Was a RuntimeError traceback; the robot is held and the channel closed all the same."""
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    code = main(["teleop", f"robot={robot_server}", "step_timeout_s=5", "teleop=keyboard", "episodes=1"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "operator device KeyboardTeleop cannot start: KeyboardTeleop needs an interactive terminal" in err


def test_deploy_runs_an_exported_residual_policy_directory(robot_server, tmp_path, capsys, monkeypatch):
    """An exported residual RL result (robot-rl export) deploys like any policy directory: base chunks and the
    correction, the base's queue reset at every episode start."""
    import torch
    from robot_rl.envs.arm import STATE_DIM
    from robot_rl.policies import MLPPolicy, ResidualPolicy
    from robot_rl.policies.composed import base_spec
    from robot_rl.policies.io import save_policy

    # Seeded: an untrained policy's actions depend on the global RNG, so without a seed the suite's test order
    # decided them; some random policies drive the simulated hand fast enough for the server's measured-speed
    # supervisor to latch the e-stop (as it should), which is not what this test is about.
    torch.manual_seed(0)
    base = MLPPolicy(STATE_DIM, 4, horizon=4, execute=2, hidden=[16])
    actor = {"obs_dim": STATE_DIM + 4, "action_dim": 4, "hidden": [16]}
    save_policy(ResidualPolicy(base_spec(base), actor, scale=0.2), tmp_path / "exported")
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    code = main(["deploy", f"robot={robot_server}", "step_timeout_s=5", f"checkpoint={tmp_path / 'exported'}",
                 "episodes=2"])
    assert code == 0, capsys.readouterr().err
    assert "done: 2 episodes" in capsys.readouterr().out


def test_deploy_runs_a_saved_bc_policy_directory(robot_server, tmp_path, capsys, monkeypatch):
    """deploy took only SAC checkpoints; a BC (or ReinFlow/DPPO) policy directory now runs too, its action queue
    reset at every episode start."""
    from robot_rl.envs.arm import STATE_DIM
    from robot_rl.policies.bc_mlp import MLPPolicy
    from robot_rl.policies.io import save_policy

    save_policy(MLPPolicy(STATE_DIM, 4, horizon=4, execute=2, hidden=[16]), tmp_path / "bc" / "policy")
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    code = main(["deploy", f"robot={robot_server}", "step_timeout_s=5", f"checkpoint={tmp_path / 'bc'}",
                 "episodes=2"])
    assert code == 0, capsys.readouterr().err
    assert "done: 2 episodes" in capsys.readouterr().out


def _camera_policy(directory):
    from robot_rl.envs.arm import PROPRIO_DIM
    from robot_rl.policies.actor_policy import ActorPolicy
    from robot_rl.policies.io import save_policy

    policy = ActorPolicy(PROPRIO_DIM, 4, hidden=[16], cameras={"pixels/front": [24, 24, 3]}, encoder_feature_dim=4,
                         encoder_channels=2, encoder_layers=1)
    save_policy(policy, directory)
    return directory


def test_deploy_runs_a_camera_policy_on_a_robot_serving_its_cameras(tmp_path, capsys, monkeypatch):
    """An exported pixel policy runs on a robot that serves its camera at its size (the wrist camera it does
    not read is ignored), through the bridge's frames."""
    policy = _camera_policy(tmp_path / "pixels")
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    with served_robot("pixels=true", "pixel_size=[24,24]") as address:
        capsys.readouterr()
        assert main(["deploy", f"robot={address}", "step_timeout_s=5", f"checkpoint={policy}", "episodes=1"]) == 0
    assert "done: 1 episodes" in capsys.readouterr().out


def test_deploy_refuses_a_camera_policy_the_robot_cannot_feed_with_one_line(tmp_path, capsys, monkeypatch):
    """No such camera, or another size: one line naming both and the serve-robot keys, no episode started."""
    policy = _camera_policy(tmp_path / "pixels")
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    for extra, expected in [((), "serves cameras: none"), (("pixels=true", "pixel_size=[32,32]"), "at 32x32")]:
        with served_robot(*extra) as address:
            capsys.readouterr()
            assert main(["deploy", f"robot={address}", "step_timeout_s=5", f"checkpoint={policy}"]) == 2
        err = capsys.readouterr().err.strip()
        assert "pixels/front" in err and expected in err and "pixel_size=[24,24]" in err, err
        assert len(err.splitlines()) == 1


def test_hil_trainer_resumes_at_the_checkpoints_step_and_releases_the_robot(robot_server, tmp_path, capsys):
    """`HilTrainer` (robot_rl.hil.run), the run hil-train builds: a second one on the same run_dir continues from
    the first's checkpoint (its step count, the learner's transitions, the best score) before it runs a step, runs
    only the steps left, and logs on from there; each closes its channel when it ends."""
    from robot_rl import checkpoint
    from robot_rl.cli.hil_train import hil_train_args
    from robot_rl.hil.run import HilTrainer

    run = tmp_path / "hil"
    keys = dict(robot=robot_server, token=TOKEN, step_timeout_s=5, run_dir=str(run), learning_starts=1000,
                record=False, teleop_args={"patience": 3, "takeover_steps": 5})
    first = HilTrainer(hil_train_args()(steps=30, **keys))
    assert first.env_steps == 0 and first.run()["env_steps"] >= 30
    saved = checkpoint.load(run / "checkpoints" / "latest.pt")
    steps = saved["hil"]["env_steps"]
    second = HilTrainer(hil_train_args()(steps=steps + 20, **keys))
    assert second.env_steps == steps and second.method.learner.transitions == saved["learner"]["counters"]["transitions"]
    assert second.best_score == saved["best_score"] and second.evals == 1
    assert second.run()["env_steps"] >= steps + 20
    assert f"resumed {run} at step {steps:,}" in capsys.readouterr().out
    rows = list(csv.DictReader((run / "metrics.csv").open()))
    assert int(rows[0]["env_step"]) == steps and int(rows[1]["env_step"]) >= steps + 20
    for trainer in (first, second):
        with pytest.raises(ValueError):  # grpc's closed channel
            trainer.client.step(None)


def test_serve_robot_with_cameras_says_so_and_bad_keys_are_one_line(capsys, monkeypatch):
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    assert main(["serve-robot", "port=0", "pixels=true", "pixel_size=[32,40]", "image_encoding=png", "run_for=0.3",
                 "status_every=0"]) == 0
    out = capsys.readouterr().out
    assert "sim_arm:reach-pixels" in out and "cameras front 32x40 wrist 32x40 (png)" in out
    assert main(["serve-robot", "port=0", "pixels=true", "image_encoding=webp"]) == 2
    assert "image_encoding must be one of jpeg, png" in capsys.readouterr().err
    assert main(["serve-robot", "port=0", "driver=ur_rtde", "pixels=true"]) == 2
    assert "driver_args.cameras" in capsys.readouterr().err


def test_hil_train_learns_from_the_cameras_a_robot_serves_then_deploys(tmp_path, capsys, monkeypatch):
    """A robot serving cameras: hil-train's learner is a pixel agent (frames in every transition, stored in its
    buffers and checkpoint), the episodes are recorded with their videos, and deploy runs the run's actor +
    encoder on the same robot. The robot serves proprioception beside the frames; the scripted operator steers by
    the scene's privileged state, which reaches neither the learner nor the recording."""
    from robot_rl import checkpoint

    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    run = tmp_path / "hil_pixels"
    with served_robot("pixels=true", "pixel_size=[32,32]") as address:
        capsys.readouterr()
        code = main(["hil-train", f"robot={address}", "step_timeout_s=5", "steps=48", f"run_dir={run}",
                     "learning_starts=24", "agent.optimiser.batch_size=8", "agent.network.hidden_dims=[16]",
                     "agent.encoder.feature_dim=8", "agent.encoder.channels=4", "agent.encoder.layers=1",
                     "teleop_args.patience=3", "teleop_args.takeover_steps=5"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "from cameras pixels/front 32x32, pixels/wrist 32x32" in out.out
        assert "the robot waits for every update" in out.err and "distributed=true" in out.err  # on the CPU
        latest = checkpoint.load(run / "checkpoints" / "latest.pt")
        assert latest["learner"]["config"]["cameras"] == {"pixels/front": [32, 32, 3], "pixels/wrist": [32, 32, 3]}
        counters = latest["learner"]["counters"]
        assert counters["transitions"] >= 48 and counters["updates"] > 0
        online = latest["replay"]["online"]
        assert latest["learner"]["config"]["obs_dim"] == 7 and online["obs"]["state"].shape[-1] == 7  # proprioception
        assert counters["interventions"] > 0  # the operator took over, steering by the scene
        for group in ("pixels/front", "pixels/wrist"):  # the learner got the robot's frames
            frames = online["obs"][group]
            assert frames.dtype == torch.uint8 and frames.shape[1:] == (1, 32, 32, 3)
            assert frames[: counters["transitions"]].float().std() > 0
        data = read_dataset(run / "episodes", load_images=True)
        assert len(data) == counters["transitions"]
        assert {k: tuple(v.shape[1:]) for k, v in data.transitions.cameras.items()} == {
            "pixels/front": (32, 32, 3), "pixels/wrist": (32, 32, 3)}
        assert data.transitions.obs["state"].shape[1:] == (7,)

        assert main(["deploy", f"robot={address}", "step_timeout_s=5", f"checkpoint={run}", "episodes=1"]) == 0
        assert "done: 1 episodes" in capsys.readouterr().out


@pytest.mark.parametrize("setting, expected", [
    ("pixels=true", ["pixels=true", "serves no cameras", "serve-robot pixels=true", "pixels=false"]),
    ("mirror_online=true", ["mirror_online=true", "declares no mirror symmetry", "mirror_online=false"]),
    ("intervention_penalty=-1", ["intervention_penalty must be a finite number >= 0"]),
])
def test_hil_train_settings_the_robot_cannot_honour_are_one_line(robot_server, tmp_path, capsys, monkeypatch,
                                                                 setting, expected):
    """On the reach robot (no cameras, no mirror symmetry)."""
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    code = main(["hil-train", f"robot={robot_server}", "step_timeout_s=5", "steps=10",
                 f"run_dir={tmp_path / 'run'}", setting])
    assert code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and all(e in err for e in expected), err


def test_hil_train_learns_from_mirror_images_on_push(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    from robot_rl import checkpoint

    with served_robot("task=push") as address:
        demos = tmp_path / "demos"
        assert main(["teleop", f"robot={address}", "step_timeout_s=5", "teleop=scripted", "episodes=1",
                     f"out={demos}", "seed=0"]) == 0
        run = tmp_path / "hil"
        assert main(["hil-train", f"robot={address}", "step_timeout_s=5", "steps=60", f"run_dir={run}",
                     f"demos={demos}", "mirror_demos=true", "mirror_online=true", "learning_starts=30",
                     "agent.optimiser.batch_size=16", "agent.network.hidden_dims=[32,32]", "teleop_args.patience=3",
                     "teleop_args.takeover_steps=5"]) == 0
    capsys.readouterr()
    demo_steps = len(read_dataset(demos))
    saved = checkpoint.load(run / "checkpoints" / "latest.pt")
    learner = {**saved["learner"], **saved["replay"]}
    received, interventions = learner["counters"]["transitions"], learner["counters"]["interventions"]
    assert received >= 60 and interventions > 0
    assert learner["prior"]["size"] == 2 * (demo_steps + interventions)  # demos and interventions, each mirrored
    assert learner["online"]["size"] == 2 * received
    assert learner["config"]["mirror_state_sign"] and learner["config"]["mirror_online"]


def test_hil_train_from_cameras_learns_from_mirror_images_on_push(tmp_path, capsys, monkeypatch):
    """The push robot with cameras declares its front and wrist frames mirrored: a camera learner then stores every
    transition twice, the second with both cameras' frames flipped."""
    from robot_rl import checkpoint

    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    run = tmp_path / "hil"
    with served_robot("task=push", "pixels=true", "pixel_size=[16,16]", control_hz=20) as address:
        code = main(["hil-train", f"robot={address}", "step_timeout_s=5", "steps=12", f"run_dir={run}",
                     "teleop=null", "mirror_online=true", "learning_starts=6", "agent.optimiser.batch_size=8",
                     "agent.network.hidden_dims=[16]", "agent.encoder.feature_dim=8", "agent.encoder.channels=4",
                     "agent.encoder.layers=1", "record=false"])
    assert code == 0, capsys.readouterr().err
    saved = checkpoint.load(run / "checkpoints" / "latest.pt")
    config, received = saved["learner"]["config"], saved["learner"]["counters"]["transitions"]
    assert config["mirror_cameras"] == ["pixels/front", "pixels/wrist"] and len(config["mirror_state_sign"]) == 7
    online = saved["replay"]["online"]
    assert online["size"] == 2 * received >= 24
    front = online["obs"]["pixels/front"][:, 0]
    # the first chunk (Session sends one transition per chunk), then its mirror image
    assert torch.equal(front[1], front[0].flip(-2)) and not torch.equal(front[0], front[1])


@pytest.mark.slow  # an untrained policy drives the arm: on a loaded 2-core machine the server's reset motion can
# fail to bring the hand home within the reset deadline (seen 4 times in 6 runs at load 4), or at 50 Hz its
# random commands breach the hard speed limit; quiet, it passes in under a minute
def test_hil_train_from_cameras_with_pixel_demos_resumes_its_run(tmp_path, capsys, monkeypatch):
    """Camera demos from `robot-rl collect` (reach-pixels, the robot's 32x32 frames and proprioceptive state) fill
    the prior buffer; a second run in the same run_dir resumes the pixel learner, its frame buffers and the
    recording."""
    from robot_rl import checkpoint
    from robot_rl.collect import CollectArgs, CollectEnvArgs, collect

    demos = tmp_path / "demos"
    collect(CollectArgs(env=CollectEnvArgs(spec="arm:reach-pixels", num_envs=1, max_episode_steps=10,
                                           pixel_size=[32, 32]), out=str(demos), episodes=2, policy="expert", seed=0),
            message=lambda m: None)
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    run = tmp_path / "hil"
    args = ["hil-train", "step_timeout_s=5", f"run_dir={run}", "teleop=null", f"demos={demos}", "learning_starts=10",
            "agent.optimiser.batch_size=8", "agent.network.hidden_dims=[16]", "agent.encoder.feature_dim=8", "agent.encoder.channels=4",
            "agent.encoder.layers=1", "pixels=true"]
    # 20 Hz: an untrained learner's random commands can make the simulated arm's hand outrun the speed limit by
    # 2.5x at 50 Hz (at the edge of its reach), which latches the e-stop; at 20 Hz they stay under it.
    with served_robot("pixels=true", "pixel_size=[32,32]", control_hz=20) as address:
        assert main([*args, f"robot={address}", "steps=20"]) == 0
        first = checkpoint.load(run / "checkpoints" / "latest.pt")["learner"]["counters"]
        assert first["demo_transitions"] > 0 and first["updates"] > 0
        assert main([*args, f"robot={address}", f"steps={first['transitions'] + 20}"]) == 0  # episodes run to their end
    second = checkpoint.load(run / "checkpoints" / "latest.pt")["learner"]["counters"]
    assert second["transitions"] > first["transitions"] and second["demo_transitions"] == first["demo_transitions"]
    data = read_dataset(run / "episodes", load_images=True)
    assert len(data) == second["transitions"] and data.transitions.obs["pixels/wrist"].shape[0] > 0


def test_hil_train_with_a_missing_backbone_file_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    with served_robot("pixels=true", "pixel_size=[24,24]") as address:
        capsys.readouterr()
        assert main(["hil-train", f"robot={address}", "step_timeout_s=5", "steps=5", f"run_dir={tmp_path / 'r'}",
                     "teleop=null", "agent.encoder.kind=pretrained", f"agent.encoder.weights={tmp_path / 'r10.pt'}"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("robot-rl: error: agent.encoder.weights: backbone weights") and "no such file" in err
    assert len(err.splitlines()) == 1


def test_teleop_records_the_cameras_a_robot_serves(tmp_path, capsys, monkeypatch):
    """Teleop on a robot with cameras records camera demos (one video per camera beside the state) that
    RLPD's prior data reads back as frames."""
    from robot_rl.prior_data import OfflineData

    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    out = tmp_path / "demos"
    with served_robot("pixels=true", "pixel_size=[24,24]") as address:  # the scripted operator watches the scene
        assert main(["teleop", f"robot={address}", "step_timeout_s=5", "teleop=scripted", "episodes=2",
                     f"out={out}", "seed=0"]) == 0
    data = read_dataset(out)
    assert {"observation.images.front", "observation.images.wrist"} <= set(data.info["features"])
    frames = OfflineData.load(out, 0.99, cameras=("pixels/front", "pixels/wrist")).transitions.cameras
    assert frames["pixels/front"].shape[1:] == (24, 24, 3) and len(frames["pixels/front"]) == len(data)
    assert frames["pixels/wrist"].float().std() > 1  # real images, not a constant
    assert data.transitions.obs["state"].shape[1:] == (7,)  # proprioception: the scene's state is not recorded


# -- a learned reward: the success classifier on the robot's frames ------------------------------------------
def _forced_classifier(directory, size: int = 24, logit: float = 12.0):
    """A tiny saved classifier on the served cameras (front, wrist at `size`) whose verdict is fixed: probability
    sigmoid(`logit`) whatever the frames (12: success on every frame)."""
    from robot_rl.classifier import SuccessClassifier, save_classifier

    model = SuccessClassifier({"pixels/front": [size, size, 3], "pixels/wrist": [size, size, 3]}, feature_dim=4,
                              channels=4, layers=1, hidden=4)
    with torch.no_grad():
        model.head[-1].weight.zero_()
        model.head[-1].bias.fill_(logit)
    return save_classifier(model, directory)


def test_hil_train_rewards_come_from_the_classifier_on_the_frames(tmp_path, capsys, monkeypatch):
    """hil-train reward_classifier=<dir>: the actor judges each observation's frames; a classifier that always sees
    success ends every episode successfully after `consecutive` steps with reward 1 on that step only, in
    hil_metrics.csv, the learner's buffer and the recording; the robot's own (dense, negative) return is kept."""
    from robot_rl import checkpoint

    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    clf = _forced_classifier(tmp_path / "clf")
    run = tmp_path / "hil"
    with served_robot("pixels=true", "pixel_size=[24,24]", "driver_args.full_state=true") as address:
        capsys.readouterr()
        code = main(["hil-train", f"robot={address}", "step_timeout_s=5", "steps=12", f"run_dir={run}", "teleop=null",
                     "pixels=false", "learning_starts=100", "agent.optimiser.batch_size=8", "agent.network.hidden_dims=[16]",
                     f"reward_classifier={clf}", "reward_classifier_consecutive=3"])
        out = capsys.readouterr()
    assert code == 0, out.err
    assert f"reward from the classifier {clf}" in out.out
    rows = list(csv.DictReader((run / "hil_metrics.csv").open()))
    assert len(rows) == 4
    for row in rows:
        assert (row["length"], row["label"], row["success"], float(row["ret"])) == ("3", "success", "True", 1.0)
        assert float(row["driver_return"]) < 0 and row["driver_success"] == "False"  # reach's dense reward
    replay = checkpoint.load(run / "checkpoints" / "latest.pt")["replay"]["online"]
    assert replay["reward"][:12].flatten().tolist() == [0.0, 0.0, 1.0] * 4
    assert replay["terminated"][:12].flatten().tolist() == [False, False, True] * 4
    data = read_dataset(run / "episodes")
    assert data.transitions.reward.tolist() == [0.0, 0.0, 1.0] * 4 and int(data.transitions.terminated.sum()) == 4


def test_serve_robot_with_a_classifier_gives_every_client_its_reward(tmp_path, capsys, monkeypatch):
    """serve-robot reward_classifier=<dir>: the robot side replaces each observation's reward and success with the
    classifier's verdict (after `consecutive` commanded steps), so a plain client and teleop see it."""
    import numpy as np
    from robot_rl.real.client import RobotClient

    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    clf = _forced_classifier(tmp_path / "clf")
    with served_robot("pixels=true", "pixel_size=[24,24]", "driver_args.full_state=true",
                      f"reward_classifier={clf}", "reward_classifier_consecutive=2") as address:
        client = RobotClient(address, TOKEN, step_timeout_s=5)
        try:
            first = client.reset(0)
            assert (first.reward, first.success) == (0.0, False)
            steps = [client.step(np.zeros(client.spec().action_dim)).observation for _ in range(3)]
            assert [(o.reward, o.success) for o in steps] == [(0.0, False), (1.0, True), (1.0, True)]
            client.reset(1)  # a new episode: the streak starts over
            assert client.step(np.zeros(client.spec().action_dim)).observation.success is False
        finally:
            client.close()
        out = tmp_path / "demos"
        assert main(["teleop", f"robot={address}", "step_timeout_s=5", "teleop=scripted", "episodes=2",
                     f"out={out}", "seed=0"]) == 0
        assert "2 episodes (2 successful)" in capsys.readouterr().out
    assert read_dataset(out).transitions.reward.tolist() == [0.0, 1.0] * 2


def test_a_classifier_the_robot_cannot_feed_is_one_line(robot_server, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    clf = _forced_classifier(tmp_path / "clf")
    for args in (["serve-robot", "port=0", "pixels=true", "pixel_size=[32,32]", "run_for=0.3", "status_every=0"],
                 ["serve-robot", "port=0", "run_for=0.3", "status_every=0"],
                 ["hil-train", f"robot={robot_server}", "step_timeout_s=5", "steps=10", f"run_dir={tmp_path / 'run'}"]):
        assert main([*args, f"reward_classifier={clf}"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and f"reward_classifier={clf}" in err, err
        assert "serve-robot pixels=true pixel_size=[24,24]" in err, err
    for key, expected in [(f"reward_classifier={tmp_path / 'missing'}", "no such classifier directory"),
                          ("reward_classifier_threshold=0", "reward_classifier_threshold=0.0: must be in (0, 1]"),
                          ("reward_classifier_consecutive=0", "reward_classifier_consecutive=0: must be > 0")]:
        assert main(["hil-train", f"robot={robot_server}", "steps=10", f"run_dir={tmp_path / 'run'}", key]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and expected in err, err


def test_deploy_refuses_a_policy_of_another_task_with_one_line(robot_server, tmp_path, capsys, monkeypatch):
    """A push policy deployed to a reach robot ran silently; its config.json names its task (issue 56, item 2)."""
    from robot_rl.envs.arm import STATE_DIM
    from robot_rl.policies.bc_mlp import MLPPolicy
    from robot_rl.policies.io import save_policy

    save_policy(MLPPolicy(STATE_DIM, 4, horizon=4, execute=2, hidden=[16]), tmp_path / "bc" / "policy",
                metadata={"tasks": ["push"]})
    monkeypatch.setenv("ROBOT_RL_TOKEN", TOKEN)
    args = ["deploy", f"robot={robot_server}", "step_timeout_s=5", f"checkpoint={tmp_path / 'bc'}", "episodes=1"]
    assert main(args) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "trained on push (task push), not on sim_arm:reach (task reach)" in err, err
    assert main([*args, "allow_other_task=true"]) == 0, capsys.readouterr().err
