"""Tasks defined once, run on CPU MuJoCo, MJX or MuJoCo Warp: ``mujoco:<task>``, ``mjx:<task>``, ``warp:<task>``.

A ``SimTask`` (``robot_rl.envs.sim.task``) is an MJCF model plus reset, control, reward, termination and observation in
torch; a ``Physics`` (``robot_rl.envs.sim.physics``) integrates N copies of the model; ``SimEnv`` (``robot_rl.envs.sim.env``)
joins the two into a ``BatchedEnv``. Switching a run from a laptop to a GPU is changing the spec prefix:
``mujoco:cartpole-swingup`` -> ``mjx:cartpole-swingup`` (or ``warp:``), same task, same numbers up to the
simulators' floating-point differences (``tests/envs/sim/test_cross_backend.py``).

Tasks: ``cartpole-swingup`` (dm_control's), ``Hopper-v5``, ``Walker2d-v5``, ``HalfCheetah-v5`` (gymnasium's),
and the tabletop arm's ``reach``, ``push``, ``pick_place`` (``-sparse`` for the success reward).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

import torch

from ..core import EnvOptions, UnknownEnvError
from .env import SimEnv
from .task import SimTask

__all__ = ["SimEnv", "SimTask", "make_task", "task_names", "make_batched"]


def _cartpole() -> SimTask:
    from .tasks.cartpole import CartpoleSwingup

    return CartpoleSwingup()


def _locomotion(name: str) -> Callable[[], SimTask]:
    def build() -> SimTask:
        from .tasks.locomotion import Locomotion

        return Locomotion(name)

    return build


def _arm(name: str) -> Callable[[], SimTask]:
    def build() -> SimTask:
        from .tasks.arm import ArmTask

        task, _, reward = name.partition("-")
        return ArmTask(task, reward or "dense")

    return build


_TASKS: dict[str, Callable[[], SimTask]] = {
    "cartpole-swingup": _cartpole,
    **{name: _locomotion(name) for name in ("Hopper-v5", "Walker2d-v5", "HalfCheetah-v5")},
    **{f"{t}{r}": _arm(f"{t}{r}") for t in ("reach", "push", "pick_place", "track") for r in ("", "-sparse")},
}


def task_names() -> list[str]:
    """Every task name the sim backends know."""
    return list(_TASKS)


def make_task(name: str, prefix: str = "") -> SimTask:
    """A fresh ``SimTask`` for ``name``, or ``UnknownEnvError`` naming the close matches (or every choice)."""
    if name in _TASKS:
        return _TASKS[name]()
    by_lower = {t.lower(): t for t in _TASKS}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), list(by_lower), n=3, cutoff=0.6)]
    choices = ", ".join(prefix + t for t in (close or _TASKS))
    hint = "close matches" if close else "valid choices"
    raise UnknownEnvError(
        f"unknown env spec {prefix + name!r}: no such task for this backend; {hint}: {choices}"
    )


def make_batched(
    spec: str,
    name: str,
    num_envs: int,
    device: str | torch.device,
    seed: int | None,
    options: EnvOptions,
    physics: str,
) -> SimEnv:
    """``robot_rl.envs.make``'s entry for the sim backends; ``physics`` is "cpu", "mjx" or "warp"."""
    task = make_task(name, prefix=spec[: len(spec) - len(name)])
    return SimEnv(task, physics, num_envs, device=device, seed=seed, options=options, spec=spec)
