from collections.abc import Callable, Iterator

import pytest

from robot_rl import envs


@pytest.fixture
def make() -> Iterator[Callable[..., envs.BatchedEnv]]:
    """envs.make, closing every env it built at teardown (renderers hold EGL contexts)."""
    built: list[envs.BatchedEnv] = []

    def _make(*args, **kwargs) -> envs.BatchedEnv:
        env = envs.make(*args, **kwargs)
        built.append(env)
        return env

    yield _make
    for env in built:
        env.close()
