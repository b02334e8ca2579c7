"""`robot-rl serve-policy` on loopback: does a robot-side control loop keep its rate while a flow policy with 10
integration steps runs in another process, and do chunk splices jump?

The served policy is a flow policy of the arm's sizes (29 states, 4 actions, chunks of 16, 256 x 3, 10 Euler steps;
random weights: latency and splicing mechanics do not depend on them), saved as a policy directory and served by
`robot-rl serve-policy stochastic=true` in its own process (front door included, token on): every chunk starts from
fresh noise, so consecutive chunks disagree as a sampled flow policy's do, which is what splicing must hide. The robot side is this process: a loop
at `--hz` that steps the real arm physics (`arm:reach`) with `RemotePolicy`'s action each tick (the zero action
where it holds) and sleeps to the next deadline; a tick whose work ends after the next tick's deadline is an
overrun. Each configuration runs `--seconds`:

* `blended`: chunks blended over 3 steps, at most `--max-change` per action entry and step at a splice;
* `raw`: a new chunk replaces the old one at once (blend 0, no limit), what the splice would be without blending.

Reported per configuration: ticks, overruns, the loop's policy-call time (p50/p99/max), chunk latency from request to
arrival (p50/p99), the largest action change at splice steps and within chunks, held ticks and late actions
skipped. Writes ``bench/results/<date>-serve-policy.json``.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import machine_info, markdown_table, results_path, write_json

TOKEN = "bench-serve-policy-token"


def _serve(policy_dir: Path) -> tuple[subprocess.Popen, int]:
    env = {**os.environ, "ROBOT_RL_TOKEN": TOKEN, "PYTHONFAULTHANDLER": "1"}  # SIGABRT prints every thread's stack
    cmd = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())", "serve-policy",
           f"checkpoint={policy_dir}", "port=0", "status_every=0", "threads=1", "stochastic=true"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    line = ""
    while "serving" not in line and proc.poll() is None:
        line = proc.stdout.readline()
    match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
    if not match:
        raise RuntimeError(f"serve-policy did not start: {line}")
    # Its output drained from here on (kept for the report): an unread pipe must not be what slows or stops it.
    proc.lines = []  # type: ignore[attr-defined]
    threading.Thread(target=lambda: proc.lines.extend(proc.stdout), daemon=True).start()  # type: ignore[attr-defined]
    return proc, int(match.group(1))


def run_loop(port: int, seconds: float, hz: float, blend: int, max_change: float | None) -> dict[str, Any]:
    from robot_rl.real.policy_client import PolicyClient, RemotePolicy

    from robot_rl import envs

    client = PolicyClient(f"127.0.0.1:{port}", TOKEN)
    info = client.info()
    client.open()
    remote = RemotePolicy(client, info, blend_steps=blend, max_change=max_change)
    period = 1.0 / hz
    calls: list[float] = []
    overruns = ticks = 0
    with envs.make("arm:reach", num_envs=1, seed=0) as env:
        obs = env.reset()
        remote.reset()
        start = time.perf_counter()
        deadline = start
        while time.perf_counter() - start < seconds:
            t0 = time.perf_counter()
            action = remote(obs["state"][0].numpy())
            calls.append(time.perf_counter() - t0)
            a = torch.zeros(1, 4) if action is None else torch.as_tensor(action)[None]
            obs, _, terminated, truncated, _ = env.step(a)
            if bool(terminated[0] | truncated[0]):
                remote.reset()
            ticks += 1
            deadline += period
            now = time.perf_counter()
            if now > deadline:  # the work of this tick ran into the next one
                overruns += 1
                deadline = now
            else:
                time.sleep(deadline - now)
    client.close()
    s = remote.player.stats
    lat = np.asarray(remote.latencies) * 1000
    call = np.asarray(calls) * 1000
    return {
        "blend_steps": blend, "max_change": max_change, "seconds": seconds, "hz": hz, "ticks": ticks,
        "overruns": overruns, "policy_call_ms_p50": float(np.percentile(call, 50)),
        "policy_call_ms_p99": float(np.percentile(call, 99)), "policy_call_ms_max": float(call.max()),
        "chunks": s.chunks, "chunk_latency_ms_p50": float(np.percentile(lat, 50)),
        "chunk_latency_ms_p99": float(np.percentile(lat, 99)), "chunk_latency_ms_max": float(lat.max()),
        "server_inference_ms_p50": float(np.percentile(np.asarray(remote.inference) * 1000, 50)),
        "splices": s.splices, "max_change_at_splices": float(max(s.splice_change, default=0.0)),
        "max_change_within_chunks": float(s.max_change_within), "held_ticks": s.holds, "late_actions_skipped": s.skipped,
        "stream_errors": client.stream_errors,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=60.0, help="per configuration (the issue's target: 600)")
    parser.add_argument("--hz", type=float, default=20.0, help="control rate of the robot-side loop")
    parser.add_argument("--raw-seconds", type=float, default=120.0, help="the unblended comparison's duration")
    parser.add_argument("--max-change", type=float, default=0.2, help="per-step action change bound at splices")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from robot_rl.policies.flow import FlowPolicy
    from robot_rl.policies.io import save_policy

    torch.manual_seed(0)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        policy_dir = Path(tmp) / "flow"
        save_policy(FlowPolicy(29, 4, horizon=16, execute=8, num_inference_steps=10), policy_dir,
                    {"kind": "flow", "env_spec": "arm:reach"})
        proc, port = _serve(policy_dir)
        try:
            for name, blend, limit in (("blended", 3, args.max_change), ("raw", 0, None)):
                seconds = args.seconds if name == "blended" else min(args.seconds, args.raw_seconds)
                row = {"config": name, "load_1min_before": os.getloadavg()[0],
                       **run_loop(port, seconds, args.hz, blend, limit)}
                rows.append(row)
                print(markdown_table([row]), flush=True)
        finally:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
                stopped = "clean" if any("policy server stopped" in x for x in proc.lines) else "exited"
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGABRT)  # faulthandler: where each thread is stuck, into its output
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                time.sleep(0.5)
                stopped = "did not exit within 20 s of SIGINT (aborted)"
            tail = proc.lines[-5:] if stopped != "did not exit within 20 s of SIGINT (aborted)" else proc.lines[-80:]
            print(f"serve-policy: {stopped}; its last lines: {''.join(tail)}", flush=True)
    payload = {"benchmark": "serve-policy loopback", "policy": "flow 256x3, 10 Euler steps, horizon 16",
               "machine": machine_info(1, "cpu"), "load_1min": os.getloadavg()[0], "server_shutdown": stopped,
               "rows": rows}
    print(f"wrote {write_json(results_path('serve-policy'), payload)}")


if __name__ == "__main__":
    main()
