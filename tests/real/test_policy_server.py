"""`robot-rl serve-policy` on loopback: a real saved policy behind the real server (front door included), real gRPC
clients, a client killed mid-stream; and the robot-side chunk player's splicing."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
import torch

grpc = pytest.importorskip("grpc")

from robot_rl.policies.bc_mlp import MLPPolicy  # noqa: E402
from robot_rl.policies.io import load_policy, save_policy  # noqa: E402
from robot_rl.real.policy_client import Chunk, ChunkPlayer, PolicyClient, PolicyServerError, RemotePolicy  # noqa: E402
from robot_rl.real.policy_server import PolicyServer, PolicyServerConfig  # noqa: E402

TOKEN = "policy-test-token-0123"
OBS, ACT, H = 29, 4, 8
CLI = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())"]


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    torch.manual_seed(0)
    path = tmp_path_factory.mktemp("served") / "policy"
    save_policy(MLPPolicy(OBS, ACT, horizon=H, execute=4, hidden=[32]), path, {"kind": "bc", "env_spec": "arm:reach"})
    return path


def _chunk(seq: int, step: int, actions) -> Chunk:
    return Chunk(seq, step, np.asarray(actions, np.float32), 0.0, 0.0)


# -- the robot-side player ------------------------------------------------------------------------------------------
def test_the_player_skips_actions_of_passed_steps_and_holds_past_the_last_chunk():
    p = ChunkPlayer(1, blend_steps=0)
    p.offer(_chunk(1, 2, [[0.1], [0.2], [0.3]]))  # for steps 2, 3, 4; used from step 3: one action late
    assert p.action(3)[0] == pytest.approx(0.2) and p.stats.skipped == 1
    assert p.action(4)[0] == pytest.approx(0.3)
    assert p.action(5) is None and p.stats.holds == 1  # nothing left: hold, never a stale action


def test_a_splice_is_blended_and_bounded_where_a_raw_switch_jumps():
    """Old chunk at -0.8, new at +0.8: switching raw jumps 1.6 in one step; blended over 3 steps with a 0.2 limit,
    no step changes by more than 0.2 and the output reaches the new chunk."""
    def play(blend: int, limit: float | None) -> tuple[list[float], ChunkPlayer]:
        p = ChunkPlayer(1, blend_steps=blend, max_change=limit)
        p.offer(_chunk(1, 0, [[-0.8]] * 8))
        out = [p.action(t)[0] for t in range(3)]
        p.offer(_chunk(2, 3, [[0.8]] * 12))
        out += [p.action(t)[0] for t in range(3, 15)]
        return out, p

    raw, p_raw = play(0, None)
    assert max(np.abs(np.diff(raw))) == pytest.approx(1.6) and p_raw.stats.splices == 1
    smooth, p = play(3, 0.2)
    assert max(np.abs(np.diff(smooth))) <= 0.2 + 1e-6
    assert max(p.stats.splice_change) <= 0.2 + 1e-6 and smooth[-1] == pytest.approx(0.8)


# -- the server on loopback -----------------------------------------------------------------------------------------
@pytest.fixture
def served(policy_dir):
    """The saved policy behind a real PolicyServer (front door process included) on a free loopback port."""
    server = PolicyServer(load_policy(policy_dir), PolicyServerConfig(port=0, token=TOKEN, max_clients=2,
                                                                      idle_timeout_s=1.5),
                          {"kind": "bc", "env_spec": "arm:reach"})
    server.start()
    yield server
    server.stop()


def _wait(predicate, timeout_s: float = 10.0) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_two_clients_at_once_get_each_their_own_policy_chunks(served, policy_dir):
    """Two robot clients stream at once; each chunk is the served policy's own chunk for that client's
    observation (the same numbers a local predict_chunk gives), echoed with its step."""
    local = load_policy(policy_dir)
    results: dict[int, list] = {0: [], 1: []}

    def robot(i: int) -> None:
        rng = np.random.default_rng(i)
        with PolicyClient(f"127.0.0.1:{served.port}", TOKEN) as client:
            while len(results[i]) < 15:
                state = rng.standard_normal(OBS).astype(np.float32)
                step = 100 * i + len(results[i])
                assert _wait(lambda s=step, x=state: client.request(s, x), 5.0)
                assert _wait(lambda: not client.in_flight, 5.0)
                chunk = client.take()
                results[i].append((state, step, chunk))

    threads = [threading.Thread(target=robot, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert served.counters.streams_started == 2
    for rows in results.values():
        assert len(rows) == 15
        for state, step, chunk in rows:
            want = local.predict_chunk({"state": torch.from_numpy(state)[None]}, deterministic=True)[0].detach().numpy()
            assert chunk.step == step and chunk.actions.shape == (H, ACT)
            np.testing.assert_allclose(chunk.actions, want, atol=1e-5)
    assert _wait(lambda: served.active == 0)


def test_a_client_killed_mid_stream_frees_its_slot_and_never_stalls_the_others(served):
    """A client process SIGKILLed while its stream is open: the server ends that stream (the slot is free for a
    new client, max_clients=2 here) while a live client's chunks keep coming at the same pace."""
    script = textwrap.dedent(f"""
        import time, numpy as np
        from robot_rl.real.policy_client import PolicyClient
        c = PolicyClient("127.0.0.1:{served.port}", "{TOKEN}").open()
        i = 0
        while True:
            if c.request(i, np.zeros({OBS}, np.float32)):
                i += 1
            if i == 5:
                print("streaming", flush=True)
            time.sleep(0.01)
    """)
    victim = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline().strip() == "streaming"
        with PolicyClient(f"127.0.0.1:{served.port}", TOKEN) as live:
            assert _wait(lambda: served.active == 2)
            latencies = []
            for step in range(40):
                if step == 10:
                    os.kill(victim.pid, signal.SIGKILL)
                assert _wait(lambda s=step: live.request(s, np.zeros(OBS, np.float32)), 5.0)
                assert _wait(lambda: not live.in_flight, 5.0)
                latencies.append(live.take().latency_s)
            assert _wait(lambda: served.active == 1, 10.0)  # the dead client's stream ended
            assert max(latencies) < 1.0, latencies
            with PolicyClient(f"127.0.0.1:{served.port}", TOKEN) as newcomer:  # its slot is free again
                assert _wait(lambda: newcomer.request(0, np.zeros(OBS, np.float32)), 5.0)
                assert _wait(lambda: newcomer.take() is not None, 5.0)
    finally:
        victim.kill()
        victim.wait(timeout=10)


def test_a_third_client_is_refused_at_once_and_an_idle_one_is_dropped(served):
    first = PolicyClient(f"127.0.0.1:{served.port}", TOKEN).open()
    second = PolicyClient(f"127.0.0.1:{served.port}", TOKEN).open()
    third = PolicyClient(f"127.0.0.1:{served.port}", TOKEN, retry_s=30)
    try:
        for c in (first, second):
            assert _wait(lambda c=c: c.request(0, np.zeros(OBS, np.float32)), 5.0)
        assert _wait(lambda: served.active == 2)
        third.open()
        assert _wait(lambda: third.error is not None, 5.0)
        assert third.error.startswith("RESOURCE_EXHAUSTED") and "max_clients" in third.error
        # first and second send nothing more: after idle_timeout_s (1.5 s) the server ends both streams
        assert _wait(lambda: served.active == 0, 10.0) and served.counters.idle_cancelled >= 2
    finally:
        for c in (first, second, third):
            c.close()


def test_a_wrong_token_is_refused_in_one_line(served):
    with pytest.raises(PolicyServerError, match="refused the token"):
        PolicyClient(f"127.0.0.1:{served.port}", "wrong-token").info()
    assert served.counters.refused_token >= 1


def test_the_control_loop_never_waits_for_a_slow_policy(policy_dir):
    """A policy that takes 80 ms per chunk behind a 20 ms control step: every call of the loop returns within a
    few ms, and the loop plays chunks (holding only at the start)."""

    class Slow(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner, self.obs_dim, self.action_dim, self.horizon = inner, OBS, ACT, H

        def predict_chunk(self, obs, deterministic=False):
            time.sleep(0.08)
            return self.inner.predict_chunk(obs, deterministic=deterministic)

    with PolicyServer(Slow(load_policy(policy_dir)), PolicyServerConfig(port=0, token=TOKEN, front_door=False)) as s:
        client = PolicyClient(f"127.0.0.1:{s.port}", TOKEN).open()
        remote = RemotePolicy(client, client.info(), refill=6)
        try:
            calls, actions = [], []
            for _ in range(60):
                t0 = time.perf_counter()
                actions.append(remote(np.zeros(OBS, np.float32)))
                calls.append(time.perf_counter() - t0)
                time.sleep(0.02)
        finally:
            client.close()
    assert max(calls) < 0.01, max(calls)
    played = sum(a is not None for a in actions)
    assert played >= 40 and remote.player.stats.chunks >= 5, (played, remote.summary())


def test_serve_policy_then_deploy_through_it_on_the_served_arm(policy_dir, capsys, monkeypatch):
    """The commands end to end: serve-policy (its own process) and serve-robot (the simulated arm, its own process);
    deploy policy_server= drives the arm from the served chunks and reports them, and the step of delay they add."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "robot_rl", "hil"))
    from test_robot_commands import TOKEN as ROBOT_TOKEN
    from test_robot_commands import served_robot

    from robot_rl.cli import main

    env = {**os.environ, "ROBOT_RL_TOKEN": ROBOT_TOKEN}
    proc = subprocess.Popen([*CLI, "serve-policy", f"checkpoint={policy_dir}", "port=0", "status_every=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = ""
        while "serving" not in line and proc.poll() is None:
            line = proc.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        assert match, line
        assert "29 states -> 8 x 4 actions" in line
        monkeypatch.setenv("ROBOT_RL_TOKEN", ROBOT_TOKEN)
        with served_robot() as robot:
            capsys.readouterr()
            code = main(["deploy", f"robot={robot}", f"policy_server=127.0.0.1:{match.group(1)}", "step_timeout_s=5",
                         "episodes=1"])
        out = capsys.readouterr()
        assert code == 0, out.err
        assert "done: 1 episodes" in out.out and "served policy:" in out.out
        assert int(re.search(r"served policy: (\d+) chunks", out.out).group(1)) >= 2
        # a chunk is for the steps after its observation's: one step of delay the policy was not trained with
        assert "observation-to-action delay on the bridge: median 1 steps" in out.out
        assert "trained with no delay (differs: see the warning)" in out.out
    finally:
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=20)
    assert "policy server stopped" in rest
