"""The statistics every learning figure states: IQM, bootstrap intervals, curves over seeds, results folders."""

import math

import numpy as np
import pytest

from robot_rl.stats import (
    bootstrap_ci,
    copy_run_files,
    format_summary,
    iqm,
    load_curve,
    plot_curves,
    summarize,
    summarize_runs,
)


def _run(path, rows: list[tuple[int, float | str]]):
    path.mkdir(parents=True)
    lines = ["env_step,eval_return_mean,critic_loss"] + [f"{s},{v},0.1" for s, v in rows]
    (path / "metrics.csv").write_text("\n".join(lines) + "\n")
    return path


@pytest.mark.parametrize(("values", "expected"), [
    ([1, 2, 3, 4], 2.5),  # the middle two
    ([0, 10, 10, 10, 1000], 10.0),  # an outlier seed does not move it
    ([1, 2, 3, 4, 5], 3.0),  # 2.5 middle runs: 2 and 4 at weight 0.75, 3 whole
    ([7], 7.0),
])
def test_iqm_is_the_mean_of_the_middle_half(values, expected):
    assert iqm(values) == pytest.approx(expected)
    assert iqm(list(reversed(values))) == pytest.approx(expected)
    assert math.isnan(iqm([]))


def test_iqm_matches_the_trimmed_mean_when_quarters_are_whole_runs():
    x = np.random.default_rng(0).normal(size=8)
    assert iqm(x) == pytest.approx(np.sort(x)[2:6].mean())


def test_bootstrap_interval_brackets_the_statistic_and_is_reproducible():
    x = np.random.default_rng(1).normal(5.0, 1.0, size=10)
    lo, hi = bootstrap_ci(x, np.mean)
    assert lo < x.mean() < hi and hi - lo < 2.0
    assert (lo, hi) == bootstrap_ci(x, np.mean)  # seeded
    assert bootstrap_ci([3.0], np.mean) == (3.0, 3.0)  # one seed: no interval to speak of
    narrow = bootstrap_ci(x, np.mean, confidence=0.5)
    assert lo < narrow[0] < narrow[1] < hi


def test_summarize_drops_missing_values_and_says_one_seed_is_an_anecdote():
    s = summarize([1.0, None, float("nan"), 3.0])
    assert s["n"] == 2 and s["mean"] == 2.0 and s["values"] == [1.0, 3.0]
    assert summarize([])["n"] == 0 and format_summary(summarize([])) == "no runs"
    assert "an anecdote" in format_summary(summarize([5.0]))
    assert format_summary(summarize([1.0, 2.0, 3.0, 4.0])).startswith("IQM 2 [")


def test_curves_aggregate_at_the_steps_every_run_shares(tmp_path):
    a = _run(tmp_path / "a", [(1000, 1.0), (2000, ""), (3000, 3.0)])  # 2000: evaluated nothing
    b = _run(tmp_path / "b", [(1000, 2.0), (3000, 5.0), (4000, 9.0)])
    assert load_curve(a) == {1000.0: 1.0, 3000.0: 3.0}
    runs = summarize_runs([a, b])
    assert [p["env_step"] for p in runs["curve"]] == [1000.0, 3000.0]
    assert runs["final"]["mean"] == 4.0 and runs["final"]["n"] == 2
    with pytest.raises(FileNotFoundError, match="run directory"):
        load_curve(tmp_path / "missing")
    assert plot_curves({"both": runs}, tmp_path / "plot.png").stat().st_size > 0


def test_copy_run_files_takes_the_small_files_and_logs_never_checkpoints(tmp_path):
    run = _run(tmp_path / "runs" / "s0", [(1000, 1.0)])
    (run / "config.yaml").write_text("seed: 0\n")
    (run / "checkpoints").mkdir()
    (run / "checkpoints" / "latest.pt").write_bytes(b"0" * 100)
    (tmp_path / "runs" / "s0.log").write_text("done\n")
    dest = copy_run_files(run, tmp_path / "results" / "s0",
                          logs={"output.log": tmp_path / "runs" / "s0.log", "absent.log": tmp_path / "nope"})
    assert sorted(p.name for p in dest.iterdir()) == ["config.yaml", "metrics.csv", "output.log"]
