"""What the console's tests share (conftest.py re-exports the fixtures): a headless Chromium (Debian's `chromium` and
`chromium-driver`, driven by Selenium; `.ci/run` installs them), a served simulated arm on loopback, and a session with the console attached."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

TOKEN = "console-test-token-0123456789"
CHROMIUM, CHROMEDRIVER = "/usr/bin/chromium", "/usr/bin/chromedriver"
DOCS = Path(__file__).resolve().parents[3] / "docs"


@pytest.fixture(scope="session")
def browser():
    """One headless Chromium for every test (it takes a second or two to start)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary = shutil.which("chromium") or CHROMIUM
    driver_path = shutil.which("chromedriver") or CHROMEDRIVER
    if not (os.path.exists(binary) and os.path.exists(driver_path)):
        pytest.fail("the console's browser tests need Debian's chromium and chromedriver: "
                    "apt-get install -y chromium chromium-driver (.ci/run does)")
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1500", "--disable-background-timer-throttling",
                "--disable-renderer-backgrounding"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        yield driver
    finally:
        driver.quit()


def wait_js(driver: Any, condition: str, timeout: float = 20.0) -> Any:
    """Wait until the page's `condition` (a JS expression) is truthy; its value.

    Right after a navigation the new page's script may not have run yet, so a condition that names
    `consoleState` throws a ReferenceError: that counts as "not yet" (CI failed on it once), anything else raises."""
    deadline = time.monotonic() + timeout
    while True:
        value = driver.execute_script(
            f"try {{ return ({condition}); }} catch (e) {{ if (e instanceof ReferenceError) return null; throw e; }}")
        if value:
            return value
        if time.monotonic() > deadline:
            state = driver.execute_script("return window.consoleState ? JSON.stringify({seq: consoleState.seq, "
                                          "msg: consoleState.lastMessage, status: consoleState.status}) : 'no consoleState'")
            raise AssertionError(f"page never showed {condition}: {state}")
        time.sleep(0.05)


def wait_for(predicate: Any, timeout: float = 20.0, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def screenshot(driver: Any, name: str, tmp_path: Path) -> Path:
    """The page as a PNG: into docs/ when ROBOT_RL_SCREENSHOTS=1 (what docs/hardware.md shows), else tmp_path."""
    folder = DOCS if os.environ.get("ROBOT_RL_SCREENSHOTS") == "1" else tmp_path
    path = folder / name
    assert driver.save_screenshot(str(path)), path
    return path


def console_args(robot: str, **overrides: Any) -> SimpleNamespace:
    """The keys `attach` reads, as a robot command has them."""
    keys = dict(console=True, console_host="127.0.0.1", console_port=0, console_tls_cert=None, console_tls_key=None,
                robot=robot, token=TOKEN, token_file=None, tls_root_cert=None)
    keys.update(overrides)
    return SimpleNamespace(**keys)


@pytest.fixture
def pixel_arm():
    """The simulated push arm with two 84x84 cameras at 20 Hz, served on loopback; yields (server, address)."""
    from robot_rl.real.drivers.sim_arm import SimArm
    from robot_rl.real.server import RobotServer, ServerConfig

    robot = SimArm(task="push", control_hz=20.0, seed=0, pixels=True, pixel_size=(84, 84))
    server = RobotServer(robot, ServerConfig(port=0, token=TOKEN))
    port = server.start()
    try:
        yield server, f"127.0.0.1:{port}"
    finally:
        server.stop()


@contextlib.contextmanager
def running_session(address: str, *, episodes: int, writer: Any = None, reward_model: Any = None,
                    policy: Any = None, time_limit: int | None = None, teleop: Any = None):
    """A `Session` with the console attached, running `episodes` in a thread; yields (attached, session, thread)."""
    from robot_rl.real.client import RobotClient

    from robot_rl.console import attach
    from robot_rl.hil.session import Session

    client = RobotClient(address, TOKEN, step_timeout_s=5.0)
    spec = client.spec()
    on = attach(console_args(address), client, spec, teleop, writer, reward_model, log=lambda m: None)
    session = Session(on.client, policy=policy, teleop=on.teleop, writer=on.writer, reward_model=on.reward_model,
                      time_limit=time_limit, log=None)
    on.bind(session)
    errors: list[BaseException] = []

    def run() -> None:
        try:
            session.run(episodes=episodes, seed=0)
        except BaseException as e:  # reported by the test
            errors.append(e)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield on, session, thread
    finally:
        session.estopped = True  # ends the run after the episode in progress
        thread.join(timeout=60)
        on.close()
        client.close()
        if writer is not None:
            writer.close()
    if errors:
        raise errors[0]
