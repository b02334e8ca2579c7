import os
import subprocess
import sys

import torch

from robot_rl.core_share import CoreShare


def _run_beside(directory) -> subprocess.Popen:
    """A live process registered in `directory` with 2 threads (as another run would be)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    (directory / str(proc.pid)).write_text("2")
    return proc


def test_runs_split_the_cores_and_take_them_back_when_the_others_end(tmp_path):
    quiet = lambda: 0.0  # noqa: E731 (no other work on the machine)
    share = CoreShare(2, default=2, cores=2, directory=tmp_path, load=quiet, every_s=0.0)
    assert (tmp_path / str(os.getpid())).read_text() == "2"
    assert share.threads() == 2  # alone: torch's default
    before = torch.get_num_threads()
    other = _run_beside(tmp_path)
    try:
        assert share.rebalance(now=1.0) == 1  # two runs on 2 cores: one thread each
        assert torch.get_num_threads() == 1
        assert (tmp_path / str(os.getpid())).read_text() == "1"  # what the others read
        assert share.rebalance(now=2.0) is None  # unchanged
    finally:
        other.kill()
        other.wait()
    assert share.rebalance(now=3.0) == 2  # the other run ended: its file is stale and removed
    assert not (tmp_path / str(other.pid)).exists()
    share.close()
    assert not (tmp_path / str(os.getpid())).exists()
    torch.set_num_threads(before)


def test_other_work_seen_in_the_load_average_keeps_its_cores(tmp_path):
    # this run alone (1 thread registered) while the load is 2: another process keeps one core busy
    share = CoreShare(1, default=2, cores=2, directory=tmp_path, load=lambda: 2.0)
    assert share.threads() == 1
    share.settle(2)  # with 2 threads of its own registered, a load of 2 is explained by this run
    assert share.threads() == 2
    share.close()


def test_rebalance_checks_at_most_every_interval(tmp_path):
    share = CoreShare(2, default=2, cores=2, directory=tmp_path, load=lambda: 0.0, every_s=5.0)
    other = _run_beside(tmp_path)
    try:
        assert share.rebalance(now=100.0) == 1
        share.settle(2)
        assert share.rebalance(now=104.0) is None  # within 5 s of the last check: no directory read
        assert share.rebalance(now=105.0) == 1
    finally:
        other.kill()
        other.wait()
        share.close()


def test_a_run_without_threads_joins_the_count_and_one_with_threads_keeps_them(tmp_path, monkeypatch, capsys):
    from robot_rl import runner
    from robot_rl.config import compose_train_config

    monkeypatch.setenv("ROBOT_RL_RUNS_DIR", str(tmp_path))
    monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))  # a quiet machine
    before = torch.get_num_threads()
    other = _run_beside(tmp_path)
    try:
        runner.prepare(compose_train_config([]))
        cores = runner._core_share.cores
        assert torch.get_num_threads() == max(1, min(runner._TORCH_THREADS, cores // 2))
        assert (tmp_path / str(os.getpid())).exists()
        if runner._TORCH_THREADS > 1:
            assert "2 robot-rl runs share this machine's" in capsys.readouterr().out
        runner.prepare(compose_train_config(["threads=3"]))  # the user's choice: kept, and not counted
        assert torch.get_num_threads() == 3
        assert runner._core_share is None and not (tmp_path / str(os.getpid())).exists()
    finally:
        other.kill()
        other.wait()
        torch.set_num_threads(before)
