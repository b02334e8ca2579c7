"""The whole human-in-the-loop workflow driven from the console page in a real browser, against the simulated push
arm with two cameras served over the bridge (`robot-rl serve-robot` in a subprocess), each step the command a robot
user runs with `console=true`:

1. `teleop` records demonstrations by the scripted operator; from the page the user ends two more episodes with
   Failure (negatives for the classifier) and labels a finished one late;
2. `classifier` trains a success classifier on those frames and labels;
3. `hil-train` learns with the classifier as its reward and the demonstrations in its prior buffer: the page shows its probability beside the threshold, the
   plots and the episode list grow;
4. `deploy` runs the trained policy: the page shows the policy driving and the episode listed.

It checks the plumbing from page to files to the next command, not that the policy learns (a few hundred steps).
Slow (about two minutes): `make test` runs it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from selenium.webdriver.common.by import By

from tests.robot_rl.console.support import wait_js
from tests.robot_rl.hil.test_robot_commands import TOKEN, served_robot

CLI = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())"]
ENV = {**os.environ, "ROBOT_RL_TOKEN": TOKEN, "MUJOCO_GL": os.environ.get("MUJOCO_GL", "egl")}


@contextmanager
def _command(*args: str) -> Iterator[tuple[subprocess.Popen, str | None]]:
    """A robot command in a subprocess; yields it and its console URL (None if it printed none before ending)."""
    proc = subprocess.Popen([*CLI, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV)
    lines: list[str] = []
    url = None
    try:
        for line in proc.stdout:
            lines.append(line)
            match = re.search(r"console: (http://127\.0\.0\.1:\d+/)", line)
            if match:
                url = match.group(1)
                break
        assert url, f"{args[0]} printed no console URL:\n{''.join(lines)}"
        yield proc, url
    finally:
        if proc.poll() is None:
            proc.terminate()
        out, _ = proc.communicate(timeout=60)
        proc.output = "".join(lines) + (out or "")  # type: ignore[attr-defined]


def _open(browser, url: str) -> None:
    browser.get(url)
    wait_js(browser, "consoleState.connected && consoleState.hello")
    field = browser.find_element(By.ID, "token")
    field.clear()
    field.send_keys(TOKEN)


@pytest.mark.slow
def test_demos_labels_classifier_hil_train_and_deploy_from_the_page(browser, tmp_path):
    from robot_rl.datasets import read_dataset

    demos, clf, run = tmp_path / "demos", tmp_path / "clf", tmp_path / "run"
    console = ["console=true", "console_port=0", "step_timeout_s=5"]
    with served_robot("task=push", "pixels=true", "pixel_size=[64,64]", control_hz=20) as address:
        # 1. demonstrations, and negatives labelled from the page
        with _command("teleop", f"robot={address}", "teleop=scripted", "episodes=7", f"out={demos}", "success_frames=8",
                      *console) as (proc, url):
            _open(browser, url)
            wait_js(browser, "consoleState.episodes.length >= 4", timeout=120)  # the operator's successes
            for _ in range(2):  # Failure ends the episode in progress: all its frames are negatives
                running = "consoleState.episode > Math.max(-1, ...consoleState.episodes.map(e => e.episode))"
                current = wait_js(browser, f"{running} && consoleState.episode + 1") - 1
                browser.find_element(By.ID, "label-failure").click()
                wait_js(browser, f"consoleState.episodes.some(e => e.episode === {current})", timeout=60)
            held = browser.execute_script("return consoleState.held")
            browser.find_element(By.CSS_SELECTOR, "#episodes button.late-failure").click()  # a late label
            wait_js(browser, f"consoleState.episodes.find(e => e.episode === {held}).label === 'failure (late)'")
            proc.wait(timeout=180)
        assert proc.returncode == 0, proc.output
        data = read_dataset(demos)
        per_episode = {}
        for episode, success in zip(data.episode_index.tolist(), data.success.bool().tolist(), strict=True):
            per_episode[episode] = per_episode.get(episode, False) or success
        assert len(per_episode) == 7 and 2 < sum(per_episode.values()) < 7  # successes and labelled failures

        # 2. the classifier, from those frames and labels
        done = subprocess.run([*CLI, "classifier", f"dataset={demos}", f"out={clf}", "steps=150", "holdout=0.3",
                               "channels=16", "layers=2"], capture_output=True, text=True, env=ENV, timeout=600)
        assert done.returncode == 0, done.stdout + done.stderr

        # 3. hil-train on the classifier's reward
        with _command("hil-train", f"robot={address}", f"reward_classifier={clf}", f"demos={demos}", "pixels=false",
                      "steps=300", f"run_dir={run}", "learning_starts=50", "agent.optimiser.batch_size=32",
                      "agent.network.hidden_dims=[32,32]", "teleop=scripted", "teleop_args.patience=3",
                      "teleop_args.takeover_steps=5", "record=false", *console) as (proc, url):
            _open(browser, url)
            wait_js(browser, "document.getElementById('prob-text').textContent.includes('threshold')", timeout=60)
            assert "p(success)" in browser.find_element(By.ID, "prob-text").text  # the classifier's, live
            wait_js(browser, "consoleState.episodes.length >= 1", timeout=120)
            wait_js(browser, "Number(document.getElementById('plot-returns').dataset.points) >= 1")
            proc.wait(timeout=300)
        assert proc.returncode == 0, proc.output
        assert (run / "checkpoints" / "latest.pt").is_file()

        # 4. deploy the trained policy
        with _command("deploy", f"robot={address}", f"checkpoint={run}", "episodes=1", *console) as (proc, url):
            _open(browser, url)
            wait_js(browser, "consoleState.status && consoleState.status.drivers.includes('policy')", timeout=60)
            wait_js(browser, "consoleState.episodes.length === 1", timeout=120)
            proc.wait(timeout=120)
        assert proc.returncode == 0, proc.output
