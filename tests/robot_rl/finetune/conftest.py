import pytest


@pytest.fixture(autouse=True)
def _one_thread(one_thread):  # every fine-tuning test: tests/conftest.py says why
    yield
