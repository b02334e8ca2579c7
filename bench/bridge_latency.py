"""Latency and jitter of the robot bridge at 50 Hz, against bare gRPC on the same machine in the same run.

A ``serve-robot``-equivalent server (the simulated arm, token auth, safety filter, watchdog) runs in its own
process at ``--hz``; this process is the client and steps it for ``--duration`` seconds (five minutes by default),
sending a small random action every tick, as an actor would. Measured:

* **step round trip** (client clock): from sending a command to having the observation after it was applied.
  It includes the wait for the next control tick (up to one period), which is the protocol's design: one step is
  one tick. Split into the server-side **queue wait** (arrival to tick, reported by the server) and the rest,
  **tick to client** (driver step, reply, transport);
* **transport round trip**: a ``Heartbeat`` call (authenticated, no tick wait);
* **control-loop jitter**: tick start minus its schedule, measured by the server, with overruns;
* the peer figure, **bare gRPC**: a unary call to a do-nothing servicer over the same kind of channel in another
  process, so the ratio ``heartbeat / bare`` is our layer's overhead (token check, status message) on top of gRPC.

Writes ``bench/results/<date>-bridge-latency.json``. ``--quick`` runs 20 s.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from concurrent import futures

import numpy as np

from bench.common import cpu_fractions, cpu_times, machine_info, results_path, write_json

TOKEN = "bench-token"


def _serve_robot(port_q: mp.Queue, stop: mp.Event, hz: float) -> None:
    from robot_rl.real.drivers.sim_arm import SimArm
    from robot_rl.real.server import RobotServer, ServerConfig

    server = RobotServer(SimArm("reach", control_hz=hz, seed=0), ServerConfig(port=0, token=TOKEN, watchdog_s=0.5))
    port_q.put(server.start())
    stop.wait()
    server.stop()


def _serve_bare(port_q: mp.Queue, stop: mp.Event) -> None:
    import grpc

    def echo(request: bytes, context: grpc.ServicerContext) -> bytes:
        return request

    handler = grpc.method_handlers_generic_handler("bench.Echo", {"Echo": grpc.unary_unary_rpc_method_handler(echo)})
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((handler,))
    port_q.put(server.add_insecure_port("127.0.0.1:0"))
    server.start()
    stop.wait()
    server.stop(0.5)


def _start(target, *args) -> tuple[mp.Process, mp.Event, int]:
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=target, args=(q, stop, *args), daemon=True)
    p.start()
    return p, stop, q.get(timeout=60)


def _pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {"n": len(xs), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max()), "mean_ms": float(a.mean())}


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=300.0, help="seconds of stepping at the control rate")
    p.add_argument("--hz", type=float, default=50.0, help="control rate of the server")
    p.add_argument("--quick", action="store_true", help="20 s instead of --duration")
    p.add_argument("--transport-calls", type=int, default=2000, help="heartbeat and bare-gRPC calls, each")
    p.add_argument("--name", default="bridge-latency")
    args = p.parse_args(argv)
    duration = 20.0 if args.quick else args.duration
    os.environ.setdefault("MUJOCO_GL", "egl")

    import grpc
    from robot_rl.real.client import RobotClient

    robot_proc, robot_stop, robot_port = _start(_serve_robot, args.hz)
    bare_proc, bare_stop, bare_port = _start(_serve_bare)
    try:
        client = RobotClient(f"127.0.0.1:{robot_port}", TOKEN)
        client.reset(seed=0)
        bare_channel = grpc.insecure_channel(f"127.0.0.1:{bare_port}")
        echo = bare_channel.unary_unary("/bench.Echo/Echo")
        for _ in range(50):  # warm both channels
            client.heartbeat()
            echo(b"x", timeout=1.0)

        heartbeat, bare = [], []
        for _ in range(args.transport_calls):  # interleaved, so load drift hits both
            t = time.perf_counter()
            client.heartbeat()
            heartbeat.append(time.perf_counter() - t)
            t = time.perf_counter()
            echo(b"x" * 16, timeout=1.0)
            bare.append(time.perf_counter() - t)

        status0 = client.status()
        cpu0 = cpu_times()
        rng = np.random.default_rng(0)
        step_rtt, queue, tick_to_client, periods = [], [], [], []
        errors = 0
        print(f"stepping the bridge at {args.hz:g} Hz for {duration:.0f} s ...", flush=True)
        start = last = time.perf_counter()
        next_report = start + 30.0
        while time.perf_counter() - start < duration:
            action = rng.uniform(-0.3, 0.3, 4)
            t = time.perf_counter()
            try:
                r = client.step(action)
            except Exception:
                errors += 1
                continue
            now = time.perf_counter()
            step_rtt.append(now - t)
            queue.append(r.queue_s)
            tick_to_client.append(now - t - r.queue_s)
            periods.append(now - last)
            last = now
            if r.observation.success or len(step_rtt) % 200 == 0:
                client.reset()
            if now > next_report:
                print(f"  {now - start:.0f} s: {len(step_rtt):,} steps, step p99 "
                      f"{np.percentile(step_rtt, 99) * 1e3:.1f} ms", flush=True)
                next_report += 30.0
        status = client.status()
        cpu1 = cpu_times()
        client.close()
        bare_channel.close()
    finally:
        robot_stop.set()
        bare_stop.set()
        robot_proc.join(10)
        bare_proc.join(10)

    result = {
        "config": {"hz": args.hz, "duration_s": duration, "transport_calls": args.transport_calls},
        "machine": machine_info(1, "cpu"),
        "step_round_trip": _pct(step_rtt),
        "step_queue_wait": _pct(queue),
        "step_tick_to_client": _pct(tick_to_client),
        "client_step_period": _pct(periods[1:]),
        "heartbeat_round_trip": _pct(heartbeat),
        "bare_grpc_round_trip": _pct(bare),
        "heartbeat_over_bare_p50": float(np.median(heartbeat) / np.median(bare)),
        "server_loop": {
            "ticks": status.ticks - status0.ticks,
            "commands": status.commands - status0.commands,
            "holds": status.holds - status0.holds,
            "overruns": status.overruns - status0.overruns,
            "jitter_p50_ms": status.jitter_p50_s * 1e3,
            "jitter_p99_ms": status.jitter_p99_s * 1e3,
            "jitter_max_ms": status.jitter_max_s * 1e3,
            "tick_work_p99_ms": status.tick_work_p99_s * 1e3,
            "watchdog_trips": status.watchdog_trips,
        },
        "step_errors": errors,
        # A shared VM's host can take CPU time away (steal); tens of percent ruins any timing figure.
        "cpu_steal_fraction": (cpu_fractions(cpu0, cpu1) or {}).get("steal"),
        "load_average_after": os.getloadavg(),
    }
    path = write_json(results_path(args.name), result)
    s, h, b, loop = result["step_round_trip"], result["heartbeat_round_trip"], result["bare_grpc_round_trip"], \
        result["server_loop"]
    print(f"step round trip   p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms  (one tick = {1e3 / args.hz:.1f} ms)")
    print(f"  tick to client  p50 {result['step_tick_to_client']['p50_ms']:.2f} ms  "
          f"p99 {result['step_tick_to_client']['p99_ms']:.2f} ms")
    print(f"heartbeat         p50 {h['p50_ms']:.3f} ms  p99 {h['p99_ms']:.3f} ms")
    print(f"bare gRPC         p50 {b['p50_ms']:.3f} ms  p99 {b['p99_ms']:.3f} ms  "
          f"(heartbeat / bare = {result['heartbeat_over_bare_p50']:.2f})")
    print(f"loop jitter       p50 {loop['jitter_p50_ms']:.3f} ms  p99 {loop['jitter_p99_ms']:.3f} ms  "
          f"max {loop['jitter_max_ms']:.2f} ms  overruns {loop['overruns']} of {loop['ticks']} ticks")
    steal = result["cpu_steal_fraction"]
    if steal is not None:
        print(f"CPU stolen by the hypervisor during the run: {100 * steal:.0f}% (timings are only meaningful near 0)")
    print(f"results: {path}")
    return result


if __name__ == "__main__":
    main()
