"""Latency of exported policies: torch eager against onnxruntime, per policy kind, batch 1, one CPU thread.

What a robot computer pays per control decision: one call of the exported graph (`robot_rl.policies.onnx`) for
one observation. For SAC and residual policies that is one action; for chunk policies (BC, ReinFlow, DPPO, DSRL)
it is one chunk, planned every `execute` actions (the table's `execute` column; the amortised cost per action
is the call divided by it, the latency of a planning step is the call itself). Torch runs the same function
the graph was traced from (eager, `torch.no_grad`), on the same inputs; onnxruntime runs `policy.onnx` with
one intra-op and one inter-op thread. Each call is timed on its own (`time.perf_counter`), `--calls` calls
of each runtime after `--warmup`, the two runtimes alternating call by call, and the median and 90th
percentile are reported, with the ratio torch / onnxruntime of the medians.

Sizes are those of the shipped presets for the arm (29 state values, 4 actions, chunks of 8): the default
SAC agent (hyperspherical actor, width 128), `agent=sac` (256 x 2 MLP), BC MLP (256 x 2), diffusion (256 x 3,
10 DDIM steps), flow (256 x 3, 10 Euler steps), ReinFlow's flow (4 steps), DPPO's diffusion (10 steps),
residual RL (flow base with 4 steps, 256 x 2 correction) and DSRL (flow base with 4 steps, 256 x 2 steering
actor). SAC from cameras (`robot-rl export` of a pixel run; the arm's 7 proprioceptive values plus the `front`
and `wrist` cameras): DrQ's encoder at 84x84 (4 conv layers of 32 channels, 50 features per camera) under the
256 x 2 actor of `agent=sac`, and the `experiment=reach_pixels` preset (48x48, 3 layers of 16 channels, 32
features, LayerNorm actor); the graph takes each camera's uint8 image as the env gives it. Weights are random
with fitted normalisers: latency does not depend on their values.

Writes ``bench/results/<date>-export-latency.json``. ``--quick``: 200 calls (figures indicative only);
``--only pixels``: the rows whose name contains ``pixels`` (a comma-separated list of substrings).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from bench.common import cpu_fractions, cpu_times, machine_info, markdown_table, results_path, write_json

OBS, A, H, EXECUTE = 29, 4, 8, 4
PIXEL_STATE = 7  # arm:<task>-pixels: proprioception only, the rest is in the images


def _fitted(policy):
    policy.fit_normalization(torch.randn(256, OBS) * 2 + 0.5, torch.rand(256, A) * 1.8 - 0.9)
    return policy


def _actor(obs_dim: int, action_dim: int, network: str = "mlp") -> dict[str, Any]:
    return {"obs_dim": obs_dim, "action_dim": action_dim, "network": network, "hidden": [256, 256], "width": 128,
            "obs_norm": True}


def policies() -> dict[str, Callable[[], torch.nn.Module]]:
    """name -> a builder of the policy as `robot-rl export` writes it for that kind of run."""
    from robot_rl.policies import (
        ActorPolicy,
        DiffusionPolicy,
        FlowPolicy,
        MLPPolicy,
        NoiseSteeredPolicy,
        ResidualPolicy,
    )
    from robot_rl.policies.composed import base_spec

    def flow(steps: int) -> FlowPolicy:
        return _fitted(FlowPolicy(OBS, A, H, EXECUTE, num_inference_steps=steps))

    def residual() -> ResidualPolicy:
        base = flow(4)
        policy = ResidualPolicy(base_spec(base), _actor(OBS + A, A), scale=0.1)
        policy.base.load_state_dict(base.state_dict())
        return policy

    def dsrl() -> NoiseSteeredPolicy:
        base = flow(4)
        policy = NoiseSteeredPolicy(base_spec(base), _actor(OBS, H * A), noise_bound=1.5)
        policy.base.load_state_dict(base.state_dict())
        return policy

    def pixels(size: int, feature_dim: int, channels: int, layers: int, layer_norm: bool) -> ActorPolicy:
        cameras = {"pixels/front": [size, size, 3], "pixels/wrist": [size, size, 3]}
        policy = ActorPolicy(**_actor(PIXEL_STATE, A), layer_norm=layer_norm, cameras=cameras,
                             encoder_feature_dim=feature_dim, encoder_channels=channels, encoder_layers=layers)
        policy.state_norm.update(torch.randn(256, PIXEL_STATE) * 2 + 0.5)
        return policy

    return {
        "sac (default agent)": lambda: ActorPolicy(**_actor(OBS, A, "hyper")),
        "sac (agent=sac)": lambda: ActorPolicy(**_actor(OBS, A)),
        "bc mlp": lambda: _fitted(MLPPolicy(OBS, A, H, EXECUTE, hidden=[256, 256])),
        "bc diffusion": lambda: _fitted(DiffusionPolicy(OBS, A, H, EXECUTE, num_inference_steps=10)),
        "bc flow": lambda: flow(10),
        "reinflow (flow, 4 steps)": lambda: flow(4),
        "dppo (diffusion, 10 steps)": lambda: _fitted(DiffusionPolicy(OBS, A, H, EXECUTE, num_inference_steps=10)),
        "residual (flow base)": residual,
        "dsrl (flow base)": dsrl,
        "sac pixels (2 cameras 84x84, DrQ encoder)": lambda: pixels(84, 50, 32, 4, False),
        "sac pixels (2 cameras 48x48, reach_pixels preset)": lambda: pixels(48, 32, 16, 3, True),
    }


def _per_call(fns: list[Callable[[], Any]], calls: int, warmup: int) -> list[np.ndarray]:
    """Seconds of each call of each function, the functions interleaved call by call, so that the load of other
    processes drifting over the run falls on both runtimes alike."""
    for _ in range(warmup):
        for fn in fns:
            fn()
    out = [np.empty(calls) for _ in fns]
    for i in range(calls):
        for fn, times in zip(fns, out, strict=True):
            t = time.perf_counter()
            fn()
            times[i] = time.perf_counter() - t
    return out


def measure(name: str, policy: torch.nn.Module, folder: Path, calls: int, warmup: int) -> dict[str, Any]:
    """One row: torch eager and onnxruntime per-call latency of `policy`'s graph at batch 1."""
    import onnxruntime as ort
    from robot_rl.policies.onnx import example_inputs, export_onnx, graph

    policy = policy.eval()
    module, inputs, outputs = graph(policy)
    path = folder / f"{len(list(folder.iterdir()))}.onnx"
    export_onnx(policy, path)
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    xs = example_inputs(inputs, batch=1, seed=0)
    feed = {spec["name"]: x.numpy() for spec, x in zip(inputs, xs, strict=True)}
    with torch.no_grad():
        expected = module(*xs)
    expected = expected[0] if isinstance(expected, tuple) else expected
    max_diff = float(np.abs(session.run(None, feed)[0] - expected.numpy()).max())

    def eager() -> None:
        with torch.no_grad():
            module(*xs)

    def onnx() -> None:
        session.run(None, feed)

    t_torch, t_onnx = _per_call([eager, onnx], calls, warmup)
    return {
        "policy": name,
        "class": type(policy).__name__,
        "output": outputs[0]["name"],
        "execute": getattr(policy, "execute", 1),
        "torch_p50_ms": float(np.median(t_torch) * 1e3),
        "torch_p90_ms": float(np.percentile(t_torch, 90) * 1e3),
        "onnx_p50_ms": float(np.median(t_onnx) * 1e3),
        "onnx_p90_ms": float(np.percentile(t_onnx, 90) * 1e3),
        "torch_over_onnx_p50": float(np.median(t_torch) / np.median(t_onnx)),
        "max_abs_diff": max_diff,
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--calls", type=int, default=2000, help="timed calls per policy and runtime (>= 1000)")
    p.add_argument("--warmup", type=int, default=100, help="untimed calls before timing")
    p.add_argument("--quick", action="store_true", help="200 calls: for development, figures indicative only")
    p.add_argument("--note", default="", help="a remark stored with the results (e.g. what else loaded the machine)")
    p.add_argument("--name", default="export-latency")
    p.add_argument("--only", default="", help="comma-separated substrings: measure only the policies they name")
    args = p.parse_args(argv)
    calls = 200 if args.quick else args.calls
    torch.set_num_threads(1)
    torch.manual_seed(0)
    load_before, cpu0 = os.getloadavg(), cpu_times()
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        only = [part for part in args.only.split(",") if part]
        for name, build in policies().items():
            if only and not any(part in name for part in only):
                continue
            rows.append(measure(name, build(), Path(folder), calls, args.warmup))
            r = rows[-1]
            print(f"  {name}: torch {r['torch_p50_ms']:.3f} ms, onnxruntime {r['onnx_p50_ms']:.3f} ms", flush=True)
    result = {
        "config": {"batch": 1, "torch_threads": 1, "onnxruntime_threads": 1, "calls": calls, "warmup": args.warmup,
                   "obs_dim": OBS, "action_dim": A, "horizon": H, "execute": EXECUTE,
                   "pixel_state_dim": PIXEL_STATE, "only": args.only},
        "machine": {**machine_info(1, "cpu"), "onnxruntime": _version("onnxruntime"), "onnx": _version("onnx")},
        "note": args.note,
        # other processes on the machine lengthen the tails (p90) more than the medians
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "cpu_busy_and_steal": cpu_fractions(cpu0, cpu_times()),
        "rows": rows,
    }
    path = write_json(results_path(args.name), result)
    columns = ["policy", "output", "execute", "torch_p50_ms", "torch_p90_ms", "onnx_p50_ms", "onnx_p90_ms",
               "torch_over_onnx_p50"]
    print(markdown_table(rows, columns))
    print(f"results: {path}")
    return result


def _version(dist: str) -> str | None:
    from importlib import metadata

    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
