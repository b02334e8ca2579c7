import os

os.environ.setdefault("MUJOCO_GL", "egl")


import pytest  # noqa: E402


@pytest.fixture
def one_thread():
    """One torch thread for the test: on two shared cores torch's default thread pool makes tiny networks several
    times slower, not faster. Modules use it with ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
