"""The console tests' fixtures (tests/robot_rl/console/support.py)."""

from tests.robot_rl.console.support import browser, pixel_arm  # noqa: F401
