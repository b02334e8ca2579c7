"""MJX physics for ``SimEnv`` (``mjx:<task>``): N MuJoCo states stepped by JAX under ``jit(vmap(...))``.

Arrays cross between torch and JAX through DLPack, without copies, on the same device: controls go in with
``jax.dlpack.from_dlpack``, qpos/qvel come out with ``torch.from_dlpack``. JAX would otherwise reserve 75% of
GPU memory when it starts, leaving torch (the learner) to fail on its first large allocation, so this module
sets ``XLA_PYTHON_CLIENT_PREALLOCATE=false`` before JAX is imported (a user's own setting wins); import
``robot_rl.envs.sim.mjx_physics`` (or make the env) before anything else imports JAX if you rely on it.

MJX computes in float32 (JAX's default); the CPU backend in float64. Compilation of the step takes from
seconds (cartpole) to minutes (contact-rich scenes on a CPU) the first time an env of a given size is made.
"""

from __future__ import annotations

import os

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import functools  # noqa: E402
import hashlib  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

try:
    import jax  # noqa: E402
    import jax.numpy as jnp  # noqa: E402
    from mujoco import mjx  # noqa: E402
except ImportError as err:  # pragma: no cover - depends on the extra being installed
    raise ImportError(
        "the mjx: backend needs JAX and MJX: pip install 'robot-rl[mjx]' (CPU), or on a CUDA 12 machine "
        "pip install 'robot-rl[mjx]' 'jax[cuda12]'"
    ) from err

# Compiling MJX steps takes from seconds to minutes; keep the executables on disk across runs unless the user
# has chosen a cache of their own (ROBOT_RL_JAX_CACHE="" turns this off).
_cache = os.environ.get("ROBOT_RL_JAX_CACHE", str(Path.home() / ".cache" / "robot_rl" / "jax"))
if _cache and jax.config.jax_compilation_cache_dir is None:
    jax.config.update("jax_compilation_cache_dir", _cache)


def jax_device(device: torch.device) -> jax.Device:
    """The JAX device that shares memory with torch ``device`` (``cpu`` or ``cuda:k``)."""
    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        gpus = jax.devices("gpu") if jax.default_backend() == "gpu" else []
        if not gpus:
            raise RuntimeError(
                f"torch device {device} is a GPU but JAX sees none ({jax.devices()}); install jax[cuda12]"
            )
        return gpus[device.index or 0]
    raise ValueError(f"the mjx backend supports cpu and cuda devices, not {device}")


class MjxPhysics:
    """N copies of ``model`` as one batched ``mjx.Data``; see the module docstring."""

    dtype = torch.float32

    def __init__(self, model: mujoco.MjModel, num_envs: int, device: torch.device) -> None:
        self.model, self.num_envs, self.device = model, num_envs, torch.device(device)
        self._jdev = jax_device(self.device)
        self._compiled = _compiled_for(model, self._jdev)
        template = self._compiled.template
        self._data = jax.tree_util.tree_map(
            lambda x: jnp.broadcast_to(x, (num_envs, *x.shape)) if hasattr(x, "shape") else x, template
        )

    def state(self) -> tuple[torch.Tensor, torch.Tensor]:
        return torch.from_dlpack(self._data.qpos), torch.from_dlpack(self._data.qvel)

    def step(self, ctrl: torch.Tensor, nstep: int) -> None:
        self._data = self._compiled.step(nstep)(self._data, self._to_jax(ctrl))

    def reset(self, mask: torch.Tensor, qpos: torch.Tensor, qvel: torch.Tensor, ctrl: torch.Tensor) -> None:
        self._data = self._compiled.reset(
            self._data,
            self._to_jax(mask),
            self._to_jax(qpos),
            self._to_jax(qvel),
            self._to_jax(ctrl),
        )

    def get_data(self, index: int, data: mujoco.MjData) -> None:
        for name in ("qpos", "qvel", "ctrl", "act"):
            getattr(data, name)[:] = np.asarray(getattr(self._data, name)[index])

    def close(self) -> None:
        self._data = None

    def _to_jax(self, tensor: torch.Tensor) -> jax.Array:
        if tensor.is_floating_point():
            tensor = tensor.to(device=self.device, dtype=torch.float32)
        return jax.dlpack.from_dlpack(tensor.detach().contiguous())


class _Compiled:
    """The jitted step and reset of one model on one device, shared by every env of that model.

    The model is closed over, not passed: as an argument its few hundred arrays are flattened on every call,
    which measured 13.6 ms per step call for cartpole on the CPU against 1.4 ms closed over. Envs of the same
    model (the training and evaluation envs of a run, every test of a task) share one cache entry, so a second
    env of the same size does not trace or compile again.
    """

    def __init__(self, model: mujoco.MjModel, device: jax.Device) -> None:
        self.mx = mjx.put_model(model, device=device)
        self.template = mjx.make_data(self.mx, device=device)
        self._steps: dict[int, Callable[..., mjx.Data]] = {}
        self.reset = jax.jit(functools.partial(_reset, self.template))

    def step(self, nstep: int) -> Callable[..., mjx.Data]:
        fn = self._steps.get(nstep)
        if fn is None:
            fn = self._steps[nstep] = jax.jit(functools.partial(_step, self.mx, nstep))
        return fn


_COMPILED: dict[tuple[bytes, str], _Compiled] = {}


def _compiled_for(model: mujoco.MjModel, device: jax.Device) -> _Compiled:
    buffer = np.empty(mujoco.mj_sizeModel(model), dtype=np.uint8)
    mujoco.mj_saveModel(model, None, buffer)
    key = (hashlib.sha1(buffer.tobytes()).digest(), str(device))
    if key not in _COMPILED:
        _COMPILED[key] = _Compiled(model, device)
    return _COMPILED[key]


def _step(mx: mjx.Model, nstep: int, data: mjx.Data, ctrl: jax.Array) -> mjx.Data:
    def one_env(d: mjx.Data, u: jax.Array) -> mjx.Data:
        d = d.replace(ctrl=u)
        return jax.lax.fori_loop(0, nstep, lambda _, x: mjx.step(mx, x), d)

    return jax.vmap(one_env)(data, ctrl)


def _reset(
    template: mjx.Data, data: mjx.Data, mask: jax.Array, qpos: jax.Array, qvel: jax.Array, ctrl: jax.Array
) -> mjx.Data:
    """Rows in ``mask`` go back to the freshly made data (mj_resetData) with the given qpos, qvel and ctrl."""
    n = mask.shape[0]

    def pick(fresh: jax.Array, old: jax.Array) -> jax.Array:
        m = mask.reshape((n,) + (1,) * (old.ndim - 1))
        return jnp.where(m, jnp.broadcast_to(fresh, old.shape), old)

    fresh = template.replace(qpos=qpos, qvel=qvel, ctrl=ctrl)
    fresh = jax.tree_util.tree_map(
        lambda f, o: f if f.shape == o.shape else jnp.broadcast_to(f, o.shape), fresh, data
    )
    return jax.tree_util.tree_map(pick, fresh, data)
