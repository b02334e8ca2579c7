"""Seeded learning runs through the real CLI. Marked slow: `make test` runs the Pendulum one; `make test-slow`
runs them all."""

import csv

import pytest

from robot_rl.cli import main

pytestmark = pytest.mark.slow


def _train(run_dir, *overrides) -> list[dict[str, float]]:
    assert main(["train", f"run_dir={run_dir}", "quiet=true", "train.video=false", *overrides]) == 0
    with open(run_dir / "metrics.csv") as f:
        return [{k: float(v) for k, v in r.items() if v != ""} for r in csv.DictReader(f)]


def test_pendulum_sac_reaches_minus_250_within_10k_steps(tmp_path):
    """The default agent (agent=simba, one critic on Pendulum) on the default task; measured (seed 0, one thread):
    -234 at 3k steps, -278 at 6k, -190 at 10k."""
    rows = _train(tmp_path / "run", "experiment=pendulum", "seed=0")
    assert rows[-1]["env_step"] == 10_000
    best = max(r["eval_return_mean"] for r in rows)
    assert best >= -250, [round(r["eval_return_mean"]) for r in rows]
    # and it stays solved: the last evaluation is solved too, not a lucky spike
    assert rows[-1]["eval_return_mean"] >= -300, [round(r["eval_return_mean"]) for r in rows]


def test_dmc_cartpole_swingup_reaches_700_within_100k_env_steps(tmp_path):
    # action repeat 8: 12,500 agent steps are 100k environment (control) steps
    rows = _train(tmp_path / "run", "experiment=cartpole_swingup", "seed=0")
    assert rows[-1]["env_step"] == 12_500
    assert max(r["eval_return_mean"] for r in rows) >= 700, [round(r["eval_return_mean"]) for r in rows]


def test_pendulum_compiled_learns_as_well_as_eager(tmp_path):
    """torch.compile must not silently break convergence (peers have shipped that bug)."""
    eager = _train(tmp_path / "eager", "experiment=pendulum", "seed=1", "train.steps=8000")
    compiled = _train(tmp_path / "compiled", "experiment=pendulum", "seed=1", "train.steps=8000", "agent.optimiser.compile=true")
    e, c = eager[-1]["eval_return_mean"], compiled[-1]["eval_return_mean"]
    assert e >= -300 and c >= -300, (e, c)
    assert abs(e - c) < 100, (e, c)


def test_rlpd_with_20_demos_learns_sparse_push(tmp_path):
    """The RLPD result of the tasks-and-datasets issue, shortened: 20 scripted demos, sparse reward.

    Measured with the preset (gamma 0.95, the demos' and the online data's mirror images, two critic steps per env
    step; seed 0, 1 thread, bench/results/push_rlpd): 30% at 10k env steps, 40% at 12k, 50% at 14k, 90% at 20k;
    SAC from scratch 0% throughout.
    """
    demos = tmp_path / "push_demos"
    assert main(["collect", "env.spec=arm:push-sparse", "policy=expert", "episodes=20", f"out={demos}"]) == 0
    rows = _train(tmp_path / "rlpd", "experiment=rlpd_push", f"data.path={demos}", "seed=0", "threads=1",
                  "train.steps=14000")
    assert max(r["success_rate"] for r in rows) >= 0.1, [r["success_rate"] for r in rows]
