"""The operator console: a web page for a running robot session (`teleop`, `hil-train`, `deploy` with
``console=true``).

The page shows every camera's live frames, the robot's state, the control loop's health and timing (the bridge's
``GetStatus``), who drives each tick (policy, operator, or hold), a learned reward's probability beside its
threshold, plots of success and intervention rate against robot minutes, episode returns and learner updates per
robot second, and the episode list with each recorded episode's videos. It acts through the same paths as
everything else: the e-stop button (and the space bar or Escape) sends the bridge's ``EStop`` RPC; clearing it asks
for confirmation and the token; the success, failure and re-record labels reach the session as the operator
device's events, so they end the episode with that label in the recording, where ``robot-rl classifier`` reads it.
A finished episode can still be labelled from its row until the next one ends (``ConsoleWriter`` holds it).

``attach`` is the one hook the robot commands call: it wraps what the session uses (`hub`), starts the web server
(`server`) and gives everything back unchanged when the console is off.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from robot_rl.console.hub import ConsoleClient, ConsoleReward, ConsoleTeleop, ConsoleWriter, Hub
from robot_rl.console.server import ConsoleError, ConsoleServer, check_bind

__all__ = ["Attached", "ConsoleError", "ConsoleServer", "Hub", "attach", "check_bind"]


@dataclass
class Attached:
    """What a session runs with: the console's wrappers when it is on, the originals when it is off."""

    client: Any
    teleop: Any
    writer: Any
    reward_model: Any
    hub: Hub | None = None
    server: ConsoleServer | None = None
    _robot: Any = None  # the console's own RobotClient

    def bind(self, session: Any) -> None:
        """The session whose episodes and learner the page shows."""
        if self.hub is not None:
            self.hub.bind(session)

    def close(self) -> None:
        """Record the episode held for a late label, show the last episodes, then stop serving and close the console's
        own channel (the robot is not touched)."""
        if isinstance(self.writer, ConsoleWriter):
            self.writer.flush()
        if self.hub is not None:
            self.hub.sync()
        if self.server is not None:
            self.server.stop()
        if self._robot is not None:
            self._robot.close()


def attach(args: Any, client: Any, spec: Any, teleop: Any = None, writer: Any = None, reward_model: Any = None,
           log: Any = None) -> Attached:
    """The console of a robot command's keys (`console`, `console_host`, `console_port`, `console_tls_cert`,
    `console_tls_key`; the robot's `robot`, `token`/`token_file`, `tls_root_cert`): started and printed when
    `console=true`, else the originals. ConsoleError (one line) for a setting it refuses."""
    if not getattr(args, "console", False):
        return Attached(client, teleop, writer, reward_model)
    from robot_rl.real.client import RobotClient
    from robot_rl.real.guard import load_token

    try:
        token, _ = load_token(args.token, args.token_file)  # the command has already warned about it
    except ValueError as e:
        raise ConsoleError(str(e)) from None
    check_bind(args.console_host, token, args.console_tls_cert, args.console_tls_key)
    threshold = getattr(getattr(reward_model, "streak", None), "threshold", None)
    hub = Hub(spec, threshold=threshold)
    device = ConsoleTeleop(teleop, hub, spec.action_dim)
    robot = RobotClient(args.robot, token, tls_root_cert=args.tls_root_cert)
    server = ConsoleServer(hub, robot, host=args.console_host, port=args.console_port, token=token,
                           tls_cert=args.console_tls_cert, tls_key=args.console_tls_key)
    try:
        server.start()
    except ConsoleError:
        robot.close()
        raise
    (log or (lambda m: print(m, file=sys.stderr, flush=True)))(
        f"console: {server.url} (e-stop: the button, space or Escape; labels and clearing the e-stop need the token)")
    return Attached(ConsoleClient(client, hub, device), device,
                    ConsoleWriter(writer, hub) if writer is not None else None,
                    ConsoleReward(reward_model, hub) if reward_model is not None else None, hub, server, robot)
