"""`robot_rl.signals`: SIGTERM as Ctrl-C, and Ctrl-C/SIGTERM held over a block and delivered at its end."""

from __future__ import annotations

import os
import signal

import pytest

from robot_rl.signals import Terminated, interrupts_deferred, sigterm_as_interrupt


def test_sigterm_raises_terminated_inside_and_the_old_handler_comes_back() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Terminated), sigterm_as_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
    assert signal.getsignal(signal.SIGTERM) is before


@pytest.mark.parametrize("signum, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_deferred_interrupt_is_raised_when_the_block_ends_not_inside(signum, raised) -> None:
    done = []
    with pytest.raises(raised), sigterm_as_interrupt():
        with interrupts_deferred():
            os.kill(os.getpid(), signum)
            done.append("after the signal")  # still runs: the block finishes first
    assert done == ["after the signal"]
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_block_without_interrupts_changes_nothing() -> None:
    with interrupts_deferred():
        pass
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
