"""real/output.py: output that can never stall the robot, and that loses nothing when the destination keeps up."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
import threading
import time

from robot_rl.real import output
from robot_rl.real.output import LogQueue

_PUMPED = textwrap.dedent("""
    import atexit, sys
    from robot_rl.real.output import OutputPump
    atexit.register(OutputPump().start().stop)
    for i in range(3000):
        print(f"line {i} " + "x" * 60)
    print("last line", flush=True)
""")


def test_nothing_written_before_exit_is_lost_through_the_pump():
    """Before: stop() could give the descriptor back while the reader held a chunk it had not queued yet, and the
    process's last lines ("server stopped; robot stopped") were lost at exit."""
    for attempt in range(15):
        out = subprocess.run([sys.executable, "-c", _PUMPED], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        lines = out.stdout.splitlines()
        assert lines[-1:] == ["last line"] and len(lines) == 3001, (attempt, len(lines), lines[-2:])


def test_restoring_waits_for_a_chunk_the_reader_holds(monkeypatch):
    """The race behind a lost last line, made certain: the reader has taken the chunk from the pipe but not queued it
    yet when restore() looks; restore() must still deliver it before it returns."""
    real_read = os.read

    def slow_read(fd: int, n: int) -> bytes:
        data = real_read(fd, n)
        time.sleep(0.2)  # preempted between the read and the append
        return data

    monkeypatch.setattr(output.os, "read", slow_read)
    dst_r, dst_w = os.pipe()
    fd = os.dup(dst_w)
    try:
        stream = output._Stream(fd, 1 << 16)
        os.write(fd, b"server stopped\n")
        time.sleep(0.05)  # the reader is inside its read
        assert stream.restore(2.0)
        os.set_blocking(dst_r, False)
        assert os.read(dst_r, 100) == b"server stopped\n"
    finally:
        for f in (fd, dst_r, dst_w):
            os.close(f)


def test_a_destination_nobody_reads_never_blocks_the_writer():
    """A pipe that nobody drains (a paused terminal): 4 MiB of prints still return; the excess is dropped."""
    code = textwrap.dedent("""
        import time
        from robot_rl.real.output import OutputPump
        pump = OutputPump(capacity=1 << 16).start()
        t = time.monotonic()
        for i in range(65536):
            print("y" * 63)
        print(f"done {time.monotonic() - t:.3f}", file=__import__("sys").stderr, flush=True)
        ok = pump.stop(timeout_s=0.2)
        import os; os.write(2, f"restored {ok} dropped {pump.dropped}\\n".encode())
    """)
    read_end, write_end = os.pipe()  # stdout: a pipe nobody reads
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=write_end, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        os.close(read_end)
    assert proc.returncode == 0, err
    assert "done" in err and "restored False" in err, err
    assert int(err.split("dropped ")[1].split()[0]) > 0


def test_the_log_queue_never_waits_and_counts_what_it_drops():
    released = threading.Event()

    class Blocked(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            released.wait(10.0)  # a handler stuck on its output

    logger = logging.getLogger("test_output.blocked")
    logger.propagate = False
    handler = Blocked()
    logger.addHandler(handler)
    try:
        q = LogQueue(logger, capacity=8)
        t = time.monotonic()
        for i in range(100):
            q.warning("tick %d", i)
        assert time.monotonic() - t < 0.5
        assert q.dropped >= 100 - 8 - 1
    finally:
        released.set()
        q.close(2.0)
        logger.removeHandler(handler)
