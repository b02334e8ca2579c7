"""The operator console's targets (issue 58), measured in a real browser (Debian's headless Chromium via Selenium)
against ``robot-rl serve-robot`` with the simulated push arm and two 84x84 JPEG cameras at 20 Hz, on loopback.

A session (``robot_rl.hil.session.Session``, a random policy, as ``deploy`` runs one) drives the arm in this process
with the console attached (``robot_rl.console.attach``, as ``console=true`` does); the page is open the whole time.

1. **Soak** (``--soak-s``, 600 by default): the page open, frames flowing. Measured: the control loop's overruns
   and ticks over the soak (``GetStatus`` before and after, the server's own count of ticks whose work overran the
   period), and the **frame latency camera -> page** of every frame the page showed: from the tick that made the
   frames (an upper bound on their capture: the step request's send time plus its queueing wait, so the tick's
   physics and rendering are inside the figure) to the page's acknowledgement, sent once the frames are decoded and
   the next paint is done (so the figure also holds the acknowledgement's trip back: an upper bound).
2. **E-stop** (``--estops``, 100 by default) under a learning run: ``robot-rl train`` (Pendulum, SAC, one thread)
   runs beside it (``--no-load`` leaves it out). Each press is a click on the page's button; measured in the page
   from the click to the console's answer, which comes after the bridge's ``EStop`` returned, i.e. after the
   driver's stop (the latch itself happens earlier, at the call's headers): an upper bound on page -> latched. Each
   latch is checked through ``GetStatus`` from this process, then cleared through the page (confirmation accepted,
   token given) and the session resumes before the next press (0.5-1.5 s apart).

0. With ``--pairs N``, first: N pairs of ``--block-s`` blocks with the page closed (the browser on about:blank) then
   open, the overruns of each: what the open page changes, under the same drift of the host's other load.

Writes ``bench/results/<date>-console.json``. ``--quick``: a 30 s soak and 20 e-stops.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np

RESULTS = Path(__file__).parent / "results"
CLI = [sys.executable, "-c", "import sys; from robot_rl.cli import main; sys.exit(main())"]


def _percentiles(values: list[float]) -> dict[str, float | int | None]:
    a = np.asarray(values, float) * 1e3
    if not len(a):
        return {"n": 0}
    return {"n": len(a), "p50_ms": float(np.percentile(a, 50)), "p95_ms": float(np.percentile(a, 95)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max())}


@contextlib.contextmanager
def _served_arm(token: str):
    env = {**os.environ, "ROBOT_RL_TOKEN": token}
    proc = subprocess.Popen([*CLI, "serve-robot", "driver=sim_arm", "task=push", "pixels=true", "pixel_size=[84,84]",
                             "control_hz=20", "port=0", "status_every=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        line = ""
        while "serving" not in line and proc.poll() is None:
            line = proc.stdout.readline()
        match = re.search(r"on 127\.0\.0\.1:(\d+)", line)
        if not match:
            raise SystemExit(f"serve-robot did not start: {line}")
        threading.Thread(target=proc.stdout.read, daemon=True).start()  # keep its pipe drained
        yield f"127.0.0.1:{match.group(1)}"
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1280,1500"):
        options.add_argument(arg)
    return webdriver.Chrome(service=Service(shutil.which("chromedriver") or "/usr/bin/chromedriver"), options=options)


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out: {what}")
        time.sleep(0.02)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--soak-s", type=float, default=600.0)
    p.add_argument("--estops", type=int, default=100)
    p.add_argument("--no-load", action="store_true", help="no learning run beside the e-stop phase")
    p.add_argument("--pairs", type=int, default=0, help="blocks of the page closed then open, before the soak")
    p.add_argument("--block-s", type=float, default=150.0)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--name", default="console")
    args = p.parse_args()
    if args.quick:
        args.soak_s, args.estops = 30.0, 20
    os.environ.setdefault("MUJOCO_GL", "egl")
    from robot_rl.real.client import BridgeError, RobotClient
    from selenium.webdriver.common.by import By

    from robot_rl.console import attach
    from robot_rl.hil.session import Session

    token = secrets.token_hex(16)
    result: dict = {"date": datetime.date.today().isoformat(), "cpus": os.cpu_count(),
                    "setup": "serve-robot driver=sim_arm task=push pixels=true pixel_size=[84,84] control_hz=20 "
                             "(JPEG); Session with a random policy + console in this process; headless Chromium",
                    "load_before": os.getloadavg()}
    with _served_arm(token) as address:
        client, watcher = RobotClient(address, token, step_timeout_s=2.0), RobotClient(address, token)
        spec = client.spec()
        keys = SimpleNamespace(console=True, console_host="127.0.0.1", console_port=0, console_tls_cert=None,
                               console_tls_key=None, robot=address, token=token, token_file=None, tls_root_cert=None)
        on = attach(keys, client, spec, log=print)
        rng = np.random.default_rng(0)
        session = Session(on.client, policy=lambda obs: rng.uniform(-0.5, 0.5, 4), teleop=on.teleop, log=None)
        on.bind(session)
        stop = threading.Event()

        def drive() -> None:  # episodes until told to stop; after an e-stop, wait for the clear and go on
            while not stop.is_set():
                try:
                    session.run(episodes=1)
                except BridgeError:  # an e-stop that came during the reset
                    session.estopped = True
                if session.estopped:
                    while not stop.is_set() and watcher.status().state == "estop":
                        time.sleep(0.02)
                    session.estopped = False

        thread = threading.Thread(target=drive, daemon=True)
        thread.start()
        browser = _browser()
        try:
            browser.get(on.server.url)
            _wait(lambda: browser.execute_script("return consoleState.framesShown") > 20, 60, "frames on the page")
            browser.find_element(By.ID, "token").send_keys(token)
            browser.execute_script("window.confirm = () => true;")  # the operator confirms every clear

            # 0. attribution: the page closed and open in alternating blocks (the same session and console; the host's
            # other load drifts over minutes, so the two see the same drift)
            blocks = []
            for b in range(2 * args.pairs):
                page_open = b % 2 == 1
                browser.get(on.server.url if page_open else "about:blank")
                if page_open:
                    _wait(lambda: browser.execute_script("return consoleState.framesShown") > 5, 60, "frames")
                start = watcher.status()
                time.sleep(args.block_s)
                end = watcher.status()
                blocks.append({"page_open": page_open, "seconds": args.block_s, "ticks": end.ticks - start.ticks,
                               "overruns": end.overruns - start.overruns, "load": os.getloadavg()})
                print(blocks[-1])
            result["blocks"] = blocks
            browser.get(on.server.url)
            _wait(lambda: browser.execute_script("return consoleState.framesShown") > 5, 60, "frames on the page")
            browser.find_element(By.ID, "token").send_keys(token)
            browser.execute_script("window.confirm = () => true;")

            # 1. soak: overruns and frame latency with the page open
            before = watcher.status()
            on.server.latencies.clear()
            shown0 = browser.execute_script("return consoleState.framesShown")
            t0 = time.monotonic()
            time.sleep(args.soak_s)
            after = watcher.status()
            soak_s = time.monotonic() - t0
            shown = browser.execute_script("return consoleState.framesShown") - shown0
            ticks = after.ticks - before.ticks
            result["soak"] = {
                "seconds": soak_s, "ticks": ticks, "overruns": after.overruns - before.overruns,
                "server_jitter_p99_ms": 1e3 * after.jitter_p99_s, "tick_work_p99_ms": 1e3 * after.tick_work_p99_s,
                "frames_shown": shown, "frames_per_s_on_page": shown / soak_s,
                "frame_latency_camera_to_page": _percentiles(list(on.server.latencies)),
                "load_during": os.getloadavg(),
            }
            print(json.dumps(result["soak"], indent=1))

            # 2. e-stops under a learning run
            load = None
            if not args.no_load:
                run_dir = tempfile.mkdtemp(prefix="console_bench_load_")
                load = subprocess.Popen([*CLI, "train", "env.spec=gym:Pendulum-v1", "threads=1", "train.steps=1000000",
                                         f"run_dir={run_dir}", "logger=none"],
                                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                time.sleep(15)  # past its start-up, into updates
            try:
                page_ms, confirmed = [], 0
                for i in range(args.estops):
                    time.sleep(float(rng.uniform(0.5, 1.5)))
                    n = len(browser.execute_script("return consoleState.estopRoundTrips"))
                    browser.find_element(By.ID, "estop").click()
                    _wait(lambda: watcher.status().state == "estop", 5, f"e-stop {i} latched")
                    confirmed += 1
                    _wait(lambda n=n: len(browser.execute_script("return consoleState.estopRoundTrips")) > n, 5,
                          f"e-stop {i} answered on the page")
                    page_ms.append(browser.execute_script("return consoleState.estopRoundTrips.at(-1)"))
                    browser.find_element(By.ID, "clear").click()
                    _wait(lambda: watcher.status().state != "estop", 5, f"e-stop {i} cleared")
                    _wait(lambda: not session.estopped, 5, "the session resumed")
                result["estop"] = {
                    "presses": len(page_ms), "latched_per_getstatus": confirmed, "learning_run_beside": load is not None,
                    "page_click_to_answer": _percentiles([v / 1e3 for v in page_ms]),
                    "console_estop_rpc": _percentiles(list(on.server.estop_s)),
                    "load_during": os.getloadavg(),
                }
                print(json.dumps(result["estop"], indent=1))
            finally:
                if load is not None:
                    load.terminate()
                    load.wait(timeout=30)
        finally:
            stop.set()
            browser.quit()
            thread.join(timeout=30)
            on.close()
            client.close()
            watcher.close()
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"{result['date']}-{args.name}.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
