import pytest
import torch


@pytest.fixture(autouse=True)
def one_thread():
    # Two shared cores: torch's default thread pool makes tiny networks several times slower, not faster.
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
