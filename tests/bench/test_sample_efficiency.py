"""The benchmark's command line (its runs are long and live outside the test suite)."""
import pytest

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
