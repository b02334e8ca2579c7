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

``--cameras HxW`` (e.g. ``--cameras 84x84``, usually with ``--hz 20``) measures the camera path: the simulated arm
then serves its front and wrist cameras (``SimArm(pixels=True)``, frames ``--encoding`` jpeg or png) and the run
steps it for ``--duration`` seconds twice, first without cameras then with them, each with its own server process,
so that load drift hits both. Per configuration: step round trip p50/p99 (a step waits for the next tick, so about
one period), tick to client (round trip less the wait: the driver's tick, frames, reply, decode), the server's tick work, the encoded
frame bytes per step, the server's encode time per reply and the client's decode time (both cameras together).
Written to ``bench/results/<date>-bridge-cameras.json`` (``--name``).

``--policy`` (with ``--cameras``) adds a third run in which every command is a pixel policy's action on the
observation the previous step returned, as ``deploy`` runs one (an ``ActorPolicy`` shaped like the
``reach_pixels`` preset's, one thread). **Capture to command** per step = tick to client (from the start of the
tick whose frames the observation carries, so it includes the driver's physics step before the render: an upper
bound on capture to client) + the policy's call + the command's one-way trip to the server (half the median
heartbeat round trip of the same run). The server's clock is not the client's (the simulated arm stamps
observations on its simulated clock), so the figure is built from durations each side measures.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from concurrent import futures
from typing import Any

import numpy as np
import torch

from bench.common import cpu_fractions, cpu_times, machine_info, results_path, write_json

TOKEN = "bench-token"


def _serve_robot(port_q: mp.Queue, stop: mp.Event, hz: float, cameras: tuple[int, int] | None = None,
                 encoding: str = "jpeg", report: bool = False) -> None:
    from robot_rl.real.drivers.sim_arm import SimArm
    from robot_rl.real.server import RobotServer, ServerConfig

    robot = SimArm("reach", control_hz=hz, seed=0, pixels=cameras is not None, pixel_size=cameras or (84, 84))
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN, watchdog_s=0.5, image_encoding=encoding))
    port_q.put(server.start())
    mark = server.timing_mark()
    stop.wait()
    if report:  # the caller reads it before joining this process
        since = server.timing_since(mark)
        port_q.put({"encode": since["encode"].tolist(), "work": since["work"].tolist()})
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


def _start(target, *args) -> tuple[mp.Process, mp.Event, int]:  # the robot process also reports at the end
    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    p = ctx.Process(target=target, args=(q, stop, *args), daemon=True)
    p.start()
    return p, stop, q.get(timeout=60)


def _pct(xs: list[float]) -> dict[str, float]:
    a = np.asarray(xs) * 1e3
    return {"n": len(xs), "p50_ms": float(np.percentile(a, 50)), "p99_ms": float(np.percentile(a, 99)),
            "max_ms": float(a.max()), "mean_ms": float(a.mean())}


def pixel_policy(cameras: tuple[int, int]) -> Any:
    """An `ActorPolicy` shaped as `experiment=reach_pixels` trains it (two cameras, a 3x16 conv encoder each, 32
    features, 256x256 LayerNorm actor), at this frame size: its cost per call does not depend on its weights."""
    from robot_rl.policies import ActorPolicy

    torch.manual_seed(0)
    return ActorPolicy(7, 4, hidden=[256, 256], layer_norm=True, obs_norm=True,
                       cameras={f"pixels/{c}": [*cameras, 3] for c in ("front", "wrist")},
                       encoder_feature_dim=32, encoder_channels=16, encoder_layers=3).eval()


def _camera_run(hz: float, duration: float, cameras: tuple[int, int] | None, encoding: str,
                policy: Any = None) -> dict:
    """Step a sim-arm server (with or without cameras) at ``hz`` for ``duration`` s; the camera figures. With
    `policy`, each command is the policy's action on the observation the previous step returned (as `deploy`
    runs), and the run also gives capture-to-command latency (module docstring)."""
    from robot_rl.real.client import RobotClient

    ctx = mp.get_context("spawn")
    q, stop = ctx.Queue(), ctx.Event()
    proc = ctx.Process(target=_serve_robot, args=(q, stop, hz, cameras, encoding, True), daemon=True)
    proc.start()
    port = q.get(timeout=120)
    rng = np.random.default_rng(0)
    step_rtt, tick_to_client, frame_bytes, decode, policy_s, capture_to_command = [], [], [], [], [], []
    errors = 0
    try:
        client = RobotClient(f"127.0.0.1:{port}", TOKEN, step_timeout_s=2.0)
        client.reset(seed=0)
        for _ in range(20):  # warm up
            client.step(rng.uniform(-0.3, 0.3, 4))
        heartbeat = []
        for _ in range(200):
            t = time.perf_counter()
            client.heartbeat()
            heartbeat.append(time.perf_counter() - t)
        one_way = float(np.median(heartbeat)) / 2  # a command's trip to the server, as half a round trip
        status0 = client.status()
        action = rng.uniform(-0.3, 0.3, 4)
        start = time.perf_counter()
        while time.perf_counter() - start < duration:
            t = time.perf_counter()
            try:
                r = client.step(action)
            except Exception:
                errors += 1
                continue
            step_rtt.append(time.perf_counter() - t)
            tick_to_client.append(step_rtt[-1] - r.queue_s)
            frame_bytes.append(client.frame_bytes)
            decode.append(client.decode_s)
            if policy is None:
                action = rng.uniform(-0.3, 0.3, 4)
            else:
                t = time.perf_counter()
                with torch.no_grad():
                    obs = {k: torch.tensor(v)[None] for k, v in r.observation.as_dict().items()}  # copies: read-only arrays
                    action = policy.act(obs, deterministic=True)[0].numpy()
                policy_s.append(time.perf_counter() - t)
                capture_to_command.append(tick_to_client[-1] + policy_s[-1] + one_way)
            if r.observation.success or len(step_rtt) % 200 == 0:
                client.reset()
        status = client.status()
        client.close()
    finally:
        stop.set()
        server_side = q.get(timeout=60)
        proc.join(10)
    return {
        "cameras": None if cameras is None else {"names": ["front", "wrist"], "height": cameras[0],
                                                 "width": cameras[1], "encoding": encoding},
        "step_round_trip": _pct(step_rtt),
        "step_tick_to_client": _pct(tick_to_client),
        "frame_bytes_per_step": {"mean": float(np.mean(frame_bytes)), "max": int(np.max(frame_bytes))},
        "encode_per_reply": _pct(server_side["encode"]) if server_side["encode"] else None,
        "decode_per_reply": _pct(decode) if cameras is not None else None,
        "tick_work": _pct(server_side["work"]),
        "overruns": status.overruns - status0.overruns,
        "ticks": status.ticks - status0.ticks,
        "watchdog_trips": status.watchdog_trips - status0.watchdog_trips,
        "step_errors": errors,
        **({"policy_per_step": _pct(policy_s), "capture_to_command": _pct(capture_to_command),
            "command_one_way_s": one_way} if policy is not None else {}),
    }


def cameras_main(args: argparse.Namespace, duration: float) -> dict:
    """``--cameras``: the same stepping without and with two cameras (see the module docstring)."""
    h, w = (int(v) for v in args.cameras.lower().split("x"))
    cpu0, load0 = cpu_times(), os.getloadavg()
    runs = {}
    configs = [("no_cameras", None, None), ("cameras", (h, w), None)]
    if args.policy:
        configs.append(("pixel_policy", (h, w), pixel_policy((h, w))))
    for label, cams, policy in configs:
        print(f"stepping the sim arm at {args.hz:g} Hz for {duration:.0f} s, {label} ...", flush=True)
        runs[label] = _camera_run(args.hz, duration, cams, args.encoding, policy)
    cpu1 = cpu_times()
    result = {
        "config": {"hz": args.hz, "duration_s": duration, "cameras": args.cameras, "encoding": args.encoding},
        "machine": machine_info(1, "cpu"),
        **runs,
        "cpu_steal_fraction": (cpu_fractions(cpu0, cpu1) or {}).get("steal"),
        "load_average_before": load0,
        "load_average_after": os.getloadavg(),
    }
    name = args.name if args.name != "bridge-latency" else "bridge-cameras"
    path = write_json(results_path(name), result)
    for label, r in runs.items():
        s, t2c, work = r["step_round_trip"], r["step_tick_to_client"], r["tick_work"]
        line = (f"{label:11s} step p50 {s['p50_ms']:.2f} ms  p99 {s['p99_ms']:.2f} ms | tick to client p50 "
                f"{t2c['p50_ms']:.2f} ms p99 {t2c['p99_ms']:.2f} ms | tick work p50 "
                f"{work['p50_ms']:.2f} ms p99 {work['p99_ms']:.2f} ms | overruns {r['overruns']} of {r['ticks']}")
        if r["cameras"] is not None:
            e, d = r["encode_per_reply"], r["decode_per_reply"]
            line += (f"\n            frames {r['frame_bytes_per_step']['mean'] / 1024:.1f} KiB/step | encode p50 "
                     f"{e['p50_ms']:.2f} ms p99 {e['p99_ms']:.2f} ms | decode p50 {d['p50_ms']:.2f} ms "
                     f"p99 {d['p99_ms']:.2f} ms (both cameras)")
        if "capture_to_command" in r:
            c, pol = r["capture_to_command"], r["policy_per_step"]
            line += (f"\n            policy p50 {pol['p50_ms']:.2f} ms p99 {pol['p99_ms']:.2f} ms | capture to command "
                     f"p50 {c['p50_ms']:.2f} ms p99 {c['p99_ms']:.2f} ms")
        print(line)
    print(f"load average {load0[0]:.1f} before, {result['load_average_after'][0]:.1f} after; results: {path}")
    return result


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--duration", type=float, default=300.0, help="seconds of stepping at the control rate")
    p.add_argument("--hz", type=float, default=50.0, help="control rate of the server")
    p.add_argument("--quick", action="store_true", help="20 s instead of --duration")
    p.add_argument("--transport-calls", type=int, default=2000, help="heartbeat and bare-gRPC calls, each")
    p.add_argument("--name", default="bridge-latency")
    p.add_argument("--cameras", default=None, metavar="HxW",
                   help="measure without and with the sim arm's two cameras of this size (e.g. 84x84)")
    p.add_argument("--encoding", default="jpeg", choices=("jpeg", "png"), help="camera frames on the wire")
    p.add_argument("--policy", action="store_true",
                   help="with --cameras: also run a reach_pixels-shaped pixel policy in the loop (capture to command)")
    args = p.parse_args(argv)
    duration = 20.0 if args.quick else args.duration
    os.environ.setdefault("MUJOCO_GL", "egl")
    if args.cameras:
        return cameras_main(args, duration)

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
