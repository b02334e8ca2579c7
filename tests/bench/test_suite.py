"""Issue 60's suite score (bench/suite.py): returns on SimbaV2's scale, the stratified IQM and the per-task marks."""

import datetime
import json

import numpy as np
import pytest

import bench.sample_efficiency as sb
from bench.reference import SUITE_TASKS, published_mean
from bench.suite import (
    paired_comparison,
    paired_table,
    sign_test,
    stratified_iqm_ci,
    suite_summary,
    suite_table,
)
from robot_rl import stats


def _results(values: dict[str, list[float]]) -> dict:
    return {"tasks": {task: {"libraries": {"ours": {"final": {"n": len(v), "values": v}}}}
                      for task, v in values.items()}}


def test_returns_at_simbav2s_means_score_one_and_missing_tasks_are_not_counted():
    simba = {task: published_mean(task) for task in ("hopper", "ant", "walker-run")}
    suite = suite_summary(_results({task: [m, m, m] for task, m in simba.items()}))
    assert suite["iqm"] == pytest.approx(1.0) and suite["iqm_ci"] == pytest.approx([1.0, 1.0])
    assert suite["n_tasks"] == 3 and suite["n_scores"] == 9 and suite["at_or_above_simbav2"] == 3
    assert suite["missing"] == [t for t in SUITE_TASKS if t not in simba]
    assert suite["below_sac"] == []
    assert "Not run yet: halfcheetah" in suite_table(suite)


def test_a_task_below_the_published_sac_mean_is_named_and_its_sac_mark_is_marked_provisional():
    sac_cheetah_run = 177.8  # SAC's published dm_control mean, 3 seeds (bench/reference/README.md)
    suite = suite_summary(_results({"cheetah-run": [100.0, 120.0, 110.0], "hopper": [3000.0] * 3}))
    assert suite["below_sac"] == ["cheetah-run"]
    entry = suite["tasks"]["cheetah-run"]
    assert entry["sac_mean"] == pytest.approx(sac_cheetah_run, abs=0.1) and entry["sac_seeds"] == 3
    assert entry["normalised_mean"] == pytest.approx(110.0 / published_mean("cheetah-run"))
    assert "3 seeds, provisional" in suite_table(suite)
    assert suite["at_or_above_simbav2"] == 1  # hopper's 3,000 is above SimbaV2's 2,821


def test_the_stratified_bootstrap_keeps_every_task_in_each_resample():
    # two tasks of two seeds, one at 0 and one at 1: resampling the four runs together draws four 0s (IQM 0) or four
    # 1s in some resamples; within tasks every resample is two 0s and two 1s, whose IQM is 0.5
    lo, hi = stratified_iqm_ci({"a": [0.0, 0.0], "b": [1.0, 1.0]}, samples=500)
    assert lo == hi == pytest.approx(0.5)
    per_task = {"a": list(np.linspace(0.5, 1.5, 5)), "b": list(np.linspace(0.8, 1.2, 5))}
    lo, hi = stratified_iqm_ci(per_task, samples=500)
    assert lo < 1.0 < hi


def test_the_report_writes_the_suite_into_the_results_file_and_draws_its_plot(tmp_path, monkeypatch):
    out = tmp_path / "sample_efficiency"
    monkeypatch.setattr(sb, "OUT_DIR", out)
    monkeypatch.setattr(sb, "RESULTS_DIR", tmp_path)
    for task, value in (("ant", 4000.0), ("reacher-hard", 500.0)):
        path = out / task / "ours" / "seed_0"
        path.mkdir(parents=True)
        step = sb.TASKS[task].agent_steps
        path.joinpath("metrics.csv").write_text(f"env_step,wall_time_s,eval_time_s,eval_return_mean,eval_length_mean\n"
                                                f"{step},100.0,1.0,{value},480\n")
    assert sb.main(["--report", "--out-dir", str(out)]) == 0
    results = json.loads(next(tmp_path.glob("*-sample-efficiency.json")).read_text())
    suite = results["suite"]
    assert set(suite["tasks"]) == {"ant", "reacher-hard"} and suite["below_sac"] == ["reacher-hard"]
    assert suite["tasks"]["ant"]["normalised"] == [pytest.approx(4000.0 / published_mean("ant"))]
    assert (out / "suite.png").stat().st_size > 1000
    assert "normalised IQM" in results["table"]
    # a task below SimbaV2 gets its runs' last diagnostics, where issue 60 asks to look for why
    assert suite["tasks"]["reacher-hard"]["diagnostics"]["eval_length_mean"] == 480.0
    assert "| dmc:reacher-hard | 480 |" in results["table"]


def _runs(values: dict[str, dict[int, float]]) -> dict:
    return {"tasks": {task: {"libraries": {"ours": {
        "final": {"n": len(v), "values": list(v.values())}, "runs": [f"/x/{task}/ours/seed_{s}" for s in v]}}}
        for task, v in values.items()}}


def test_a_variant_is_scored_against_the_default_only_on_the_task_seed_pairs_both_ran():
    m = {task: published_mean(task) for task in ("hopper", "walker-run", "finger-spin")}
    variant = _runs({"hopper": {0: 2 * m["hopper"], 1: 2 * m["hopper"]}, "walker-run": {0: m["walker-run"]},
                     "finger-spin": {0: 0.5 * m["finger-spin"]}})
    # the default has seeds the variant lacks (hopper seed 2, walker-run seed 1) and the variant has a task the
    # default lacks: none of those may count, or the comparison mixes the change with which runs exist
    baseline = _runs({"hopper": {0: m["hopper"], 1: m["hopper"], 2: 100 * m["hopper"]},
                      "walker-run": {0: m["walker-run"], 1: 100 * m["walker-run"]}})
    comp = paired_comparison(variant, baseline, samples=200)
    assert set(comp["tasks"]) == {"hopper", "walker-run"} and comp["n_pairs"] == 3
    assert comp["tasks"]["hopper"]["seeds"] == [0, 1]
    assert comp["tasks"]["hopper"]["difference"] == pytest.approx(1.0)
    assert comp["tasks"]["walker-run"]["difference"] == pytest.approx(0.0)
    assert comp["better"] == ["hopper"] and comp["worse"] == []
    assert comp["variant_iqm"] == pytest.approx(stats.iqm([2.0, 2.0, 1.0])) and comp["baseline_iqm"] == pytest.approx(1.0)
    lo, hi = comp["difference_ci"]
    assert lo <= comp["difference"] <= hi
    assert f"difference **{comp['difference']:+.2f}**" in paired_table(comp, "variant", "default")


def test_the_sign_test_is_exact():
    assert sign_test(4, 0) == pytest.approx(2 / 16)
    assert sign_test(3, 1) == pytest.approx(2 * 5 / 16)
    assert sign_test(2, 2) == 1.0 and sign_test(0, 0) == 1.0


def _finished_walker_run(final_returns: dict) -> None:
    """A finished walker-run seed 0 in each folder, its last evaluation at the given return."""
    for folder, value in final_returns.items():
        path = folder / "walker-run" / "ours" / "seed_0"
        path.mkdir(parents=True)
        step = sb.TASKS["walker-run"].agent_steps
        path.joinpath("metrics.csv").write_text(f"env_step,wall_time_s,eval_time_s,eval_return_mean\n"
                                                f"{step},100.0,1.0,{value}\n")


def test_a_variants_report_compares_it_with_the_default_runs(tmp_path, monkeypatch):
    out, variant = tmp_path / "sample_efficiency", tmp_path / "sample_efficiency_x"
    monkeypatch.setattr(sb, "OUT_DIR", out)
    monkeypatch.setattr(sb, "RESULTS_DIR", tmp_path)
    _finished_walker_run({out: 400.0, variant: 600.0})
    assert sb.main(["--report", "--out-dir", str(variant)]) == 0
    results = json.loads(next(tmp_path.glob("*-sample-efficiency-sample_efficiency_x.json")).read_text())
    paired = results["paired"]
    assert paired["against"] == str(out) and paired["better"] == ["walker-run"]
    assert paired["difference"] == pytest.approx(200.0 / published_mean("walker-run"))
    assert not (out / "walker-run.png").exists()  # the default's folder is read, not drawn into
    assert "sample_efficiency_x against sample_efficiency" in results["table"]
    with pytest.raises(SystemExit):
        sb.main(["--report", "--out-dir", str(variant), "--against", str(tmp_path / "nowhere")])


def test_two_variants_set_against_each_other_keep_each_variants_own_results_file(tmp_path, monkeypatch):
    # `--against` another variant must not replace the variant's own file (its paired comparison with the default)
    out, first, second = (tmp_path / name for name in ("sample_efficiency", "sample_efficiency_a", "sample_efficiency_b"))
    monkeypatch.setattr(sb, "OUT_DIR", out)
    monkeypatch.setattr(sb, "RESULTS_DIR", tmp_path)
    _finished_walker_run({out: 400.0, first: 600.0, second: 500.0})
    assert sb.main(["--report", "--out-dir", str(first)]) == 0
    assert sb.main(["--report", "--out-dir", str(first), "--against", str(second)]) == 0
    own = json.loads(next(tmp_path.glob("*-sample-efficiency-sample_efficiency_a.json")).read_text())
    versus = json.loads(next(tmp_path.glob("*-sample-efficiency-sample_efficiency_a-vs-sample_efficiency_b.json"))
                        .read_text())
    assert own["paired"]["against"] == str(out)
    assert versus["paired"]["against"] == str(second)
    assert versus["paired"]["difference"] == pytest.approx(100.0 / published_mean("walker-run"))
    # naming the default explicitly is the variant's own comparison, the same file
    assert sb.results_path(first, datetime.date(2026, 1, 1), out).name == "2026-01-01-sample-efficiency-sample_efficiency_a.json"


def test_the_paired_interval_is_not_a_point_when_each_task_has_one_seed():
    # resampling seeds within tasks alone gives the same draw every time with one seed per task; the tasks are
    # resampled too, so tasks that disagree give an interval that spans them
    m = {task: published_mean(task) for task in ("hopper", "walker-run", "finger-spin", "cheetah-run")}
    variant = _runs({t: {0: (1.5 if t != "cheetah-run" else 0.5) * v} for t, v in m.items()})
    baseline = _runs({t: {0: v} for t, v in m.items()})
    lo, hi = paired_comparison(variant, baseline, samples=500)["difference_ci"]
    assert lo < 0.0 < hi


def test_one_seed_per_task_gives_no_suite_interval_rather_than_a_point():
    m = {task: published_mean(task) for task in ("hopper", "walker-run")}
    suite = suite_summary(_results({"hopper": [m["hopper"]], "walker-run": [0.5 * m["walker-run"]]}))
    assert all(np.isnan(suite["iqm_ci"]))
    assert "[no interval: one seed per task]" in suite_table(suite)
