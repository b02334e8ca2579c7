"""Terminal keyboard teleop that works headless and over SSH.

Why a terminal and not a GUI keyboard hook: the robot machine usually has no display, and an operator often
drives from a laptop over SSH. A background thread reads raw bytes from the terminal (stdin switched to
cbreak mode with ``termios``: no line buffering, no echo, Ctrl-C still interrupts) and turns them into
motion, toggles and events; ``disconnect()`` restores the terminal settings. Tests pass any readable file
descriptor (an ``os.pipe``) instead of the terminal, and then no terminal settings are touched.

Keys (case-insensitive; directions are in the operator frame, see ``robot_rl.real.teleop.frames``):

===========  ==========================================================
key          effect
===========  ==========================================================
``w``/``s``  move forward / back (away from / towards the operator)
``a``/``d``  move left / right
``r``/``f``  move up / down
``g``        toggle the gripper (starts open)
``t``        toggle take-over: while on, the operator drives (``active``)
``p``        event SUCCESS (pass)
``x``        event FAILURE
``n``        event RERECORD (new take)
``b``        event REWIND (back)
space        event ESTOP
===========  ==========================================================

Arrow, function and Alt+ keys (escape sequences) are ignored, including a lone Esc, which swallows the key
typed right after it.

A terminal only reports key *presses*, never releases: holding a key produces one byte, a pause (the
auto-repeat delay, typically 250-600 ms), then a burst of repeats (~30 per second). So a motion key sets its
axis for ``hold_s`` seconds after the latest byte and the axis then drops to zero by itself; ``hold_s``
(default 0.15 s) is longer than the repeat interval, so a held key moves steadily once repeats start, and short
enough that the hand stops promptly after the key is let go. The first press moves for ``hold_s``, then there
is a short pause until the terminal's auto-repeat starts: that is the terminal's behaviour and cannot be seen
from here (lower the repeat delay in the OS keyboard settings of the machine you type on if it bothers you).
"""

from __future__ import annotations

import os
import select
import sys
import threading
import time
from collections.abc import Callable

import numpy as np

from .base import Event, Teleop, TeleopCommand
from .frames import AxisShaping, DeviceFrame, to_action

# Motion keys: operator-frame axis index and direction.
MOTION_KEYS: dict[str, tuple[int, float]] = {
    "w": (0, 1.0),
    "s": (0, -1.0),
    "a": (1, 1.0),
    "d": (1, -1.0),
    "r": (2, 1.0),
    "f": (2, -1.0),
}
EVENT_KEYS: dict[str, Event] = {
    "p": Event.SUCCESS,
    "x": Event.FAILURE,
    "n": Event.RERECORD,
    "b": Event.REWIND,
    " ": Event.ESTOP,
}
GRIPPER_KEY = "g"
# Escape-sequence parser states (see KeyboardTeleop._plain_key).
_ESC_NONE, _ESC_START, _ESC_CSI, _ESC_SS3 = range(4)
TAKEOVER_KEY = "t"

HELP = (
    "keyboard teleop: w/s forward/back, a/d left/right, r/f up/down, g gripper, t take over, "
    "p success, x failure, n re-record, b rewind, space E-STOP"
)


def _stdin_fd() -> int | None:
    """This process's stdin descriptor, or None when stdin has none (e.g. replaced by a test harness)."""
    try:
        return sys.stdin.fileno()
    except (AttributeError, ValueError, OSError):
        return None


class KeyboardTeleop(Teleop):
    """Keyboard device reading a terminal (or any file descriptor) in a background thread.

    Args:
        fd: file descriptor to read; None = this process's stdin, which must be a terminal.
        frame: where the operator stands (``DeviceFrame``, preset name or yaw in degrees; default behind the
            robot, so ``w`` is robot +x).
        speed: action magnitude of a held motion key (1.0 = the robot's full step per control period).
        hold_s: how long a motion key keeps its axis moving after its latest byte (see the module docstring).
        clock: monotonic time source (injectable so tests can step time).
    """

    def __init__(
        self,
        fd: int | None = None,
        frame: DeviceFrame | str | float | None = None,
        speed: float = 0.5,
        hold_s: float = 0.15,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not 0.0 < speed <= 1.0:
            raise ValueError(f"speed must be in (0, 1], got {speed}")
        if not hold_s > 0:
            raise ValueError(f"hold_s must be > 0, got {hold_s}")
        self.frame = DeviceFrame.coerce(frame)
        self.shaping = AxisShaping(scale=speed)
        self.hold_s = float(hold_s)
        self._fd_arg = fd
        self._clock = clock
        self._lock = threading.Lock()
        # Per operator axis: direction of the latest motion key and when it arrived.
        self._direction = np.zeros(3)
        self._pressed_at = np.full(3, -np.inf)
        self._gripper = -1.0
        self._active = False
        self._events: set[Event] = set()
        self._escape = _ESC_NONE
        self._fd: int | None = None
        self._saved_termios: list | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    # ------------------------------------------------------------------ lifecycle
    def connect(self) -> None:
        """Switch the terminal to cbreak mode (if ``fd`` is a terminal) and start the reader thread."""
        if self._thread is not None:
            return
        fd = self._fd_arg if self._fd_arg is not None else _stdin_fd()
        if fd is None or (self._fd_arg is None and not os.isatty(fd)):
            raise RuntimeError(
                "KeyboardTeleop needs an interactive terminal on stdin (run it in a terminal or over `ssh -t`), "
                "or pass fd= a readable file descriptor"
            )
        if os.isatty(fd):
            import termios
            import tty

            self._saved_termios = termios.tcgetattr(fd)
            tty.setcbreak(fd)
        self._fd = fd
        self._stop.clear()
        self._thread = threading.Thread(target=self._reader, name="keyboard-teleop", daemon=True)
        self._thread.start()
        if self._fd_arg is None:
            print(HELP, file=sys.stderr)

    def disconnect(self) -> None:
        """Stop the reader thread and restore the terminal; safe to call twice."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        if self._saved_termios is not None and self._fd is not None:
            import termios

            termios.tcsetattr(self._fd, termios.TCSADRAIN, self._saved_termios)
            self._saved_termios = None
        self._fd = None

    def reset(self) -> None:
        """New episode: stop motion, hand control back to the policy, open the gripper, and drop stale events
        (a SUCCESS pressed during the reset must not end the next episode) except ESTOP, which is never lost."""
        with self._lock:
            self._direction[:] = 0.0
            self._pressed_at[:] = -np.inf
            self._active = False
            self._gripper = -1.0
            self._events &= {Event.ESTOP}

    # ------------------------------------------------------------------ input
    def _reader(self) -> None:
        fd = self._fd
        assert fd is not None
        while not self._stop.is_set():
            ready, _, _ = select.select([fd], [], [], 0.05)
            if not ready:
                continue
            try:
                data = os.read(fd, 64)
            except OSError:
                return
            if not data:  # EOF: the pipe or terminal closed
                return
            self.feed(data)

    def feed(self, data: bytes) -> None:
        """Process raw key bytes (what the reader thread does with each chunk it reads)."""
        now = self._clock()
        with self._lock:
            for char in data.decode("latin-1"):
                if not self._plain_key(char):
                    continue
                char = char.lower()
                if char in MOTION_KEYS:
                    axis, sign = MOTION_KEYS[char]
                    self._direction[axis] = sign
                    self._pressed_at[axis] = now
                elif char == GRIPPER_KEY:
                    self._gripper = -self._gripper
                elif char == TAKEOVER_KEY:
                    self._active = not self._active
                elif char in EVENT_KEYS:
                    self._events.add(EVENT_KEYS[char])

    def _plain_key(self, char: str) -> bool:
        """Whether ``char`` is a key of its own rather than part of an escape sequence.

        Arrow, function and Alt+ keys arrive as ``ESC [ ... final`` (CSI), ``ESC O x`` (SS3) or ``ESC x``;
        read byte by byte, the up arrow ``ESC [ A`` would otherwise look like ``a`` (move left) and the
        down arrow ``ESC [ B`` like ``b`` (rewind). The state survives across chunks, because a sequence
        can be split between two reads.
        """
        state = self._escape
        if state == _ESC_NONE:
            if char == "\x1b":
                self._escape = _ESC_START
                return False
            return True
        if state == _ESC_START:
            self._escape = {"[": _ESC_CSI, "O": _ESC_SS3}.get(char, _ESC_NONE)
        elif state == _ESC_CSI:
            if "\x40" <= char <= "\x7e":  # CSI final byte; parameters and intermediates come before it
                self._escape = _ESC_NONE
        else:  # SS3: exactly one more byte
            self._escape = _ESC_NONE
        return False

    def read(self, state: np.ndarray | None = None) -> TeleopCommand:
        """Current motion (axes pressed within ``hold_s``), gripper, take-over flag, and the events since the
        last read."""
        now = self._clock()
        with self._lock:
            fresh = (now - self._pressed_at) <= self.hold_s
            operator = np.where(fresh, self._direction, 0.0)
            gripper, active = self._gripper, self._active
            events = frozenset(self._events)
            self._events.clear()
        return TeleopCommand(
            action=to_action(operator, gripper, self.frame, self.shaping), active=active, events=events
        )

    @property
    def gripper_closed(self) -> bool:
        """Whether the gripper toggle is on "closed"."""
        return self._gripper > 0
