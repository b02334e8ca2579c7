"""`robot_rl.signals`: SIGTERM as Ctrl-C, and Ctrl-C/SIGTERM held over a block and delivered at its end."""

from __future__ import annotations

import os
import signal
import time

import pytest

from robot_rl.signals import Terminated, interrupts_deferred, sigterm_as_interrupt, stop_between_steps


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


@pytest.mark.parametrize("signum, raised", [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)])
def test_a_stop_between_steps_waits_for_the_check_and_the_handlers_come_back(signum, raised) -> None:
    """Before, SIGTERM raised wherever the main thread was: inside an import or TensorBoard's flush (CI once saw the
    stopped run abort at exit, -6 instead of 130). Now the work in progress finishes and `check` raises."""
    done = []
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    with pytest.raises(raised), stop_between_steps() as stop:
        stop.check()  # nothing asked yet
        os.kill(os.getpid(), signum)
        done.append("the step finished")
        stop.check()
        done.append("never")
    assert done == ["the step finished"]
    assert {s: signal.getsignal(s) for s in before} == before


def test_a_second_signal_interrupts_at_once() -> None:
    with pytest.raises(Terminated), stop_between_steps():
        os.kill(os.getpid(), signal.SIGINT)
        os.kill(os.getpid(), signal.SIGTERM)  # a scheduler that asks again, or Ctrl-C pressed twice


def test_a_stop_never_checked_interrupts_after_the_grace() -> None:
    """A loop stuck in one long call (a robot that stopped answering) is still interrupted, `grace_s` later."""
    start = time.monotonic()
    with pytest.raises(KeyboardInterrupt), stop_between_steps(grace_s=0.3):
        os.kill(os.getpid(), signal.SIGINT)
        while time.monotonic() - start < 30:
            time.sleep(0.01)
    assert time.monotonic() - start < 5
