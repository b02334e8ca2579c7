"""The console's web server: one page, one WebSocket per open page, on the ``websockets`` library (already installed
with MuJoCo), which parses HTTP and frames WebSocket messages; nothing here parses a request by hand.

Routes: ``GET /`` (the page), ``GET /console.js``, ``GET /video/<episode>/<camera>.mp4`` (a recorded episode's
camera), ``GET /ws`` (the live feed and the page's actions). Everything runs on one asyncio event loop in a daemon
thread; blocking bridge calls (``EStop``, ``ClearEStop``, ``GetStatus``) run on a small thread pool of their own,
so a slow status poll never delays an e-stop.

Messages (JSON). To the page: ``hello`` (robot, cameras, rate, whether actions need a token), ``tick`` (the newest
reply only: a slow page skips frames instead of queueing them), ``status`` (GetStatus, twice a second while a page
is open, plus the frame latency the pages measured), ``episodes``, and the answers ``estop_ack``, ``clear_ack``,
``label_ack``, ``error``. From the page: ``estop`` (no token: anyone at the page can stop the robot), ``clear_estop``
(token and ``confirm: true``), ``label`` (token, label, the episode it is for), ``ack`` (a tick's frames are on
screen: the frame latency).

Security, as the bridge's: loopback by default; off loopback only with TLS and a token (``check_bind``). The token
is the bridge's, compared in constant time; a wrong one costs its connection a quarter of a second. On loopback the
``Host`` header must name loopback (a DNS-rebinding page cannot reach the console), and a WebSocket whose
``Origin`` is not the console's own page is refused (another site open in the same browser can neither watch the
cameras nor act). The page forbids framing and foreign scripts (Content-Security-Policy).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import email.utils
import hmac
import io
import json
import ssl
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http import HTTPStatus
from pathlib import Path
from typing import Any

import numpy as np
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.datastructures import Headers
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from robot_rl.console.hub import Hub
from robot_rl.errors import UserError

STATIC = Path(__file__).parent  # index.html, console.js (package data)
_PAGES = {"/": ("index.html", "text/html; charset=utf-8"), "/console.js": ("console.js", "text/javascript")}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "media-src 'self'; connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'")
STATUS_EVERY_S = 0.5
WRONG_TOKEN_DELAY_S = 0.25


class ConsoleError(UserError, ValueError):
    """A console setting that cannot work or would not be safe: one line."""


def _is_loopback(host: str) -> bool:
    from robot_rl.real.guard import is_loopback

    return is_loopback(host)


def check_bind(host: str, token: str | None, tls_cert: str | None, tls_key: str | None) -> ssl.SSLContext | None:
    """The TLS context of the console's address (None: plain HTTP on loopback); ConsoleError for a setting the
    bridge would refuse too: off loopback without TLS or without a token, a certificate without its key."""
    if bool(tls_cert) != bool(tls_key):
        raise ConsoleError("console_tls_cert= and console_tls_key= go together (a PEM certificate and its key)")
    if not _is_loopback(host):
        if not tls_cert:
            raise ConsoleError(f"console_host={host}: off loopback the console needs TLS (console_tls_cert= and "
                               "console_tls_key=): the token and the camera frames would cross the network in clear")
        if not token:
            raise ConsoleError(f"console_host={host}: off loopback the console needs the robot's token (anyone who "
                               "reaches the page could label episodes and clear the e-stop)")
    if not tls_cert:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    try:
        context.load_cert_chain(tls_cert, tls_key)
    except (OSError, ssl.SSLError) as e:
        raise ConsoleError(f"console_tls_cert={tls_cert}, console_tls_key={tls_key}: cannot load them ({e})") from None
    return context


def _hostname(host_header: str) -> str:
    """The host of a ``Host`` header (``[::1]:8765`` -> ``::1``, ``localhost:8765`` -> ``localhost``)."""
    if host_header.startswith("["):
        return host_header[1:host_header.find("]")]
    return host_header.rsplit(":", 1)[0] if host_header.count(":") == 1 else host_header


def _jpeg(frame: np.ndarray) -> str:
    from PIL import Image

    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(frame)).save(buf, format="JPEG", quality=85)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _status_dict(s: Any) -> dict[str, Any]:
    return {
        "state": s.state, "health": s.health, "estop_reason": s.estop_reason, "hold_reason": s.hold_reason,
        "ticks": s.ticks, "overruns": s.overruns, "estops": s.estops, "watchdog_trips": s.watchdog_trips,
        "jitter_p50_ms": 1e3 * s.jitter_p50_s, "jitter_p99_ms": 1e3 * s.jitter_p99_s,
        "tick_work_p99_ms": 1e3 * s.tick_work_p99_s, "last_tick_age_ms": 1e3 * s.last_tick_age_s,
        "loop_priority": s.loop_priority, "estop_ack_ms": 1e3 * s.estop_ack_s, "episode": s.episode,
    }


@dataclass(eq=False)  # hashed by identity: kept in a set of open pages
class _Page:
    """One open page: its connection and the wake-up of its sender."""

    ws: ServerConnection
    wake: asyncio.Event
    sent_seq: int = 0
    sent_episodes: int = -1  # the hub's episodes_version last sent
    sent_status: int = -1


class ConsoleServer:
    """Serves the page of `hub` on `host:port` (port 0: any free port), acting on the robot through `client` (a
    ``RobotClient`` of its own: its own connection, so its e-stop never waits behind the session's calls).

    Raises ConsoleError (one line) for an address that cannot be bound or a setting ``check_bind`` refuses.
    """

    def __init__(self, hub: Hub, client: Any, *, host: str = "127.0.0.1", port: int = 8765,
                 token: str | None = None, tls_cert: str | None = None, tls_key: str | None = None) -> None:
        self.hub, self.client, self.host, self.token = hub, client, host, token
        self.ssl = check_bind(host, token, tls_cert, tls_key)
        self.scheme = "https" if self.ssl else "http"
        self.loopback = _is_loopback(host)
        self.port = port
        self.latencies: deque[float] = deque(maxlen=100_000)  # camera -> page, seconds (the pages' acks)
        self.estop_s: deque[float] = deque(maxlen=10_000)  # e-stop message -> EStop answered, seconds
        self._taken: dict[int, float] = {}  # recent tick seq -> Tick.taken_by
        self._pages: set[_Page] = set()
        self._status: dict[str, Any] | None = None
        self._status_version = 0
        self._encoded: tuple[int, str] | None = None
        self._pool = ThreadPoolExecutor(4, thread_name_prefix="console-rpc")  # e-stops, clears, status polls
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="console", daemon=True)
        self._server: Server | None = None
        self._poller: asyncio.Task | None = None

    # -- life cycle --------------------------------------------------------------------------------------------
    def start(self) -> int:
        """Listen; the port (useful with port 0)."""
        self._thread.start()
        try:
            self.port = asyncio.run_coroutine_threadsafe(self._start(), self._loop).result(timeout=10)
        except OSError as e:
            self.stop()
            raise ConsoleError(f"console cannot listen on {self.host}:{self.port}: {e.strerror or e}") from None
        self.hub.notify = self._notify
        return self.port

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}/"

    async def _start(self) -> int:
        self._server = await serve(
            self._handler, self.host, self.port, ssl=self.ssl, process_request=self._http, compression=None,
            max_size=64 * 1024, server_header=None, ping_interval=10, ping_timeout=10, close_timeout=1,
        )
        self._poller = asyncio.create_task(self._poll_status())
        return int(self._server.sockets[0].getsockname()[1])

    def stop(self) -> None:
        """Close every page and stop serving (the robot is not touched)."""
        if self._thread.is_alive():
            async def close() -> None:
                if self._server is not None:
                    self._server.close()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(self._server.wait_closed(), 3)
                # whatever is left (the poller, a handshake in progress) ends here, not in a closed loop
                rest = [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]
                for task in rest:
                    task.cancel()
                await asyncio.gather(*rest, return_exceptions=True)

            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=5)
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout=5)
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.hub.notify = lambda: None

    # -- HTTP --------------------------------------------------------------------------------------------------
    def _response(self, status: HTTPStatus, body: bytes, content_type: str, **extra: str) -> Response:
        headers = Headers([("Date", email.utils.formatdate(usegmt=True)), ("Content-Length", str(len(body))),
                           ("Content-Type", content_type), ("Cache-Control", "no-store"),
                           ("X-Content-Type-Options", "nosniff"), ("Referrer-Policy", "no-referrer"),
                           ("Content-Security-Policy", _CSP), *extra.items()])
        return Response(status.value, status.phrase, headers, body)

    def _refuse(self, status: HTTPStatus, text: str) -> Response:
        return self._response(status, text.encode(), "text/plain; charset=utf-8")

    def _http(self, connection: ServerConnection, request: Request) -> Response | None:
        host = request.headers.get("Host", "")
        if self.loopback and not _is_loopback(_hostname(host)):
            # a page on another site whose name was rebound to 127.0.0.1 sends its own name here
            return self._refuse(HTTPStatus.FORBIDDEN, f"host {host!r} is not this console's (use {self.url})")
        path = request.path.split("?", 1)[0]
        if path == "/ws":
            origin = request.headers.get("Origin")
            if origin is not None and origin != f"{self.scheme}://{host}":
                return self._refuse(HTTPStatus.FORBIDDEN, f"origin {origin!r} is not this console's page")
            return None  # the WebSocket handshake goes on
        if path in _PAGES:
            name, kind = _PAGES[path]
            return self._response(HTTPStatus.OK, (STATIC / name).read_bytes(), kind)
        video = self.hub.video_files.get(path)
        if video is not None and video.is_file():
            return self._response(HTTPStatus.OK, video.read_bytes(), "video/mp4")
        return self._refuse(HTTPStatus.NOT_FOUND, f"no such page: {path}")

    # -- the live feed -----------------------------------------------------------------------------------------
    def _notify(self) -> None:
        """From any thread: wake every page's sender."""
        with contextlib.suppress(RuntimeError):  # the loop is closing
            self._loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for page in self._pages:
            page.wake.set()

    def _tick_message(self) -> tuple[int, str] | None:
        """The newest tick as JSON, encoded once however many pages are open."""
        tick, _, _ = self.hub.snapshot()
        if tick is None:
            return None
        if self._encoded is None or self._encoded[0] != tick.seq:
            obs = tick.observation
            self._taken[tick.seq] = tick.taken_by
            for old in [s for s in self._taken if s < tick.seq - 200]:
                del self._taken[old]
            message = {
                "type": "tick", "seq": tick.seq, "episode": tick.episode, "step": tick.step, "driver": tick.driver,
                "state": [round(float(v), 4) for v in np.asarray(obs.state).reshape(-1)],
                "reward": float(obs.reward), "success": bool(obs.success), "applied": tick.applied,
                "frames": {name: _jpeg(frame) for name, frame in obs.images.items()},
                "prob": tick.prob, "threshold": self.hub.threshold,
            }
            self._encoded = (tick.seq, json.dumps(message))
        return self._encoded

    def _episodes_message(self) -> tuple[int, str]:
        version, rows, held = self.hub.episodes_snapshot()
        return version, json.dumps({"type": "episodes", "episodes": rows, "held": held})

    def _latency_summary(self) -> dict[str, float | int | None]:
        lat = np.asarray(self.latencies)
        if not len(lat):
            return {"frames_acked": 0, "latency_p50_ms": None, "latency_p95_ms": None}
        recent = lat[-400:]
        return {"frames_acked": len(lat), "latency_p50_ms": 1e3 * float(np.percentile(recent, 50)),
                "latency_p95_ms": 1e3 * float(np.percentile(recent, 95))}

    async def _poll_status(self) -> None:
        """GetStatus twice a second while a page is open (the robot's state, e-stop, loop health and timing), and
        the session's finished episodes."""
        while True:
            if self._pages:
                await self._refresh_status()
                await self._loop.run_in_executor(self._pool, self.hub.sync)  # an episode that ended the run
            await asyncio.sleep(STATUS_EVERY_S)

    async def _refresh_status(self) -> None:
        try:
            status = _status_dict(await self._loop.run_in_executor(self._pool, self.client.status))
        except Exception as e:  # the robot unreachable is something to show, not a crash
            status = {"state": "unreachable", "health": "unknown", "error": str(e).splitlines()[0][:300]}
        self._status = {**status, **self._latency_summary()}
        self._status_version += 1
        self._wake()

    async def _send_loop(self, page: _Page) -> None:
        while True:
            await page.wake.wait()
            page.wake.clear()
            tick = self._tick_message()
            if tick is not None and tick[0] != page.sent_seq:
                page.sent_seq = tick[0]
                await page.ws.send(tick[1])
            if self.hub.episodes_version != page.sent_episodes:
                page.sent_episodes, message = self._episodes_message()
                await page.ws.send(message)
            if self._status is not None and self._status_version != page.sent_status:
                page.sent_status = self._status_version
                _, _, drivers = self.hub.snapshot()  # the strip of who drove, twice a second
                await page.ws.send(json.dumps({"type": "status", **self._status, "drivers": drivers[-200:]}))

    async def _handler(self, ws: ServerConnection) -> None:
        page = _Page(ws, asyncio.Event())
        spec = self.hub.spec
        await ws.send(json.dumps({
            "type": "hello", "robot": spec.name, "control_hz": spec.control_hz,
            "cameras": [{"name": c.name, "height": c.height, "width": c.width} for c in spec.cameras],
            "token_required": bool(self.token), "threshold": self.hub.threshold, "state_dim": spec.state_dim,
        }))
        self._pages.add(page)
        page.wake.set()
        sender = asyncio.create_task(self._send_loop(page))
        try:
            async for raw in ws:
                await self._on_message(ws, raw)
        except ConnectionClosed:
            pass
        finally:
            self._pages.discard(page)
            sender.cancel()

    # -- the page's actions ------------------------------------------------------------------------------------
    async def _authorised(self, ws: ServerConnection, message: dict[str, Any]) -> bool:
        if not self.token:
            return True
        given = message.get("token")
        if isinstance(given, str) and hmac.compare_digest(given.encode(), self.token.encode()):
            return True
        await asyncio.sleep(WRONG_TOKEN_DELAY_S)  # guessing costs time
        await ws.send(json.dumps({"type": "error", "for": message.get("type"), "id": message.get("id"),
                                  "message": "wrong or missing token: enter the robot's token (ROBOT_RL_TOKEN)"}))
        return False

    async def _on_message(self, ws: ServerConnection, raw: str | bytes) -> None:
        try:
            message = json.loads(raw)
            kind = message["type"]
        except (ValueError, KeyError, TypeError):
            await ws.send(json.dumps({"type": "error", "message": "not a console message (JSON with a type)"}))
            return
        if kind == "estop":
            await self._estop(ws, message)
        elif kind == "ack":
            taken = self._taken.get(message.get("seq"))  # type: ignore[arg-type]
            if taken is not None:
                self.latencies.append(time.monotonic() - taken)
        elif kind == "clear_estop":
            if not message.get("confirm"):
                await ws.send(json.dumps({"type": "error", "for": kind, "message": "clearing the e-stop needs "
                                          "confirm: true (the page asks first)"}))
            elif await self._authorised(ws, message):
                await self._clear(ws)
        elif kind == "label":
            if await self._authorised(ws, message):
                episode = message.get("episode")
                refused = self.hub.add_label(str(message.get("label")), episode if isinstance(episode, int) else -2)
                await ws.send(json.dumps({"type": "label_ack" if refused is None else "error", "for": kind,
                                          "label": message.get("label"), "episode": episode,
                                          "message": refused or "taken"}))
        else:
            await ws.send(json.dumps({"type": "error", "message": f"unknown message type {kind!r}"}))

    async def _estop(self, ws: ServerConnection, message: dict[str, Any]) -> None:
        """The bridge's EStop RPC, the one e-stop path (the server latches at its headers)."""
        t0 = time.monotonic()
        try:
            await self._loop.run_in_executor(self._pool, self.client.estop, "console e-stop")
            answer: dict[str, Any] = {"ok": True}
        except Exception as e:  # latched or not, the page must say what the robot answered
            answer = {"ok": False, "message": str(e).splitlines()[0][:300]}
        self.estop_s.append(time.monotonic() - t0)
        with contextlib.suppress(ConnectionClosed):
            await ws.send(json.dumps({"type": "estop_ack", "id": message.get("id"), **answer}))
        await self._refresh_status()

    async def _clear(self, ws: ServerConnection) -> None:
        try:
            await self._loop.run_in_executor(self._pool, self.client.clear_estop)
            answer: dict[str, Any] = {"ok": True}
        except Exception as e:
            answer = {"ok": False, "message": str(e).splitlines()[0][:300]}
        await ws.send(json.dumps({"type": "clear_ack", **answer}))
        await self._refresh_status()
