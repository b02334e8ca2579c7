import os
import signal

os.environ.setdefault("MUJOCO_GL", "egl")

# A test run started in the background (`pytest ... &` from a script) inherits SIGINT ignored, and so would every
# process the tests start; the tests send SIGINT as a user's Ctrl-C, so Python's own handler is put back.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


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
