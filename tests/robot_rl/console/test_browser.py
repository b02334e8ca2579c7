"""The operator console in a real browser (headless Chromium) against the simulated arm served over the bridge on
loopback: frames update, the e-stop button and key latch the server's e-stop (seen through GetStatus) and clearing
it needs confirmation and the token, a label click ends the episode with that label in the recorded dataset (what
`robot-rl classifier` reads), the learned reward's probability is shown with its threshold, and the plots and
episode list grow as `hil-train console=true` trains."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request

import numpy as np
from selenium.webdriver.common.by import By

from tests.robot_rl.console.support import TOKEN, running_session, screenshot, wait_for, wait_js

CLI = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())"]


def _open(browser, url: str, token: str | None = TOKEN) -> None:
    browser.get(url)
    wait_js(browser, "consoleState.connected && consoleState.hello")
    if token is not None:
        field = browser.find_element(By.ID, "token")
        field.clear()
        field.send_keys(token)


def _state(address: str) -> str:
    from robot_rl.real.client import RobotClient

    with RobotClient(address, TOKEN) as client:
        return client.status().state


def test_frames_update_and_the_estop_button_and_key_latch_the_servers_estop(browser, pixel_arm, tmp_path):
    server, address = pixel_arm
    rng = np.random.default_rng(0)
    with running_session(address, episodes=50, policy=lambda obs: rng.uniform(-0.3, 0.3, 4)) as (on, session, thread):
        _open(browser, on.server.url)
        # both cameras, at the served size, and new frames keep arriving
        wait_js(browser, "consoleState.framesShown >= 5")
        for camera in ("front", "wrist"):
            assert browser.execute_script(f"return document.getElementById('cam-{camera}').naturalWidth") == 84
        first = browser.execute_script("return [consoleState.seq, document.getElementById('cam-front').src]")
        wait_js(browser, f"consoleState.seq >= {first[0] + 10}")
        assert browser.execute_script("return document.getElementById('cam-front').src") != first[1]
        assert "policy" in browser.find_element(By.ID, "driver").text
        assert len(browser.execute_script("return consoleState.status ? [] : null") or []) == 0
        wait_js(browser, "consoleState.status && consoleState.status.latency_p95_ms !== null")
        assert browser.execute_script("return consoleState.status.health") == "ok"
        assert len(on.server.latencies) > 0 and max(on.server.latencies) < 5.0
        screenshot(browser, "console.png", tmp_path)

        browser.find_element(By.ID, "estop").click()
        wait_for(lambda: _state(address) == "estop", 5, "GetStatus to say estop")
        wait_js(browser, "consoleState.estopRoundTrips.length === 1")
        wait_js(browser, "document.getElementById('robot-state').textContent.includes('E-STOP LATCHED')")
        assert server.status().estop_reason.startswith("console e-stop")
        thread.join(timeout=10)
        assert session.estopped and session.episodes[-1].label == "estop"  # the session saw the latch and stopped
        screenshot(browser, "console_estop.png", tmp_path)

        # clearing asks first, then needs the token: a wrong one leaves the latch standing
        _open(browser, on.server.url, token="not-the-token")
        browser.find_element(By.ID, "clear").click()
        browser.switch_to.alert.accept()
        wait_js(browser, "consoleState.lastMessage.includes('wrong or missing token')")
        assert _state(address) == "estop"
        browser.find_element(By.ID, "clear").click()
        browser.switch_to.alert.dismiss()  # the operator changes their mind: nothing is sent
        time.sleep(0.3)
        assert _state(address) == "estop"
        _open(browser, on.server.url)
        browser.find_element(By.ID, "clear").click()
        browser.switch_to.alert.accept()
        wait_for(lambda: _state(address) != "estop", 5, "the e-stop to clear")

        # the key: the space bar stops the robot from anywhere on the page, with no token
        browser.find_element(By.TAG_NAME, "body").send_keys(" ")
        wait_for(lambda: _state(address) == "estop", 5, "the space bar's e-stop")
        assert server.status().estops == 2


def _classifier(directory, logit: float):
    """A saved classifier on both 84x84 cameras whose probability is sigmoid(`logit`) whatever it sees."""
    import torch

    from robot_rl.classifier import SuccessClassifier, save_classifier

    model = SuccessClassifier({"pixels/front": [84, 84, 3], "pixels/wrist": [84, 84, 3]}, feature_dim=4,
                              channels=4, layers=1, hidden=4)
    with torch.no_grad():
        model.head[-1].weight.zero_()
        model.head[-1].bias.fill_(logit)
    return save_classifier(model, directory)


def test_a_label_click_lands_in_the_dataset_and_the_classifier_probability_is_shown(browser, pixel_arm, tmp_path):
    from robot_rl.real.client import RobotClient

    from robot_rl.classifier_reward import LearnedReward
    from robot_rl.classifier_train import load_labelled_frames
    from robot_rl.datasets import read_dataset
    from robot_rl.hil.connect import dataset_writer

    _, address = pixel_arm
    with RobotClient(address, TOKEN) as c:
        spec = c.spec()
    out = tmp_path / "labelled"
    writer = dataset_writer(str(out), spec, False, "push", cameras=True)
    reward = LearnedReward(_classifier(tmp_path / "clf", logit=-2.0), threshold=0.6)  # p = 0.12: never a success
    with running_session(address, episodes=1, writer=writer, reward_model=reward, time_limit=2000,
                         policy=lambda obs: np.zeros(4)) as (on, session, thread):
        _open(browser, on.server.url, token="wrong")
        wait_js(browser, "consoleState.seq >= 5")
        wait_js(browser, "document.getElementById('prob-text').textContent.includes('threshold 0.60')")
        assert "p(success) 0.12" in browser.find_element(By.ID, "prob-text").text
        browser.find_element(By.ID, "label-success").click()  # a wrong token labels nothing
        wait_js(browser, "consoleState.lastMessage.includes('wrong or missing token')")
        assert thread.is_alive()
        _open(browser, on.server.url)
        wait_js(browser, "consoleState.seq >= 20")
        browser.find_element(By.ID, "label-success").click()
        thread.join(timeout=20)
        assert not thread.is_alive()
        wait_js(browser, "consoleState.episodes.length === 1")
        on.writer.flush()  # the episode is held for a late label until the next one ends or the console closes
        wait_js(browser, "Object.keys(consoleState.episodes[0].videos).length === 2")
        row = browser.execute_script("return consoleState.episodes[0]")
        assert row["label"] == "success" and row["success"]
        videos = row["videos"]
        assert set(videos) == {"front", "wrist"}
        with urllib.request.urlopen(on.server.url.rstrip("/") + videos["front"]) as response:
            assert response.headers["Content-Type"] == "video/mp4" and len(response.read()) > 1000
    assert [e.label for e in session.episodes] == ["success"]
    data = read_dataset(out)
    length = session.episodes[0].length
    assert len(data) == length and 20 <= length < 2000
    success = data.success.bool().tolist()
    assert success[-1] and not any(success[:-1])  # the label is the last row's next.success, as a device's key
    frames = load_labelled_frames(out, cameras=["pixels/front"])  # what the classifier's label rounds read
    assert len(frames) == length and int(frames.label.sum()) == 0  # frame t's label is row t-1's next.success


def test_a_finished_episode_is_labelled_late_from_its_row_until_the_next_one_ends(browser, pixel_arm, tmp_path):
    """An episode that ran out its time limit is labelled a success from its row while the next one runs: the
    recording marks its last row's next.success; once it is recorded, a later label for it is refused."""
    from robot_rl.real.client import RobotClient

    from robot_rl.datasets import read_dataset
    from robot_rl.hil.connect import dataset_writer

    _, address = pixel_arm
    with RobotClient(address, TOKEN) as c:
        spec = c.spec()
    out = tmp_path / "late"
    writer = dataset_writer(str(out), spec, False, "push", cameras=True)
    with running_session(address, episodes=2, writer=writer, time_limit=100,
                         policy=lambda obs: np.zeros(4)) as (on, session, thread):
        _open(browser, on.server.url)
        wait_js(browser, "consoleState.held === 0 && consoleState.episodes.length === 1", timeout=40)
        assert browser.execute_script("return consoleState.episodes[0].label") == "timeout"
        browser.find_element(By.CSS_SELECTOR, "#episodes button.late-success").click()
        wait_js(browser, "consoleState.episodes[0].label === 'success (late)'")
        browser.execute_script("document.getElementById('episodes').scrollIntoView()")
        screenshot(browser, "console_late_label.png", tmp_path)
        thread.join(timeout=40)
        assert not thread.is_alive()
        wait_js(browser, "consoleState.held === 1")  # episode 0 recorded when episode 1 ended
        assert "no longer waits" in on.hub.add_label("failure", 0)
    assert [e.label for e in session.episodes] == ["timeout", "timeout"]
    data = read_dataset(out)
    episodes = data.episode_index.tolist()
    assert sorted(set(episodes)) == [0, 1]  # the console's close recorded episode 1
    first = data.success.bool()[[i for i, e in enumerate(episodes) if e == 0]].tolist()
    second = data.success.bool()[[i for i, e in enumerate(episodes) if e == 1]].tolist()
    assert first[-1] and not any(first[:-1]) and not any(second)


def test_plots_and_episode_list_update_as_hil_train_runs(browser, tmp_path):
    """hil-train's own console (console=true console_port=0, the URL read from its output), the learner in process."""
    from tests.robot_rl.hil.test_robot_commands import served_robot

    env = {**os.environ, "ROBOT_RL_TOKEN": "cli-test-token"}
    with served_robot(control_hz=50) as address:
        proc = subprocess.Popen(
            [*CLI, "hil-train", f"robot={address}", "step_timeout_s=5", "steps=600", f"run_dir={tmp_path / 'run'}",
             "learning_starts=50", "agent.optimiser.batch_size=32", "agent.network.hidden_dims=[32,32]",
             "teleop_args.patience=3", "teleop_args.takeover_steps=5", "record=false", "console=true",
             "console_port=0"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            url = None
            for line in proc.stdout:
                match = re.search(r"console: (http://127\.0\.0\.1:\d+/)", line)
                if match:
                    url = match.group(1)
                    break
            assert url, "hil-train printed no console URL"
            _open(browser, url, token=None)
            assert "serves no cameras" in browser.find_element(By.ID, "cams").text
            wait_js(browser, "Number(document.getElementById('plot-returns').dataset.points) >= 2", timeout=40)
            seen = int(browser.find_element(By.ID, "plot-returns").get_attribute("data-points"))
            wait_js(browser, f"Number(document.getElementById('plot-returns').dataset.points) > {seen}", timeout=40)
            wait_js(browser, "Number(document.getElementById('plot-updates').dataset.points) >= 1")
            episodes = browser.execute_script("return consoleState.episodes")
            assert [e["episode"] for e in episodes] == list(range(len(episodes)))
            assert episodes[-1]["robot_minutes"] > episodes[0]["robot_minutes"] > 0
            assert any(e["updates_per_robot_s"] and e["updates_per_robot_s"] > 0 for e in episodes)
            assert sum(e["interventions"] for e in episodes) > 0  # the scripted operator drove some ticks
            rows = browser.find_elements(By.CSS_SELECTOR, "#episodes tr")
            assert len(rows) == len(episodes)
            assert browser.execute_script("return consoleState.status.state") in {"running", "holding", "resetting"}
            drivers = set(browser.execute_script("return consoleState.status.drivers"))
            assert drivers & {"policy", "operator"} and drivers <= {"policy", "operator", "hold", "reset"}  # the strip
            screenshot(browser, "console_hil_train.png", tmp_path)
        finally:
            proc.terminate()
            proc.wait(timeout=30)


def test_teleop_serves_the_console_of_its_demonstrations(browser, tmp_path):
    """teleop console=true (the hook in robot_rl.hil.connect.drive, shared with deploy): the operator drives, the
    page lists the recorded episodes, and Ctrl-C (SIGTERM) leaves them in the dataset."""
    from robot_rl.datasets import read_dataset
    from tests.robot_rl.hil.test_robot_commands import served_robot

    env = {**os.environ, "ROBOT_RL_TOKEN": "cli-test-token"}
    out = tmp_path / "demos"
    with served_robot(control_hz=50) as address:
        proc = subprocess.Popen(
            [*CLI, "teleop", f"robot={address}", "teleop=scripted", "episodes=500", f"out={out}", "console=true",
             "console_port=0", "step_timeout_s=5"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
        try:
            url = next((m.group(1) for line in proc.stdout
                        if (m := re.search(r"console: (http://127\.0\.0\.1:\d+/)", line))), None)
            assert url, "teleop printed no console URL"
            _open(browser, url)
            wait_js(browser, "document.getElementById('driver').textContent.includes('operator')")
            wait_js(browser, "consoleState.episodes.length >= 2", timeout=40)
            listed = browser.execute_script("return consoleState.episodes.length")
            assert all(e["interventions"] == e["length"] for e in browser.execute_script(
                "return consoleState.episodes"))  # a demonstration: the operator drove every step
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    assert len(set(read_dataset(out).episode_index.tolist())) >= listed


def test_wait_js_waits_for_a_page_whose_script_has_not_run_yet(browser):
    """A navigation returns before a late script defines consoleState; the wait treats that as "not yet" (CI failed on it)."""
    browser.get("data:text/html,<script>setTimeout(() => { window.consoleState = {ready: true}; }, 300)</script>")
    assert wait_js(browser, "consoleState.ready", timeout=10) is True
