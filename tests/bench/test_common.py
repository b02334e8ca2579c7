"""bench.common: results files."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import common


def test_a_second_run_on_the_same_day_writes_a_new_results_file_and_keeps_the_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """bench.update_cost run twice on one day (on two machines) overwrote the first day's file, which the bench
    README cites; every results file is now new."""
    monkeypatch.setattr(common, "RESULTS_DIR", tmp_path)
    first = common.write_json(common.results_path("update-cost"), {"cpu": "AVX2"})
    second = common.write_json(common.results_path("update-cost"), {"cpu": "AVX512"})
    third = common.results_path("update-cost")
    assert first != second and third not in (first, second)
    assert second.name.endswith("-update-cost-2.json") and third.name.endswith("-update-cost-3.json")
    assert '"AVX2"' in first.read_text() and '"AVX512"' in second.read_text()
