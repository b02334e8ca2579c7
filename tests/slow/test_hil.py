"""HIL-SERL on the simulated arm through the real commands: a scripted operator takes over when the policy stops
making progress; the policy must learn reach so that the operator is no longer needed, then solve it alone.
Marked slow (about 5 minutes: the robot runs in real time at 20 Hz); `make test-slow` runs it."""

from __future__ import annotations

import csv
import re

import pytest
from robot_rl.real.drivers.sim_arm import SimArm
from robot_rl.real.server import RobotServer, ServerConfig

from robot_rl.cli import main

pytestmark = pytest.mark.slow
TOKEN = "slow-hil"


def test_hil_train_learns_reach_and_the_intervention_rate_falls(tmp_path, capsys):
    server = RobotServer(SimArm(task="reach", seed=0), ServerConfig(port=0, token=TOKEN))
    address = f"127.0.0.1:{server.start()}"
    try:
        run = tmp_path / "hil"
        assert main(["hil-train", f"robot={address}", f"token={TOKEN}", "step_timeout_s=5", "steps=3500", f"run_dir={run}",
                     "seed=0"]) == 0
        rows = list(csv.DictReader((run / "hil_metrics.csv").open()))

        def rate(eps: list[dict[str, str]]) -> float:
            return sum(int(r["interventions"]) for r in eps) / sum(int(r["length"]) for r in eps)

        first, last = rate(rows[:20]), rate(rows[-20:])
        assert first > 0.2 and last < 0.05, (first, last)
        capsys.readouterr()
        assert main(["deploy", f"robot={address}", f"token={TOKEN}", "step_timeout_s=5", f"checkpoint={run}",
                     "episodes=20", "seed=5000"]) == 0
        out = capsys.readouterr().out
        successes = int(re.search(r"done: .* success (\d+)/20", out).group(1))
        assert successes >= 18, out
    finally:
        server.stop()
