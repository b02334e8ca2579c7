import csv

import pytest

from bench.reference import DEFAULT_PATH, load_reference
from bench.reference.build import build

TASKS = {"hopper", "walker2d", "halfcheetah", "cartpole-swingup", "walker-walk"}
GRID = list(range(10_000, 100_001, 10_000))


def test_published_curves_parse():
    curves = load_reference()
    assert set(curves) == TASKS
    for methods in curves.values():
        assert "SimbaV2" in methods
        for series in methods.values():
            assert [step for step, _, _ in series] == GRID
            assert all(std >= 0 for _, _, std in series)
    hopper = curves["hopper"]["SimbaV2"]
    step, mean, std = hopper[-1]
    assert step == 100_000
    assert mean == pytest.approx(2821.07)
    assert std == pytest.approx(767.91)
    assert set(curves["hopper"]) == {"SimbaV2", "SAC"}


def test_every_row_names_its_source_and_seeds():
    with open(DEFAULT_PATH, newline="") as f:
        rows = list(csv.DictReader(f))
    assert rows
    for row in rows:
        assert row["source"] and int(row["seeds"]) == 10
        assert row["version"] in {"Hopper-v4", "Walker2d-v4", "HalfCheetah-v4", "dmc"}


def test_csv_matches_raw_extracts():
    """The committed CSV is exactly what build.py computes from the verbatim extracts in raw/."""
    with open(DEFAULT_PATH, newline="") as f:
        assert list(csv.DictReader(f)) == build()


def test_load_reference_rejects_other_schema(tmp_path):
    path = tmp_path / "curves.csv"
    path.write_text("task,method,env_step,return\nhopper,SimbaV2,100000,1.0\n")
    with pytest.raises(ValueError, match="missing columns"):
        load_reference(path)
