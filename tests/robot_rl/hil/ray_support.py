"""Ray for the tests: start it, retrying once, and skip (with the reason) when this machine cannot start it.

Ray's local node waits 30 s for its raylet to register; on a shared VM whose hypervisor steals a large share of
the CPU that can time out, which says nothing about our code.
"""

from __future__ import annotations

from typing import Any

import pytest


def init_ray_or_skip(**kwargs: Any) -> Any:
    ray = pytest.importorskip("ray")
    error: Exception | None = None
    for _ in range(2):
        try:
            ray.init(**kwargs)
            return ray
        except Exception as e:  # Ray raises a bare Exception when its node times out during startup
            error = e
            ray.shutdown()
    pytest.skip(f"Ray could not start on this machine (twice): {error}")
