"""ONNX export of saved policies: one stateless graph per policy, from raw observations to actions in [-1, 1].

Why stateless: a runtime without Python (onnxruntime in C++, on a robot computer) has no place for the action
queues and random draws that `act` keeps, so everything that varies between calls is an input:

- `obs` float32 [N, O]: the raw observation (the env's `state` group); normalisation is inside the graph.
- A camera policy (`ActorPolicy` with `cameras`, a pixel SAC agent's; a BC policy with `cameras`, and the DSRL
  and residual policies on one) takes the
  observation groups by name instead: `state` float32 [N, S] and one uint8 [N, H, W, C] input per camera group (`pixels/front`, ...), the
  images exactly as the env gives them (0-255, channels last, in `cameras` order); the conversion to float, the
  state's normalisation and the encoders are inside the graph. uint8 rather than float: a quarter of the bytes
  per call, and no scaling convention for the caller to get wrong.
- `noise` float32 [N, H, A], for policies that sample (diffusion, flow, DSRL): the latent of one chunk, a
  standard normal draw (the initial x_T of a diffusion policy, x_0 of a flow policy, the Gaussian draw of a
  DSRL steering actor). Zeros give the deterministic chunk that `act(obs, deterministic=True)` plays.
  Diffusion graphs run DDIM with eta = 0 (deterministic given x_T).

Outputs, by kind (`describe` writes the same into the policy's config.json, under metadata.onnx):

- `ActorPolicy` (SAC, also from cameras): `action` [N, A] = tanh(mean).
- `MLPPolicy`, `DiffusionPolicy`, `FlowPolicy` (BC, ReinFlow, DPPO), `NoiseSteeredPolicy` (DSRL):
  `action_chunk` [N, H, A]; play its first `execute` actions, then call again.
- `ResidualPolicy`: the correction needs the base action of every step, which comes from a chunk planned
  earlier, so the base's queue is passed through the graph: inputs `obs`, `queue` float32 [N, H, A] and
  `pos` int64 [N]; outputs `action` [N, A], `queue_out` and `pos_out`, to feed back at the next call. Start
  with any queue and pos = execute (also for an env whose episode restarts): the graph then plans a chunk.

The exporter is torch's TorchScript-based one (`dynamo=False`): it traces the eager code path and needs only
`onnx` (the dynamo exporter would add `onnxscript`). Loops (DDIM or Euler steps) are unrolled at their
configured step counts. The batch size N is dynamic.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from robot_rl.policies.actor_policy import ActorPolicy
from robot_rl.policies.bc_mlp import MLPPolicy
from robot_rl.policies.composed import NoiseSteeredPolicy, ResidualPolicy
from robot_rl.policies.diffusion import DiffusionPolicy
from robot_rl.policies.flow import FlowPolicy
from torch import Tensor, nn

ONNX_FILE = "policy.onnx"
OPSET = 17


class _Graph(nn.Module):
    """`fn(policy, *inputs)` as a module, so the tracer sees the policy's parameters as initialisers."""

    def __init__(self, policy: nn.Module, fn: Callable[..., Any]) -> None:
        super().__init__()
        self.policy, self.fn = policy, fn

    def forward(self, *inputs: Tensor) -> Any:
        return self.fn(self.policy, *inputs)


def _io(name: str, shape: list[Any], meaning: str, dtype: str = "float32") -> dict[str, Any]:
    return {"name": name, "shape": shape, "dtype": dtype, "meaning": meaning}


def graph(policy: nn.Module) -> tuple[_Graph, list[dict[str, Any]], list[dict[str, Any]]]:
    """(module, inputs, outputs) of `policy`'s exported graph (module docstring); inputs and outputs as
    `{name, shape, dtype, meaning}`, with "N" for the batch dimension."""
    kinds = (ActorPolicy, MLPPolicy, DiffusionPolicy, FlowPolicy, NoiseSteeredPolicy, ResidualPolicy)
    if not isinstance(policy, kinds):
        raise TypeError(f"no ONNX graph for {type(policy).__name__}; exportable: {', '.join(k.__name__ for k in kinds)}")
    obs = _io("obs", ["N", policy.obs_dim], "raw observation (the env's state group)")
    shapes = getattr(policy, "cameras", None) or {}
    cameras = list(shapes)
    # a camera policy's inputs are named as the observation's groups: the state, then one image per camera
    camera_inputs = [_io("state", ["N", policy.obs_dim], "raw proprioceptive state (the env's state group)")] + [
        _io(k, ["N", *shape], "camera image as the env gives it: 0-255, channels last", "uint8")
        for k, shape in shapes.items()]
    if isinstance(policy, ActorPolicy):
        out = [_io("action", ["N", policy.action_dim], "deterministic action tanh(mean) in [-1, 1]")]
        if cameras:
            return _Graph(policy, lambda p, s, *ims: p(s, *ims)), camera_inputs, out
        return _Graph(policy, lambda p, o: p(o)), [obs], out
    chunk_shape = ["N", policy.horizon, policy.action_dim]
    chunk = _io("action_chunk", chunk_shape, f"actions in [-1, 1]; play the first {policy.execute}, then call again")
    latent = "standard normal latent of the chunk; zeros: the deterministic chunk"
    k = 1 + len(cameras)  # observation inputs of the chunk policies below (BC, DSRL, residual)

    def observation(args: tuple[Tensor, ...]) -> Tensor | dict[str, Tensor]:
        return args[0] if not cameras else {"state": args[0], **dict(zip(cameras, args[1:k], strict=True))}

    inputs = camera_inputs if cameras else [obs]
    if isinstance(policy, MLPPolicy | DiffusionPolicy | FlowPolicy):  # BC policies, with or without cameras
        if isinstance(policy, MLPPolicy):
            return _Graph(policy, lambda p, *a: p.predict_chunk(observation(a), deterministic=True)), inputs, [chunk]
        fn = lambda p, *a: p.predict_chunk(observation(a[:k]), a[k], deterministic=True)  # noqa: E731 (eta = 0)
        return _Graph(policy, fn), [*inputs, _io("noise", chunk_shape, latent)], [chunk]
    if isinstance(policy, NoiseSteeredPolicy):
        fn = lambda p, *a: p.predict_chunk(observation(a[:k]), a[k])  # noqa: E731
        return _Graph(policy, fn), [*inputs, _io("noise", chunk_shape, latent + " (the steering actor's mean)")], [chunk]
    if isinstance(policy, ResidualPolicy):
        if not policy.base_deterministic:
            raise ValueError("a residual policy whose base samples noise (base_deterministic=false) has no "
                             "stateless graph; export it without format=onnx")
        queue = _io("queue", chunk_shape, "the base chunk each env plays (from queue_out of the last call)")
        pos = _io("pos", ["N"], "index of each env's next base action; reset_value (= execute): plan a new "
                                "chunk (first call, new episode)", "int64")
        pos["reset_value"] = policy.execute
        outs = [_io("action", ["N", policy.action_dim], "executed action clip(base + scale * correction) in [-1, 1]"),
                _io("queue_out", chunk_shape, "feed back as queue"), _io("pos_out", ["N"], "feed back as pos", "int64")]
        return _Graph(policy, lambda p, *a: p.step(observation(a[:k]), *a[k:])), [*inputs, queue, pos], outs
    raise AssertionError(type(policy))  # every kind above returned


def example_inputs(inputs: list[dict[str, Any]], batch: int = 2, seed: int = 0) -> list[Tensor]:
    """Random inputs of the graph's shapes; int64 inputs (`pos`) at their `reset_value`, as at a first call; uint8
    inputs (images) uniform in 0-255."""
    gen = torch.Generator().manual_seed(seed)
    out = []
    for spec in inputs:
        shape = [batch if d == "N" else int(d) for d in spec["shape"]]
        if spec["dtype"] == "int64":
            out.append(torch.full(shape, int(spec.get("reset_value", 0)), dtype=torch.long))
        elif spec["dtype"] == "uint8":
            out.append(torch.randint(0, 256, shape, generator=gen, dtype=torch.uint8))
        else:
            out.append(torch.randn(shape, generator=gen))
    return out


def export_onnx(policy: nn.Module, path: str | os.PathLike[str]) -> dict[str, Any]:
    """Write `policy`'s graph to the file `path`; returns its description (file, opset, inputs, outputs).

    Raises ImportError when the `onnx` package is missing (torch's exporter needs it).
    """
    import onnx  # noqa: F401 (torch's exporter imports it too; failing here names the package)

    module, inputs, outputs = graph(policy)
    module = module.to("cpu").eval()
    args = tuple(example_inputs(inputs))
    names = [s["name"] for s in inputs] + [s["name"] for s in outputs]
    dynamic = {n: {0: "N"} for n in names}
    path = Path(path)
    with torch.no_grad(), warnings.catch_warnings():
        # the TorchScript exporter is deprecated in favour of dynamo (which needs onnxscript); it is what works
        # here with onnx alone, and traces these fixed-step samplers exactly
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", "Constant folding", UserWarning)  # strided slices stay as ops
        torch.onnx.export(
            module, args, str(path), input_names=[s["name"] for s in inputs],
            output_names=[s["name"] for s in outputs], dynamic_axes=dynamic, opset_version=OPSET, dynamo=False,
        )
    # execute: actions to play from each action_chunk (1 for graphs that output one action per call)
    execute = policy.execute if outputs[0]["name"] == "action_chunk" else 1
    return {"file": path.name, "opset": OPSET, "execute": execute, "inputs": inputs, "outputs": outputs}
