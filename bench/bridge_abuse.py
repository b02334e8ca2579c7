"""The robot bridge under abuse: does the e-stop get through, does the loop keep time, is a normal client served?

A ``serve-robot``-equivalent server (simulated arm, token, safety filter, supervisor) runs in its own process at
``--hz``. For each abuse class an attacker process (or a careless one) runs for ``--seconds`` while this process
runs a **normal client** (a step every tick, small zero-mean actions) and an **e-stop prober** (every
``--probe-every`` seconds: ``EStop``, timed on the client's clock, then ``ClearEStop``). Classes:

* ``baseline``: no abuse (what the machine gives anyway);
* ``garbage_bytes``: TCP connections that send 4 kB of random bytes, 2,000 a second;
* ``http2_junk``: the HTTP/2 preface followed by 2 kB of random frames, 2,000 connections a second;
* ``oversized``: authenticated 8 MB requests (the limit is 64 kB);
* ``half_open``: 200 connections that never send anything;
* ``stalled_unauth`` / ``stalled_auth``: 16 calls without / with the token that send headers and never a body,
  no deadline, renewed as soon as the server cuts them off (after its 1 s body deadline);
* ``flood_unauth``: unauthenticated calls back to back;
* ``flood_auth``: authenticated ``Heartbeat`` calls back to back from 12 threads (more than the 8 bulk slots);
* ``status_poll``: ``GetStatus`` at 200 Hz;
* ``idle_other_peer``: 1,100 TCP connections that never send a byte, from another address (127.0.0.2: another
  host), each reopened as soon as the server closes it; the server process has the common open-file limit of 1024
  (soft and hard), and **every EStop probe comes from a new connection** (an operator reaching for the stop);
* ``idle_same_peer``: the same from the operator's own address; the normal client and the probes connect after the
  flood took hold, so each of their connections must displace a silent one;
* ``blocked_stderr``: the server's log output is a pipe that nobody reads, full from the start (a terminal paused
  with Ctrl-S, a stalled ssh session);
* ``delayed_clear``: not an attacker but the network: before each EStop probe a ClearEStop's headers are sent and its
  body held until the EStop was answered (a clear delayed in flight); counts the e-stops it undid;
* ``stalled_estop``: a token holder's EStop calls that send headers and never a body, renewed as fast as possible
  (each latches; counts the driver's ``stop()`` calls per second);
* ``malformed_body``: authenticated ``Step`` calls whose body is not a valid protobuf, back to back.

Per class: the control loop's jitter (tick start minus schedule) and overruns, measured by the server over exactly
that stretch; EStop latency (client round trip; the server answers after the driver's ``stop()`` returned); the
fraction of the normal client's steps that were served (steps refused only because the prober had just latched the
e-stop are left out); and the server's refusal counters. Writes ``bench/results/<date>-bridge-abuse.json``;
``--readme`` also rewrites the table in ``bench/README.md`` between its ``bridge-abuse`` markers.

Priorities: the server process and this one run at nice -10 and the server's control thread asks for ``SCHED_FIFO``
(as a robot server should be run; granted when running as root or with CAP_SYS_NICE), the attackers at nice 0. On
one small machine they all share the CPUs, where a real attacker would be on another machine; the result file
records what was granted.
"""

from __future__ import annotations

import argparse
import datetime
import json
import multiprocessing as mp
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

TOKEN = "bench-abuse-token"
CLASSES = ("baseline", "garbage_bytes", "http2_junk", "oversized", "half_open", "stalled_unauth", "stalled_auth",
           "flood_unauth", "flood_auth", "status_poll", "idle_other_peer", "idle_same_peer", "blocked_stderr",
           "delayed_clear", "stalled_estop", "malformed_body")
FRESH_PROBE = frozenset({"idle_other_peer"})  # classes whose EStop probes each open a new connection
SERVER_FD_LIMIT = 1024  # the server process's open-file limit, soft and hard: the common default it cannot raise
BENCH_DIR = Path(__file__).resolve().parent
SERVICE = "/robot_rl.bridge.v1.RobotBridge/"
AUTH = (("authorization", f"Bearer {TOKEN}"),)


def _nice(value: int) -> int:
    """Set this thread's nice value (inherited by threads and processes it starts), best effort; returns it."""
    try:
        os.setpriority(os.PRIO_PROCESS, 0, value)
    except (OSError, AttributeError):
        pass
    return os.getpriority(os.PRIO_PROCESS, 0) if hasattr(os, "getpriority") else 0


# -- the server process ----------------------------------------------------------------------------------------
def _serve(conn: Any, hz: float) -> None:
    """Serve the simulated arm; answer ``mark`` / ``since`` / ``stop`` requests on ``conn``."""
    import logging
    import resource

    _nice(-10)  # as a robot server should be run (docs/hardware.md); its control thread asks for SCHED_FIFO itself
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (SERVER_FD_LIMIT, SERVER_FD_LIMIT))
    except (OSError, ValueError):
        pass

    from robot_rl.real.drivers.sim_arm import SimArm
    from robot_rl.real.server import RobotServer, ServerConfig

    logger = logging.getLogger("robot_rl.real")
    logger.setLevel(logging.ERROR)  # the prober latches and clears the e-stop twice a second
    server = RobotServer(SimArm("reach", control_hz=hz, seed=0), ServerConfig(port=0, token=TOKEN, watchdog_s=1.0))
    conn.send((server.start(), os.getpriority(os.PRIO_PROCESS, 0)))
    time.sleep(0.2)
    conn.send((server.status().loop_priority, server.status().transport))
    blocked: logging.Handler | None = None
    try:
        while True:
            cmd, arg = conn.recv()
            if cmd == "mark":
                conn.send(server.timing_mark())
            elif cmd == "since":
                conn.send(server.timing_since(arg))
            elif cmd == "block_log":  # a log destination nobody reads, full from the start
                read_end, write_end = os.pipe()
                os.set_blocking(write_end, False)
                try:
                    while True:
                        os.write(write_end, b"x" * 65536)
                except BlockingIOError:
                    pass
                os.set_blocking(write_end, True)
                blocked = logging.StreamHandler(os.fdopen(write_end, "w", buffering=1))
                logger.addHandler(blocked)
                logger.setLevel(logging.INFO)
                conn.send(True)
            elif cmd == "unblock_log":
                logger.setLevel(logging.ERROR)
                conn.send(True)  # the handler stays blocked (its thread too); the process ends after the bench
            else:
                break
    finally:
        server.stop()


# -- the attacker process --------------------------------------------------------------------------------------
def _abuse(kind: str, port: int, stop: Any, ready: Any, out: Any) -> None:
    _nice(0)  # an ordinary program, not the prioritised robot side
    import grpc

    address = f"127.0.0.1:{port}"
    counts: dict[str, int] = {}
    lock = threading.Lock()

    def count(key: str) -> None:
        with lock:
            counts[key] = counts.get(key, 0) + 1

    def channel() -> grpc.Channel:
        return grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1),
                                                       ("grpc.max_send_message_length", -1)])

    def raw_sends(payload: Any, rate_hz: float = 1000.0) -> None:
        # Paced: flat out, a local attacker mostly measures a process burning a CPU that the robot side shares.
        next_t = time.monotonic()
        while not stop.is_set():
            next_t += 1.0 / rate_hz
            stop.wait(max(0.0, next_t - time.monotonic()))
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
                    s.sendall(payload())
                count("connections")
            except OSError:
                count("connect_errors")

    def calls(method: str, metadata: Any, body: bytes, rate_hz: float | None = None) -> None:
        ch = channel()
        call = ch.unary_unary(SERVICE + method)
        while not stop.is_set():
            t = time.monotonic()
            try:
                call(body, timeout=2.0, metadata=metadata)
                count("ok")
            except grpc.RpcError as e:
                count(e.code().name)
            if rate_hz:
                stop.wait(max(0.0, 1.0 / rate_hz - (time.monotonic() - t)))
        ch.close()

    def stalled(metadata: Any, method: str = "Step", renew_s: float = 5.0) -> None:
        ch = channel()
        call = ch.stream_unary(SERVICE + method)

        def never() -> Any:
            stop.wait(3.0)  # no body; ends the stream (still without a message) at the latest 3 s later
            return
            yield b""

        while not stop.is_set():
            future = call.future(never(), metadata=metadata)
            try:
                future.result(timeout=renew_s)
                count("ok")
            except grpc.RpcError as e:
                count(e.code().name)
            except grpc.FutureTimeoutError:
                future.cancel()
                count("client_timeout")
        ch.close()

    def idle_flood(source: str, n: int) -> None:
        """n TCP connections from ``source`` that never send a byte, each reopened when the server closes it."""
        held: list[socket.socket] = []
        while not stop.is_set():
            while len(held) < n and not stop.is_set():
                s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                s.setblocking(False)
                try:
                    s.bind((source, 0))
                    s.connect_ex(("127.0.0.1", port))
                except OSError:
                    s.close()
                    count("connect_errors")
                    break
                held.append(s)
                count("connections")
            for _ in range(drop_closed(held)):
                count("closed_by_server")
        for s in held:
            s.close()

    junk_preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
    threads: list[threading.Thread] = []
    held: list[socket.socket] = []
    if kind == "garbage_bytes":
        threads = [threading.Thread(target=raw_sends, args=(lambda: os.urandom(4096),)) for _ in range(2)]
    elif kind == "http2_junk":
        threads = [threading.Thread(target=raw_sends, args=(lambda: junk_preface + os.urandom(2048),))
                   for _ in range(2)]
    elif kind == "oversized":
        big = b"\x0a" + b"\xff" * (8 * 1024 * 1024)
        threads = [threading.Thread(target=calls, args=("Step", AUTH, big))]
    elif kind == "half_open":
        for _ in range(200):
            try:
                held.append(socket.create_connection(("127.0.0.1", port), timeout=1.0))
            except OSError:
                count("connect_errors")
        counts["held_connections"] = len(held)
    elif kind in ("stalled_unauth", "stalled_auth"):
        threads = [threading.Thread(target=stalled, args=(AUTH if kind == "stalled_auth" else (),)) for _ in range(16)]
    elif kind == "flood_unauth":
        threads = [threading.Thread(target=calls, args=("GetStatus", (), b"")) for _ in range(2)]
    elif kind == "flood_auth":
        threads = [threading.Thread(target=calls, args=("Heartbeat", AUTH, b"")) for _ in range(12)]
    elif kind == "status_poll":
        threads = [threading.Thread(target=calls, args=("GetStatus", AUTH, b"", 200.0))]
    elif kind in ("idle_other_peer", "idle_same_peer"):
        source = "127.0.0.2" if kind == "idle_other_peer" else "127.0.0.1"
        threads = [threading.Thread(target=idle_flood, args=(source, 1100))]
    elif kind == "stalled_estop":
        threads = [threading.Thread(target=stalled, args=(AUTH, "EStop", 0.05)) for _ in range(4)]
    elif kind == "malformed_body":
        threads = [threading.Thread(target=calls, args=("Step", AUTH, b"\xff\xff\xff\xff")) for _ in range(2)]
    for t in threads:
        t.daemon = True
        t.start()
    time.sleep(0.5)  # let it take hold before measuring
    ready.set()
    stop.wait()
    for t in threads:
        t.join(6.0)
    for s in held:
        s.close()
    out.put(counts)


# -- this process: the normal client and the e-stop prober -----------------------------------------------------
def drop_closed(held: list[socket.socket], wait_ms: int = 50) -> int:
    """Remove from ``held`` (and close) the sockets the server closed (readable with EOF, or an error), waiting up
    to ``wait_ms`` for one; returns how many. An idle flood calls it between top-ups."""
    import select

    poll = select.poll()
    by_fd = {s.fileno(): s for s in held}
    for fd in by_fd:
        poll.register(fd, select.POLLIN | select.POLLERR | select.POLLHUP)
    dropped = 0
    for fd, _ in poll.poll(wait_ms):
        s = by_fd[fd]
        try:
            data = s.recv(1)
        except OSError:
            data = b""
        if not data:
            held.remove(s)
            s.close()
            dropped += 1
    return dropped


class _Normal(threading.Thread):
    """Steps every tick with small zero-mean actions, as an actor would; counts what was served."""

    def __init__(self, address: str) -> None:
        super().__init__(daemon=True)
        from robot_rl.real.client import RobotClient

        self.client = RobotClient(address, TOKEN, step_timeout_s=0.5)
        self.stop_flag = threading.Event()
        self.ok = 0
        self.estop_window = 0
        self.errors: dict[str, int] = {}
        self.rtt: list[float] = []

    def run(self) -> None:
        from robot_rl.real.client import BridgeError, EStopLatched

        t0 = time.monotonic()
        while not self.stop_flag.is_set():
            phase = 2 * np.pi * (time.monotonic() - t0) / 4.0
            action = [0.3 * np.sin(phase), 0.3 * np.cos(phase), 0.0, -1.0]
            t = time.perf_counter()
            try:
                self.client.step(action)
                self.ok += 1
                self.rtt.append(time.perf_counter() - t)
            except EStopLatched:
                self.estop_window += 1  # the prober's own e-stop, not the abuse
                time.sleep(0.005)
            except BridgeError as e:
                self.errors[e.code.name] = self.errors.get(e.code.name, 0) + 1
                time.sleep(0.005)
        self.client.close()


def _probe(address: str, seconds: float, every: float, kind: str) -> dict[str, Any]:
    """EStop probes (then ClearEStop) every ``every`` seconds: latencies, the server's acknowledgement times,
    failures by code; with ``delayed_clear`` a ClearEStop sent before each EStop and held, and the e-stops it undid;
    in ``FRESH_PROBE`` classes each probe from a new connection."""
    import grpc
    from robot_rl.real.client import BridgeError, RobotClient
    from robot_rl.real.proto import pb

    fresh = kind in FRESH_PROBE
    client = RobotClient(address, TOKEN, timeout_s=2.0)
    latencies: list[float] = []
    acks: list[float] = []
    failures: dict[str, int] = {}
    undone = clears_refused = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(every)
        if fresh:
            client.close()
            client = RobotClient(address, TOKEN, timeout_s=2.0)
        held = None
        if kind == "delayed_clear":  # its headers leave now; its body after the EStop was answered
            release = threading.Event()

            def body(release: threading.Event = release) -> Any:
                release.wait(5.0)
                yield pb.Empty().SerializeToString()

            ch = grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
            held = (release, ch, ch.stream_unary(SERVICE + "ClearEStop").future(body(), metadata=AUTH, timeout=5.0))
            time.sleep(0.02)
        t = time.perf_counter()
        try:
            status = client.estop("bench probe")
            latencies.append(time.perf_counter() - t)
            acks.append(status.estop_ack_s)
        except BridgeError as e:
            failures[e.code.name] = failures.get(e.code.name, 0) + 1
        if held is not None:
            release, ch, future = held
            release.set()
            try:
                future.result(timeout=5.0)
            except grpc.RpcError:
                clears_refused += 1
            ch.close()
            try:
                undone += client.status().state != "estop"
            except BridgeError:
                pass
        for _ in range(20):  # clear it again; ClearEStop has its own reserved slots
            try:
                client.clear_estop()
                break
            except BridgeError:
                time.sleep(0.05)
    client.close()
    return {"latencies": latencies, "acks": acks, "failures": failures, "estops_undone": undone,
            "delayed_clears_refused": clears_refused}


def _ms(a: np.ndarray | list[float], q: float) -> float:
    a = np.asarray(a, float)
    return float(np.percentile(a, q) * 1e3) if len(a) else float("nan")


def _run_class(kind: str, port: int, conn: Any, seconds: float, every: float, hz: float) -> dict[str, Any]:
    # imported here, not at the top: bench.common imports torch, and the spawned server and attacker processes
    # re-import this module
    from bench.common import cpu_fractions, cpu_times

    address = f"127.0.0.1:{port}"
    cpu0 = cpu_times()
    ctx = mp.get_context("spawn")
    stop, ready, out = ctx.Event(), ctx.Event(), ctx.Queue()
    attacker = ctx.Process(target=_abuse, args=(kind, port, stop, ready, out), daemon=True)
    attacker.start()
    if not ready.wait(60.0):
        raise RuntimeError(f"the {kind} attacker did not start")
    normal = _Normal(address)
    if kind == "blocked_stderr":
        conn.send(("block_log", None))
        conn.recv()
    conn.send(("mark", None))
    mark = conn.recv()
    normal.start()
    probe = _probe(address, seconds, every, kind)
    latencies, acks, failures = probe["latencies"], probe["acks"], probe["failures"]
    normal.stop_flag.set()
    normal.join(5.0)
    conn.send(("since", mark))
    since = conn.recv()
    if kind == "blocked_stderr":
        conn.send(("unblock_log", None))
        conn.recv()
    stop.set()
    counts = out.get(timeout=30.0)
    attacker.join(10.0)
    attempts = normal.ok + sum(normal.errors.values())
    jitter = since["jitter"]
    cpu1 = cpu_times()
    busy = (cpu_fractions(cpu0, cpu1) or {}).get("busy")
    return {
        "class": kind,
        "ticks": int(since["counters"]["ticks"]),
        "loop_jitter_p50_ms": _ms(jitter, 50), "loop_jitter_p99_ms": _ms(jitter, 99),
        "loop_jitter_max_ms": float(jitter.max() * 1e3) if len(jitter) else float("nan"),
        "tick_work_p99_ms": _ms(since["work"], 99),
        "overruns": int(since["counters"]["overruns"]),
        "estops": len(latencies), "estop_failures": failures,
        "estop_p50_ms": _ms(latencies, 50), "estop_max_ms": float(max(latencies) * 1e3) if latencies else float("nan"),
        "estop_server_ack_p50_ms": _ms(acks, 50), "estop_server_ack_max_ms": _ms(acks, 100),
        "normal_steps_ok": normal.ok, "normal_step_errors": normal.errors,
        "normal_steps_in_estop_window": normal.estop_window,
        "served_fraction": normal.ok / attempts if attempts else float("nan"),
        "normal_step_rtt_p99_ms": _ms(normal.rtt, 99),
        "expected_ticks": int(round(seconds * hz)),
        "driver_stops_per_s": since["counters"].get("stops", 0) / seconds,
        "estops_undone": probe["estops_undone"], "delayed_clears_refused": probe["delayed_clears_refused"],
        "fresh_connection_probes": kind in FRESH_PROBE,
        "server_refusals": since["refusals"],
        "attacker": counts,
        # The host's state over the class (every process on it, the other jobs included).
        "host_load_average_1min": os.getloadavg()[0],
        "host_cpu_busy_fraction": busy,
    }


def table(rows: list[dict[str, Any]]) -> str:
    """The markdown table of the README section."""
    head = ("| abuse class | loop jitter p50 / p99 / max (ms) | overruns | EStop p50 / max (ms), answered | "
            "normal client served | driver stop() per s | host load (1 min) |\n|---|---|---|---|---|---|---|\n")
    lines = []
    for r in rows:
        answered = f"{r['estops']}/{r['estops'] + sum(r['estop_failures'].values())}"
        if r.get("fresh_connection_probes"):
            answered += " (new connections)"
        if r["class"] == "delayed_clear":
            answered += f"; undone by a delayed clear: {r['estops_undone']}"
        lines.append(f"| {r['class']} | {r['loop_jitter_p50_ms']:.2f} / {r['loop_jitter_p99_ms']:.2f} / "
                     f"{r['loop_jitter_max_ms']:.1f} | {r['overruns']} of {r['ticks']} | {r['estop_p50_ms']:.1f} / "
                     f"{r['estop_max_ms']:.1f}, {answered} | {100 * r['served_fraction']:.1f}% | "
                     f"{r.get('driver_stops_per_s', float('nan')):.1f} | {r['host_load_average_1min']:.1f} |")
    return head + "\n".join(lines) + "\n"


def _update_readme(text: str) -> None:
    path = BENCH_DIR / "README.md"
    readme = path.read_text()
    start, end = "<!-- bridge-abuse:start -->", "<!-- bridge-abuse:end -->"
    if start not in readme or end not in readme:
        raise SystemExit(f"{path} has no {start} ... {end} block")
    before, rest = readme.split(start, 1)
    _, after = rest.split(end, 1)
    path.write_text(f"{before}{start}\n{text}{end}{after}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    from bench.common import cpu_fractions, cpu_times, machine_info

    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--seconds", type=float, default=8.0, help="length of each abuse class")
    p.add_argument("--hz", type=float, default=50.0, help="control rate of the server")
    p.add_argument("--probe-every", type=float, default=0.5, help="seconds between EStop probes")
    p.add_argument("--classes", default=",".join(CLASSES), help="comma-separated subset of: " + ", ".join(CLASSES))
    p.add_argument("--out", type=Path, default=None, help="result file (default bench/results/<date>-bridge-abuse.json)")
    p.add_argument("--readme", action="store_true", help="rewrite the table in bench/README.md")
    args = p.parse_args(argv)
    kinds = [k.strip() for k in args.classes.split(",") if k.strip()]
    unknown = sorted(set(kinds) - set(CLASSES))
    if unknown:
        raise SystemExit(f"unknown abuse classes {unknown}; choose from {', '.join(CLASSES)}")
    os.environ.setdefault("MUJOCO_GL", "egl")

    # The robot side (server, and the operator's client: normal client and prober) runs at nice -10 when allowed,
    # the attackers at 0: on this 2-core box they share the CPUs, where a real attacker would be on another machine.
    client_nice = _nice(-10)
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    server = ctx.Process(target=_serve, args=(child, args.hz), daemon=True)
    server.start()
    port, server_nice = parent.recv()
    loop_priority, transport = parent.recv()
    cpu0 = cpu_times()
    rows = []
    try:
        for kind in kinds:
            row = _run_class(kind, port, parent, args.seconds, args.probe_every, args.hz)
            rows.append(row)
            print(f"{kind:15s} jitter p99 {row['loop_jitter_p99_ms']:6.2f} ms  overruns {row['overruns']:3d}  "
                  f"EStop p50 {row['estop_p50_ms']:5.1f} max {row['estop_max_ms']:6.1f} ms "
                  f"({row['estops']} ok, failures {row['estop_failures']})  served {100 * row['served_fraction']:5.1f}%"
                  f"  refusals {row['server_refusals']}", flush=True)
    finally:
        parent.send(("stop", None))
        server.join(15.0)
    cpu1 = cpu_times()
    steal = (cpu_fractions(cpu0, cpu1) or {}).get("steal")
    result = {"config": {"seconds": args.seconds, "hz": args.hz, "probe_every_s": args.probe_every,
                         "server_nice": server_nice, "client_nice": client_nice, "attacker_nice": 0,
                         "control_loop_priority": loop_priority, "server_fd_limit": SERVER_FD_LIMIT,
                         "transport": transport},
              "machine": machine_info(1, "cpu"), "cpu_steal_fraction": steal, "classes": rows}
    out = args.out or BENCH_DIR / "results" / f"{datetime.date.today().isoformat()}-bridge-abuse.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2, default=float) + "\n")
    text = table(rows)
    print(text + f"results: {out}")
    if args.readme:
        _update_readme(text)
    return result


if __name__ == "__main__":
    main()
