"""Per-env random streams for reset noise: the ``ResetRNG`` protocol and ``CounterRNG``, computed on the device.

The batched-env contract seeds sub-env ``i`` with ``seed + i`` and keeps each sub-env's stream independent of
when the others reset. With thousands of envs on a GPU, one ``torch.Generator`` per env is out of the question,
and a shared generator would make env ``i``'s draws depend on how many other envs reset before it. A
counter-based generator has neither problem: every number is a hash of (env key, reset counter, draw index,
element), so draws for all envs are one vectorised expression, envs that do not reset simply do not advance
their counter, and the same seed gives the same numbers on every device and backend (integer arithmetic is
exact), which is what lets the CPU, MJX and Warp backends start from identical states.

The hash is SplitMix64's finaliser (Steele, Lea and Flood, 2014), written with int64 tensors: multiplication
wraps modulo 2**64 as the unsigned version would, and right shifts are made logical with a mask.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch

_M1 = 0xBF58476D1CE4E5B9 - (1 << 64)  # SplitMix64 constants as signed int64
_M2 = 0x94D049BB133111EB - (1 << 64)
_GOLDEN = 0x9E3779B97F4A7C15 - (1 << 64)
_KEY_SALT = 0x5851F42D4C957F2D  # the mixer maps 0 to 0: without a salt, seed 0's env 0 drew exactly 0 first


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    return (x >> s) & ((1 << (64 - s)) - 1)


def _mix(x: torch.Tensor) -> torch.Tensor:
    x = (x ^ _shr(x, 30)) * _M1
    x = (x ^ _shr(x, 27)) * _M2
    return x ^ _shr(x, 31)


class ResetRNG(Protocol):
    """Where ``SimEnv`` draws reset noise: one stream per env, made as ``rng_type(num_envs, device)``.

    The draws made between two ``advance`` calls are every env's draws for its next reset; ``advance(mask)``
    moves on only the envs in ``mask`` (the ones that reset), the others see the same numbers next time.
    ``CounterRNG`` (below) is the default; ``robot_rl.envs.mujoco_backend`` draws from gymnasium's generators.
    """

    def seed(self, seed: int) -> None: ...

    def advance(self, mask: torch.Tensor | None = None) -> None: ...

    def uniform(self, shape: tuple[int, ...], low: float = 0.0, high: float = 1.0) -> torch.Tensor: ...

    def normal(self, shape: tuple[int, ...]) -> torch.Tensor: ...


class CounterRNG:
    """Uniform and normal draws for ``num_envs`` independent, seedable streams on ``device``.

    ``uniform(shape)`` / ``normal(shape)`` return ``[num_envs, *shape]`` float64 tensors; successive calls
    between two ``advance`` calls get different numbers (a draw index). ``advance(mask)`` moves the envs in
    ``mask`` to their next reset and rewinds the draw index; envs outside ``mask`` will see the same numbers
    again next time, which is the point: only envs that actually used their draws move on.
    """

    def __init__(self, num_envs: int, device: torch.device) -> None:
        self.num_envs, self.device = num_envs, device
        self._key = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._counter = torch.zeros(num_envs, dtype=torch.int64, device=device)
        self._draw = 0
        self.seed(int(torch.randint(0, 2**62, (), generator=None)))

    def seed(self, seed: int) -> None:
        """Env ``i`` gets key ``seed + i`` and a fresh counter (the contract's per-sub-env seeding)."""
        ids = torch.arange(self.num_envs, dtype=torch.int64, device=self.device)
        self._key = _mix((ids + int(seed)) * _GOLDEN) ^ _KEY_SALT
        self._counter.zero_()
        self._draw = 0

    def advance(self, mask: torch.Tensor | None = None) -> None:
        """Move the envs in ``mask`` (all when None) past the draws made since the last ``advance``."""
        self._counter += 1 if mask is None else mask.to(torch.int64)
        self._draw = 0

    def bits(self, shape: tuple[int, ...]) -> torch.Tensor:
        """``[num_envs, *shape]`` int64 hashes; each call uses a new draw index."""
        n = math.prod(shape)
        elem = torch.arange(n, dtype=torch.int64, device=self.device)
        h = _mix(self._key ^ (self._counter * _GOLDEN))
        h = _mix(h[:, None] ^ ((self._draw << 32) + elem)[None, :] * _M1)
        self._draw += 1
        return h.reshape(self.num_envs, *shape)

    def uniform(self, shape: tuple[int, ...], low: float = 0.0, high: float = 1.0) -> torch.Tensor:
        """Uniform in [low, high) with 53 random bits (float64)."""
        u = _shr(self.bits(shape), 11).to(torch.float64) * (1.0 / (1 << 53))
        return low + (high - low) * u

    def normal(self, shape: tuple[int, ...]) -> torch.Tensor:
        """Standard normal (Box-Muller on two uniforms; float64)."""
        u1 = 1.0 - self.uniform(shape)  # (0, 1], so the log is finite
        u2 = self.uniform(shape)
        return torch.sqrt(-2.0 * torch.log(u1)) * torch.cos(2.0 * math.pi * u2)
