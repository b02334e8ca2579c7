"""`robot-rl serve-policy`: serve any trained policy to robot-side clients over gRPC (action chunks), apart from the
robot's control loop (`robot_rl.real.policy_server`); `robot-rl deploy policy_server=HOST:PORT` is its client."""

from __future__ import annotations

import atexit
import logging
import sys
import time
from dataclasses import dataclass

from robot_rl.cli.robot import TOKEN_ENV, robot_command
from robot_rl.fields import help_field as _help
from robot_rl.hil import connect
from robot_rl.hil.connect import CommandError
from robot_rl.signals import sigterm_as_interrupt


@dataclass
class ServePolicyArgs:
    checkpoint: str = _help(
        "", "required: the policy to serve: a run directory (its best.pt, else latest.pt), a checkpoint file, or a "
            "policy directory (robot-rl bc, export, ReinFlow, DPPO); chunked policies send their whole chunk"
    )
    device: str = _help("cpu", "torch device the policy runs on (cpu, cuda)")
    stochastic: bool = _help(False, "sample actions (diffusion/flow: fresh noise per chunk) instead of the mean")
    threads: int | None = _help(None, "torch CPU threads of the policy (default: torch's)")
    host: str = _help("127.0.0.1", "address to listen on (0.0.0.0: all interfaces)")
    port: int = _help(50061, "port to listen on (0: any free port, printed at start)")
    token_file: str | None = _help(None, f"file whose first line is the shared token (default: ${TOKEN_ENV})")
    token: str | None = _help(
        None, f"shared token (visible to every local user in the process list: prefer ${TOKEN_ENV} or token_file=)"
    )
    allow_unauthenticated: bool = _help(False, "serve without a token (refused unless host= is a loopback address)")
    allow_plaintext_token: bool = _help(False, "serve with a token but without TLS off loopback (a trusted network)")
    tls_cert: str | None = _help(None, "PEM certificate chain (with tls_key=: TLS)")
    tls_key: str | None = _help(None, "PEM private key of tls_cert=")
    max_clients: int = _help(8, "robot clients served at once; one more is refused at once (RESOURCE_EXHAUSTED)")
    idle_timeout_s: float = _help(30.0, "end a client's stream that sent nothing for this long (its slot is freed)")
    keepalive_s: float = _help(2.0, "HTTP/2 ping interval: a client whose machine vanished is dropped within ~3x this")
    max_connections: int = _help(512, "client connections open at once, all peers together")
    max_connections_per_peer: int = _help(32, "client connections from one peer address")
    handshake_timeout_s: float = _help(2.0, "close a connection that has not sent a valid HTTP/2 or TLS start by then")
    status_every: float = _help(10.0, "seconds between status lines (0: none)")
    run_for: float = _help(0.0, "stop after this many seconds (0: until Ctrl-C)")


def serve_policy(args: ServePolicyArgs) -> int:
    """Serve a trained policy to robot clients over gRPC."""
    if not args.checkpoint:
        raise CommandError("serve-policy needs checkpoint=<run dir, checkpoint file or policy dir>")
    import numpy as np
    import torch

    from robot_rl.export import ExportError, policy_from_run
    from robot_rl.real.guard import format_address
    from robot_rl.real.output import OutputPump
    from robot_rl.real.policy_server import PolicyServer, PolicyServerConfig

    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s", datefmt="%H:%M:%S")
    logging.getLogger("robot_rl.real").setLevel(logging.INFO)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    token = connect.token(args)
    config = PolicyServerConfig(
        host=args.host, port=args.port, token=token, allow_unauthenticated=args.allow_unauthenticated,
        allow_plaintext_token=args.allow_plaintext_token, tls_cert=args.tls_cert, tls_key=args.tls_key,
        max_clients=args.max_clients, idle_timeout_s=args.idle_timeout_s, keepalive_s=args.keepalive_s,
        max_connections=args.max_connections, max_connections_per_peer=args.max_connections_per_peer,
        handshake_timeout_s=args.handshake_timeout_s)
    try:
        config.validate()
    except ValueError as e:
        raise CommandError(str(e)) from None
    try:
        policy, meta = policy_from_run(args.checkpoint, args.device)
    except (ExportError, OSError) as e:
        raise CommandError(str(e)) from None
    except Exception as e:  # a checkpoint of another kind: CheckpointError and friends
        raise CommandError(f"{args.checkpoint}: {e}") from None
    server = PolicyServer(policy, config, meta, stochastic=args.stochastic)
    try:
        port = server.start()
    except OSError as e:
        raise CommandError(str(e)) from None
    atexit.register(OutputPump().start().stop)  # as serve-robot: no unread pipe can block this process
    auth = "token required" if token else "UNAUTHENTICATED (loopback only)"
    print(f"serving {args.checkpoint} ({meta.get('kind') or type(policy).__name__}: {server.obs_dim} states -> "
          f"{server.horizon} x {server.action_dim} actions) on {format_address(args.host, port)} ({auth}"
          f"{', TLS' if args.tls_cert else ''}, up to {args.max_clients} clients); Ctrl-C to stop", flush=True)
    start = time.monotonic()
    try:
        with sigterm_as_interrupt():
            while args.run_for <= 0 or time.monotonic() - start < args.run_for:
                wait = args.status_every if args.status_every > 0 else 1.0
                if args.run_for > 0:
                    wait = min(wait, max(0.05, args.run_for - (time.monotonic() - start)))
                time.sleep(wait)
                if args.status_every > 0:
                    c = server.counters
                    inf = np.asarray(c.inference_s[-1000:] or [np.nan]) * 1000
                    print(f"[status] clients {server.active} | streams {c.streams_started} started, {c.streams_ended} "
                          f"ended | chunks {c.chunks:,} | inference p50 {np.nanpercentile(inf, 50):.1f} ms p99 "
                          f"{np.nanpercentile(inf, 99):.1f} ms | refused: busy {c.refused_busy}, token "
                          f"{c.refused_token}, idle {c.idle_cancelled}, bad {c.bad_requests}", flush=True)
    except KeyboardInterrupt:
        pass
    finally:
        server.stop()
        print("policy server stopped", file=sys.stdout, flush=True)
    return 0


COMMAND = robot_command(
    "serve-policy", "serve a trained policy to robot clients (action chunks over gRPC)",
    "Serve a trained policy to robot-side clients over gRPC, apart from the robot's control loop: each client "
    "streams observations and gets action chunks back; its control loop never waits for them (deploy "
    "policy_server=HOST:PORT plays the chunk it has, blends the next one in, holds when none is left). Same "
    "token and TLS rules as serve-robot; several clients at once, a dead one never hangs the server.",
    lambda: ServePolicyArgs, serve_policy,
    [
        f"{TOKEN_ENV}=... robot-rl serve-policy checkpoint=runs/bc_push/policy port=50061",
        "robot-rl deploy robot=127.0.0.1:50051 policy_server=127.0.0.1:50061 episodes=10   # the robot side",
        "robot-rl serve-policy checkpoint=exported/flow host=0.0.0.0 tls_cert=cert.pem tls_key=key.pem device=cuda",
    ],
)
