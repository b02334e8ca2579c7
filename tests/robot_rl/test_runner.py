"""The Runner's own mechanics, driven by a counting method (the learning methods are tested with real envs in
test_resume.py, finetune/ and hil/): time-based checkpoints, a method that stops early, runs without an
evaluation env, and the resume hint."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

import robot_rl.runner as runner_module
from robot_rl import checkpoint
from robot_rl.logger import METRIC_COLUMNS
from robot_rl.runner import MethodDefaults, Runner, RunSettings


@dataclass
class Config:
    seed: int = 0


class Counter(MethodDefaults):
    """Ten env steps per advance; every episode returns its index and succeeds on odd ones; stops at `stop_at`."""

    def __init__(self, stop_at: int | None = None) -> None:
        self.env_steps, self.advances, self.stop_at = 0, 0, stop_at

    @property
    def stopped(self) -> bool:  # type: ignore[override]
        return self.stop_at is not None and self.env_steps >= self.stop_at

    def start(self, seed: int) -> None:
        pass

    def advance(self) -> dict[str, Any]:
        self.env_steps += 10
        self.advances += 1
        return {"episode_return": torch.tensor([float(self.advances)]),
                "success": torch.tensor([float(self.advances % 2)])}

    def eval_policy(self) -> Any:
        raise AssertionError("no eval env: never called")

    def state_dict(self) -> dict[str, Any]:
        return {"counter": {"env_steps": self.env_steps, "advances": self.advances}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.env_steps, self.advances = state["counter"]["env_steps"], state["counter"]["advances"]


def settings(**kw: Any) -> RunSettings:
    return RunSettings(**{"steps": 100, "eval_every": 40, "seed": 0, "command": "x", "title": "t", "quiet": True,
                          "means_on_host": True,
                          "columns": [*METRIC_COLUMNS, "train_success_rate"], **kw})


def test_without_an_eval_env_the_training_episodes_are_logged_and_rank_best(tmp_path: Path) -> None:
    method = Counter()
    Runner(method, None, tmp_path, Config(), settings(score="success")).run()
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [int(r["env_step"]) for r in rows] == [40, 80, 100]
    assert [float(r["eval_return_mean"]) for r in rows] == [2.5, 6.5, 9.5]  # means of advances 1-4, 5-8, 9-10
    assert [float(r["success_rate"]) for r in rows] == [0.5, 0.5, 0.5]
    assert rows[0]["success_rate"] == rows[0]["train_success_rate"]
    assert checkpoint.load(tmp_path / "checkpoints" / "best.pt")["env_steps"] == 40  # success ranks: first of ties


def test_a_method_that_stops_ends_the_run_with_a_row_and_a_checkpoint(tmp_path: Path) -> None:
    """An operator's e-stop on the robot (`HILMethod.stopped`) ends hil-train before `steps`, saved and logged."""
    result = Runner(Counter(stop_at=50), None, tmp_path, Config(), settings()).run()
    assert result["env_steps"] == 50
    rows = list(csv.DictReader((tmp_path / "metrics.csv").open()))
    assert [int(r["env_step"]) for r in rows] == [40, 50]
    assert checkpoint.load(tmp_path / "checkpoints" / "latest.pt")["counter"]["env_steps"] == 50


def test_checkpoints_also_follow_the_clock(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """hil-train saves every `checkpoint_every_s` seconds: on a robot a crash should cost minutes, not the run."""
    now = [1000.0]
    monkeypatch.setattr(runner_module.time, "monotonic", lambda: now[0])
    saved: list[int] = []
    method = Counter()

    class Clocked(Counter):
        def advance(self) -> dict[str, Any]:
            now[0] += 25.0  # each advance takes 25 s
            return super().advance()

    method = Clocked()
    run = Runner(method, None, tmp_path, Config(), settings(checkpoint_every=10**9, checkpoint_every_s=60.0))
    save = run.save_checkpoint
    monkeypatch.setattr(run, "save_checkpoint", lambda: (saved.append(method.env_steps), save())[1])
    run.run()
    assert saved == [30, 60, 90, 100]  # after 75 s, 150 s, 225 s of advances, and at the end


def test_an_interrupted_run_prints_its_resume_hint(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    class Interrupted(Counter):
        def advance(self) -> dict[str, Any]:
            if self.env_steps >= 20:
                raise KeyboardInterrupt
            return super().advance()

    with pytest.raises(KeyboardInterrupt):
        Runner(Interrupted(), None, tmp_path, Config(), settings(resume_hint="the same command")).run()
    assert "interrupted at step 20; checkpoint saved. Continue with:\n  the same command" in capsys.readouterr().out
    assert checkpoint.load(tmp_path / "checkpoints" / "latest.pt")["counter"]["env_steps"] == 20


def test_best_can_rank_by_a_logged_column(tmp_path: Path) -> None:
    """hil-train ranks best.pt by autonomous success: success alone is 100% while the operator still takes over."""

    class Autonomous(Counter):
        def advance(self) -> dict[str, Any]:
            return {**super().advance(), "autonomous": float(self.advances == 6)}

    columns = [*METRIC_COLUMNS, "autonomous"]
    Runner(Autonomous(), None, tmp_path, Config(), settings(score="autonomous", columns=columns)).run()
    best = checkpoint.load(tmp_path / "checkpoints" / "best.pt")
    assert (best["env_steps"], best["score"]) == (80, 0.25)  # the row of advances 5-8


def test_ties_of_the_score_go_to_the_lower_tiebreak_column(tmp_path: Path) -> None:
    """A hil-train run whose policy never finished alone: best.pt must be the row where the operator took over least,
    not the first row logged (which deploy then ran: an untrained policy)."""

    class Takeovers(Counter):
        def advance(self) -> dict[str, Any]:
            rate = {1: 0.6, 2: 0.6, 3: 0.5, 4: 0.5, 5: 0.3, 6: 0.3, 7: 0.4, 8: 0.4, 9: 0.5, 10: 0.5}[self.advances + 1]
            return {**super().advance(), "autonomous": 0.0, "takeover": rate}

    columns = [*METRIC_COLUMNS, "autonomous", "takeover"]
    Runner(Takeovers(), None, tmp_path, Config(), settings(score="autonomous", score_tiebreak_lower="takeover",
                                                          eval_every=20, columns=columns)).run()
    best = checkpoint.load(tmp_path / "checkpoints" / "best.pt")
    assert best["env_steps"] == 60 and best["score"] == pytest.approx(-0.3e-4)  # the row of advances 5-6
    without = tmp_path / "plain"
    Runner(Takeovers(), None, without, Config(), settings(score="autonomous", eval_every=20, columns=columns)).run()
    assert checkpoint.load(without / "checkpoints" / "best.pt")["env_steps"] == 20  # before: the first row


def test_a_run_without_an_eval_env_shows_no_nan_and_no_negative_zero(tmp_path: Path, capsys) -> None:
    """hil-train's bar showed "eval -0.0" (the tie-break's -1e-4 * takeover rate) and its lines "± nan" (the std of
    training episodes, which there is none of) (issue 56, item 9c)."""

    class Takeovers(Counter):
        def advance(self) -> dict[str, Any]:
            return {**super().advance(), "autonomous": 0.0, "takeover": 0.5}

    columns = [*METRIC_COLUMNS, "autonomous", "takeover"]
    run = Runner(Takeovers(), None, tmp_path, Config(), settings(score="autonomous", score_tiebreak_lower="takeover",
                                                                columns=columns))
    run.run()
    out = capsys.readouterr().out
    assert "[train] step 40 | return 2.5 | success 50% |" in out, out
    assert "nan" not in out
    assert run._last_score() == 0.0 and str(run._last_score()) == "0.0"
