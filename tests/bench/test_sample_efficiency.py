"""The benchmark's command line (its runs are long and live outside the test suite)."""
import json

import pytest

import bench.sample_efficiency as sb
from bench.sample_efficiency import LIBRARIES, TASKS, selection


def test_both_means_every_library():
    # the help said "ours, sb3 or both" while `both` was refused as an unknown library
    assert selection("walker2d", "both") == (["walker2d"], list(LIBRARIES))
    assert selection("hopper,walker2d", "sb3") == (["hopper", "walker2d"], ["sb3"])


def test_unknown_names_are_named_with_the_choices():
    with pytest.raises(ValueError, match="'hoper'.*hopper"):
        selection("hoper", "ours")
    with pytest.raises(ValueError, match="'sb2'.*both"):
        selection(",".join(TASKS), "sb2")


def _finished_run(path, task, returns):
    """A run directory whose metrics.csv reaches the task's last evaluation (what `finished` checks)."""
    path.mkdir(parents=True)
    step = sb.TASKS[task].agent_steps // len(returns)
    rows = ["env_step,wall_time_s,eval_time_s,eval_return_mean"]
    rows += [f"{step * (i + 1)},{100.0 * (i + 1)},1.0,{r}" for i, r in enumerate(returns)]
    (path / "metrics.csv").write_text("\n".join(rows) + "\n")


def test_the_results_file_keeps_every_task_whatever_subset_a_call_reports(tmp_path, monkeypatch):
    # a run of one task (`--tasks halfcheetah`) rewrote the day's results file with that task alone
    out = tmp_path / "sample_efficiency"
    monkeypatch.setattr(sb, "OUT_DIR", out)
    monkeypatch.setattr(sb, "RESULTS_DIR", tmp_path)
    _finished_run(out / "hopper" / "ours" / "seed_0", "hopper", [100.0, 200.0])
    _finished_run(out / "halfcheetah" / "sb3" / "seed_0", "halfcheetah", [50.0, 80.0])
    (out / "walker2d" / "ours" / "seed_0").mkdir(parents=True)  # started, nothing logged: not reported
    assert sb.main(["--report", "--tasks", "halfcheetah", "--out-dir", str(out)]) == 0
    results = json.loads(next(tmp_path.glob("*-sample-efficiency.json")).read_text())
    assert list(results["tasks"]) == ["hopper", "halfcheetah"]
    assert results["tasks"]["hopper"]["libraries"]["ours"]["final"]["mean"] == 200.0


def test_a_variant_writes_its_own_results_file_and_not_the_readme_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(sb, "OUT_DIR", tmp_path / "sample_efficiency")
    monkeypatch.setattr(sb, "RESULTS_DIR", tmp_path)
    variant = tmp_path / "sample_efficiency_bf16"
    _finished_run(variant / "hopper" / "ours" / "seed_0", "hopper", [300.0])
    assert sb.main(["--report", "--out-dir", str(variant)]) == 0
    assert [p.name.split("-", 3)[3] for p in tmp_path.glob("*.json")] == ["sample-efficiency-sample_efficiency_bf16.json"]
    with pytest.raises(SystemExit):
        sb.main(["--report", "--update-readme", "--out-dir", str(variant)])
    assert "--update-readme writes the default agent's table" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # a variant's runs would mix with the default agent's
        sb.main(["--tasks", "hopper", "--ours", "agent.optimiser.bf16=true"])
    assert "give them their own --out-dir" in capsys.readouterr().err


def test_seed_list_runs_exactly_the_given_seeds_in_order_and_skips_finished_ones(tmp_path, capsys):
    out = tmp_path / "sample_efficiency_x"
    _finished_run(out / "halfcheetah" / "ours" / "seed_0", "halfcheetah", [10.0])
    pending = sb.pending_runs(["halfcheetah"], ["ours", "sb3"], {"halfcheetah": [2, 0]}, out, [])
    assert [label for label, _, _ in pending] == [
        "halfcheetah/ours/seed_2", "halfcheetah/sb3/seed_2", "halfcheetah/sb3/seed_0"]
    for bad, message in [("2,x", "comma-separated integers"), ("-1", "each >= 0")]:
        with pytest.raises(SystemExit):
            sb.main(["--tasks", "halfcheetah", "--seed-list", bad, "--out-dir", str(out)])
        assert message in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sb.main(["--tasks", "halfcheetah", "--seeds", "3", "--seed-list", "2", "--out-dir", str(out)])
    assert "not both" in capsys.readouterr().err


def test_time_to_return_is_training_time_at_the_first_evaluation_that_reaches_it(tmp_path):
    rows = ["env_step,wall_time_s,eval_time_s,eval_return_mean",
            "10000,100,2,300", "20000,210,4,1200", "30000,320,6,900", "40000,430,8,1500"]
    (tmp_path / "metrics.csv").write_text("\n".join(rows) + "\n")
    assert sb.time_to_return(tmp_path, 1000) == 206  # 210 s of wall time less 4 s of evaluations, not the later 1,500
    assert sb.time_to_return(tmp_path, 2000) is None
    # a seed that never reached the return counts as the slowest in the median
    assert sb.median_time([50.0, None, 10.0]) == 50.0
    assert sb.median_time([None, None, 10.0]) is None
    entry = {"threshold": 1000, "libraries": {
        "ours": {"time_to_return_s": [600.0, None, 1200.0], "time_to_return_s_median": 1200.0},
        "sb3": {"time_to_return_s": [None, None, 60.0], "time_to_return_s_median": None}}}
    assert sb.reach_cell(entry) == "1,000: 20 / not reached (2/3, 1/3)"
