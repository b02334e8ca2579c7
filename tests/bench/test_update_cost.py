"""bench.update_cost: choosing the variants to time."""

from __future__ import annotations

import pytest

from bench import update_cost


def test_a_variant_pattern_selects_by_name_and_one_that_matches_nothing_lists_the_names() -> None:
    """On a CPU without bf16 instructions the bf16 variants take 15x as long, so a run picks what it times."""
    chosen = update_cost.selected("fp32|, UTD 1")
    assert list(chosen) == ["default fp32", "default, UTD 1", "default fp32, batch 16"]
    assert chosen["default, UTD 1"] == ["agent.optimiser.utd=1"]
    assert update_cost.selected(None) == update_cost.VARIANTS
    with pytest.raises(SystemExit, match="matches none of: default fp32; default compile"):
        update_cost.selected("bf17")
