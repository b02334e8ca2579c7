"""The robot server's front door: who may call, how many calls at once, and how long anyone may stall one.

Why a module of its own: gRPC Python's own limits are global and wait without bound. One worker pool and one
``maximum_concurrent_rpcs`` serve every method, so a flood or a few stalled calls refuse the e-stop too; and a
unary handler's worker waits for the request body for as long as the client keeps the stream open, so a client
that sends headers and never a body holds a worker (with no deadline, forever). ``Gate`` replaces both:

* it runs as a server interceptor, on gRPC's polling thread, **before any worker is involved**: the token is
  checked on the call's metadata alone, and a refused call is answered by a handler that never reads the body;
* every call is admitted into a **class** with its own limit and **its own worker pool** (gRPC's per-behaviour
  ``experimental_thread_pool``): ``EStop`` has reserved slots and workers that no other method can use, so has
  ``ClearEStop`` (an operator can always recover), everything else shares ``bulk`` slots; a refused call is
  answered with its real status (``UNAUTHENTICATED``, ``RESOURCE_EXHAUSTED``) by the refusal pool, whose backlog
  is bounded (``refusal_backlog``; beyond it gRPC answers ``UNIMPLEMENTED`` without a worker). No class's work
  can queue behind another's;
* an authenticated ``EStop`` latches the robot's e-stop **when its headers arrive** (``on_estop``), before its body
  is read and whether or not a slot is free; one that finds every EStop slot taken (a token holder's stalled
  EStops) is still answered once the driver acknowledged the stop (``estop_overflow``), without its body; a ``ClearEStop`` notes, when its headers arrive, the e-stop generation
  it may clear (``on_clear``), so a clear that is delayed can never undo a later e-stop. The value either hook
  returns reaches the call's handler as ``ADMISSION``;
* admitted calls read their one request message with a deadline (``body_timeout_s``): a ``Reaper`` thread cancels
  a call whose body has not arrived in time, which frees its worker and its slot. The body is parsed here: a
  malformed one is ``INVALID_ARGUMENT`` (counted ``bad_body``), without a traceback in the log;
* every refusal is counted by reason (``Refusals``), and ``GetStatus`` reports them.

Also here: the token's sources (``load_token``), reason strings made safe for logs (``safe_text``), and address
helpers (IPv6 literals bracketed, loopback detection, a clean bind pre-check).
"""

from __future__ import annotations

import contextvars
import errno
import heapq
import hmac
import ipaddress
import itertools
import os
import socket
import stat
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from concurrent import futures
from dataclasses import dataclass
from typing import Any

import grpc

TOKEN_ENV = "ROBOT_RL_TOKEN"
SERVICE = "/robot_rl.bridge.v1.RobotBridge/"
ESTOP_METHOD = SERVICE + "EStop"
CLEAR_METHOD = SERVICE + "ClearEStop"
METHODS = frozenset(SERVICE + m for m in ("GetSpec", "Reset", "Step", "Heartbeat", "EStop", "ClearEStop", "GetStatus"))

# The admitted call's id, visible to the servicer method that handles it (EStop uses it to name its latch).
CALL_ID: contextvars.ContextVar[int | None] = contextvars.ContextVar("robot_rl_call_id", default=None)
# What the call's header hook returned (EStop: its stop request's number; ClearEStop: the generation it may clear).
ADMISSION: contextvars.ContextVar[Any] = contextvars.ContextVar("robot_rl_admission", default=None)
MIN_REMOTE_TOKEN_CHARS = 16  # off loopback a shorter token is refused (guessable; it allows ClearEStop)


@dataclass(frozen=True)
class GateLimits:
    """How many calls of each class may be in flight, and how long a request body may take to arrive."""

    bulk_calls: int = 8  # every method but EStop and ClearEStop
    estop_calls: int = 4  # EStop only: reserved, never used by other traffic
    clear_calls: int = 2  # ClearEStop only: an operator can always recover, whatever the other traffic
    refusal_calls: int = 4  # workers answering refused calls (each needs one for a moment to send its status)
    refusal_backlog: int = 256  # refused calls waiting for those workers; beyond: UNIMPLEMENTED without a worker
    body_timeout_s: float = 1.0

    def validate(self) -> None:
        for name in ("bulk_calls", "estop_calls", "clear_calls", "refusal_calls", "refusal_backlog"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        if not self.body_timeout_s > 0:
            raise ValueError(f"body_timeout_s must be > 0, got {self.body_timeout_s}")

    def workers(self, cls: str) -> int:
        """Worker threads of a class's pool: one per slot (plus one: a thread finishing its last call)."""
        return {"bulk": self.bulk_calls, "estop": self.estop_calls, "clear": self.clear_calls,
                "refusal": self.refusal_calls}[cls] + 1


class Refusals:
    """A thread-safe counter of refused calls by reason (gRPC workers, the polling thread and the loop all count)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._counts: Counter[str] = Counter()

    def add(self, reason: str, n: int = 1) -> None:
        with self._lock:
            self._counts[reason] += n

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self._counts)

    def __getitem__(self, reason: str) -> int:
        with self._lock:
            return self._counts[reason]


class _Timer:
    __slots__ = ("when", "fn", "cancelled", "fired")

    def __init__(self, when: float, fn: Callable[[], None]) -> None:
        self.when, self.cancelled, self.fired = when, False, False
        self.fn: Callable[[], None] | None = fn


class Reaper:
    """One thread that runs callbacks at deadlines (cancelling stalled calls) instead of a timer thread per call."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._heap: list[tuple[float, int, _Timer]] = []
        self._seq = itertools.count()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="bridge-reaper", daemon=True)
        self._thread.start()

    def schedule(self, delay_s: float, fn: Callable[[], None]) -> _Timer:
        timer = _Timer(time.monotonic() + delay_s, fn)
        with self._cv:
            heapq.heappush(self._heap, (timer.when, next(self._seq), timer))
            if self._heap[0][2] is timer:
                self._cv.notify()
        return timer

    @staticmethod
    def cancel(timer: _Timer) -> None:
        # Lazily dropped from the heap when its time comes. Drop the callback now: it holds the call, and gRPC
        # releases a call's HTTP/2 stream (counted against the per-connection limit) only when nothing does.
        timer.cancelled, timer.fn = True, None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify()
        self._thread.join(timeout=2.0)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closed and (not self._heap or self._heap[0][0] > time.monotonic()):
                    self._cv.wait(None if not self._heap else max(0.0, self._heap[0][0] - time.monotonic()))
                if self._closed:
                    return
                _, _, timer = heapq.heappop(self._heap)
            fn = timer.fn
            if not timer.cancelled and fn is not None:
                timer.fired = True
                try:
                    fn()
                except Exception:  # a call that is already gone cannot be cancelled; nothing to do
                    pass


class Gate(grpc.ServerInterceptor):
    """Token check, admission by class into per-class worker pools, latch-on-headers for EStop, bounded body reads
    (module docstring).

    Args:
        token: the shared token, or None to admit every caller (loopback only; checked by the server's config).
        limits: the per-class limits and the body deadline.
        on_estop: called on the polling thread with the call id when an authenticated EStop's headers arrive;
            must not block. Its return value is the call's ``ADMISSION``.
        refusals: where refusals are counted.
        on_clear: called on the polling thread when an authenticated ClearEStop's headers arrive; must not block.
            Its return value is the call's ``ADMISSION``.
        estop_overflow: answers an EStop that found every EStop slot taken (e.g. by a token holder's stalled
            EStops), given its ``ADMISSION``: it waits for the driver's acknowledgement and returns the reply,
            without reading the body, on the refusal pool. None: such an EStop is answered ``RESOURCE_EXHAUSTED``
            (latched nonetheless).
    """

    def __init__(self, token: str | None, limits: GateLimits, on_estop: Callable[[int], Any],
                 refusals: Refusals, on_clear: Callable[[], Any] | None = None,
                 estop_overflow: Callable[[Any, grpc.ServicerContext], Any] | None = None) -> None:
        limits.validate()
        self._expected = f"Bearer {token}".encode() if token else None
        self.limits = limits
        self._on_estop = on_estop
        self._on_clear = on_clear or (lambda: None)
        self._estop_overflow = estop_overflow
        self.refusals = refusals
        self._lock = threading.Lock()
        self._capacity = {"bulk": limits.bulk_calls, "estop": limits.estop_calls, "clear": limits.clear_calls,
                          "refusal": limits.refusal_backlog}
        self._in_flight = dict.fromkeys(self._capacity, 0)
        self._ids = itertools.count(1)
        self.pools = {cls: futures.ThreadPoolExecutor(limits.workers(cls), thread_name_prefix=f"bridge-{cls}")
                      for cls in self._capacity}
        self.reaper = Reaper()

    def in_flight(self) -> dict[str, int]:
        with self._lock:
            return dict(self._in_flight)

    def close(self) -> None:
        self.reaper.close()
        for pool in self.pools.values():
            pool.shutdown(wait=False, cancel_futures=True)

    # -- on gRPC's polling thread: no blocking, no body --------------------------------------------------------
    def intercept_service(self, continuation: Any, handler_call_details: grpc.HandlerCallDetails) -> Any:
        method = handler_call_details.method
        if self._expected is not None:
            supplied = _metadata(handler_call_details.invocation_metadata, "authorization")
            if not hmac.compare_digest(supplied, self._expected):
                return self._refuse("unauthenticated", grpc.StatusCode.UNAUTHENTICATED, "missing or wrong token")
        if method not in METHODS:
            self.refusals.add("unknown_method")
            return None  # gRPC answers UNIMPLEMENTED itself, without a worker
        handler = continuation(handler_call_details)
        if handler is None or handler.unary_unary is None:
            self.refusals.add("unknown_method")
            return None
        call_id = next(self._ids)
        cls, admission = "bulk", None
        if method == ESTOP_METHOD:
            cls = "estop"
            admission = self._on_estop(call_id)  # latched now, whatever happens to the rest of the call
        elif method == CLEAR_METHOD:
            cls = "clear"
            admission = self._on_clear()  # what it may clear: nothing requested after this moment
        if not self._acquire(cls):
            if cls == "estop" and self._estop_overflow is not None:
                return self._overflow(handler, admission)
            return self._refuse(f"overload_{cls}", grpc.StatusCode.RESOURCE_EXHAUSTED,
                                f"too many {cls} calls in flight ({self._capacity[cls]}); retry"
                                + ("; the e-stop was latched nonetheless" if cls == "estop" else ""))
        return self._admitted(handler, cls, call_id, admission)

    def _acquire(self, cls: str) -> bool:
        with self._lock:
            if self._in_flight[cls] >= self._capacity[cls]:
                return False
            self._in_flight[cls] += 1
            return True

    def _release(self, cls: str) -> None:
        with self._lock:
            self._in_flight[cls] -= 1

    def _refuse(self, reason: str, code: grpc.StatusCode, details: str) -> Any:
        self.refusals.add(reason)
        if not self._acquire("refusal"):
            self.refusals.add("unanswered")  # a flood beyond the refusal backlog: UNIMPLEMENTED with no worker
            return None

        def refuse(request_iterator: Iterable[bytes], context: grpc.ServicerContext) -> Any:
            try:
                context.abort(code, details)  # without reading the body: a stalled body costs nothing here
            finally:
                self._release("refusal")

        refuse.experimental_thread_pool = self.pools["refusal"]  # type: ignore[attr-defined]
        return grpc.stream_unary_rpc_method_handler(refuse)

    def _overflow(self, handler: grpc.RpcMethodHandler, admission: Any) -> Any:
        """An EStop beyond its slots: latched already; answered once the driver acknowledged, body unread."""
        self.refusals.add("estop_overflow")
        if not self._acquire("refusal"):
            self.refusals.add("unanswered")
            return None
        overflow = self._estop_overflow
        assert overflow is not None

        def answer(request_iterator: Iterable[bytes], context: grpc.ServicerContext) -> Any:
            try:
                return overflow(admission, context)
            finally:
                self._release("refusal")

        answer.experimental_thread_pool = self.pools["refusal"]  # type: ignore[attr-defined]
        return grpc.stream_unary_rpc_method_handler(answer, response_serializer=handler.response_serializer)

    def _admitted(self, handler: grpc.RpcMethodHandler, cls: str, call_id: int, admission: Any) -> Any:
        inner = handler.unary_unary
        parse = handler.request_deserializer

        def behavior(request_iterator: Any, context: grpc.ServicerContext) -> Any:
            try:
                request = self._read_body(request_iterator, context, parse)
                tokens = CALL_ID.set(call_id), ADMISSION.set(admission)
                try:
                    return inner(request, context)
                finally:
                    ADMISSION.reset(tokens[1])
                    CALL_ID.reset(tokens[0])
            finally:
                self._release(cls)

        behavior.experimental_thread_pool = self.pools[cls]  # type: ignore[attr-defined]
        # Served as a client-streaming method so that the body is read here, with a deadline, and not by gRPC
        # before the handler runs (which would wait without one); read as bytes and parsed here, so a malformed
        # body is INVALID_ARGUMENT rather than gRPC's INTERNAL and logged traceback. On the wire a unary call is
        # the same.
        return grpc.stream_unary_rpc_method_handler(
            behavior, request_deserializer=None, response_serializer=handler.response_serializer,
        )

    def _read_body(self, request_iterator: Any, context: grpc.ServicerContext, parse: Any) -> Any:
        timer = self.reaper.schedule(self.limits.body_timeout_s, context.cancel)
        try:
            raw = next(request_iterator)
        except StopIteration:  # the stream ended without a message: cut off by us, or a missing body
            self.refusals.add("stalled_body" if timer.fired else "bad_body")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "no valid request message (malformed or missing body)")
        except grpc.RpcError:
            self.refusals.add("stalled_body" if timer.fired else "client_cancelled")
            raise  # gRPC knows this error (the call is gone): it sends nothing and logs nothing
        finally:
            Reaper.cancel(timer)
        if parse is None:
            return raw
        try:
            return parse(raw)
        except Exception as e:  # protobuf's DecodeError and friends: the client's fault, not ours
            self.refusals.add("bad_body")
            context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                          f"malformed request body ({len(raw)} bytes): {safe_text(str(e), 120)}")


def _metadata(metadata: Any, key: str) -> bytes:
    for k, v in metadata or ():
        if k == key:
            return v.encode() if isinstance(v, str) else bytes(v)
    return b""


# -- tokens ------------------------------------------------------------------------------------------------------
def load_token(token: str | None = None, token_file: str | None = None,
               env: dict[str, str] | None = None) -> tuple[str | None, list[str]]:
    """The shared token and warnings about how it was given.

    Sources, first found wins: ``token_file`` (its first line), ``token`` (a command-line flag: visible to every
    local user in the process list, hence a warning), the ``ROBOT_RL_TOKEN`` environment variable. Raises
    ``ValueError`` with a one-line message for an unreadable or empty file, or both file and flag.
    """
    env = os.environ if env is None else env
    warnings: list[str] = []
    if token_file and token:
        raise ValueError("give the token once: token_file= or token=, not both")
    if token_file:
        try:
            with open(token_file, encoding="utf-8") as f:
                value = f.readline().strip()
            mode = os.stat(token_file).st_mode
        except OSError as e:
            raise ValueError(f"cannot read the token file {token_file}: {e.strerror or e}") from None
        if not value:
            raise ValueError(f"the token file {token_file} is empty")
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            warnings.append(f"the token file {token_file} is readable by other users; chmod 600 it")
        folder = os.path.dirname(os.path.abspath(token_file))
        try:
            folder_mode = os.stat(folder).st_mode
        except OSError:
            folder_mode = 0
        if folder_mode & stat.S_IWOTH:
            sticky = " (sticky: others cannot replace it, but can see and race its name)" if folder_mode & \
                stat.S_ISVTX else ": another user can replace it with a token of their own"
            warnings.append(f"the token file {token_file} is in {folder}, a folder every user can write{sticky}; keep "
                            "it in a folder only you can write (e.g. ~/.config)")
        return value, warnings
    if token:
        warnings.append(f"token= is visible to every local user in the process list; prefer {TOKEN_ENV} or "
                        "token_file=")
        return token, warnings
    return env.get(TOKEN_ENV) or None, warnings


def check_token(token: str | None, host: str) -> None:
    """Raise ``ValueError`` (one line) for a token that cannot protect the robot: empty or whitespace, not
    printable ASCII (gRPC metadata cannot carry it), or off loopback shorter than ``MIN_REMOTE_TOKEN_CHARS``."""
    if token is None:
        return
    if not token.strip():
        raise ValueError("the token is empty or whitespace; use a long random one (python -c 'import secrets; "
                         "print(secrets.token_urlsafe(24))')")
    if token != token.strip() or not all(33 <= ord(c) < 127 or c == " " for c in token):
        raise ValueError("the token must be printable ASCII without leading or trailing spaces or control characters")
    if not is_loopback(host) and len(token) < MIN_REMOTE_TOKEN_CHARS:
        raise ValueError(f"the token has {len(token)} characters; off loopback ({host}) it must have at least "
                         f"{MIN_REMOTE_TOKEN_CHARS} (python -c 'import secrets; print(secrets.token_urlsafe(24))')")


# -- reasons and addresses ---------------------------------------------------------------------------------------
def safe_text(text: str, max_chars: int) -> str:
    """``text`` cut to ``max_chars`` and escaped so that it is one printable line (no forged log lines)."""
    cut = text[:max_chars]
    escaped = cut.encode("unicode_escape").decode("ascii")
    escaped = "".join(ch if 32 <= ord(ch) < 127 else f"\\x{ord(ch):02x}" for ch in escaped)
    return escaped + (f"... [{len(text) - max_chars} more characters]" if len(text) > max_chars else "")


def _literal(host: str) -> str:
    return host[1:-1] if host.startswith("[") and host.endswith("]") else host


def is_loopback(host: str) -> bool:
    """True for ``localhost`` and loopback IP literals (``127.0.0.0/8``, ``::1``, bracketed or not)."""
    h = _literal(host)
    if h == "localhost":
        return True
    try:
        return ipaddress.ip_address(h).is_loopback
    except ValueError:
        return False


def format_address(host: str, port: int) -> str:
    """``host:port`` with an IPv6 literal bracketed (``[::1]:50051``), as gRPC expects."""
    h = _literal(host)
    return f"[{h}]:{port}" if ":" in h else f"{h}:{port}"


def check_bindable(host: str, port: int) -> None:
    """Raise ``OSError`` with a one-line reason if ``host:port`` cannot be bound (in use, not a local address).

    Done with a plain socket before gRPC binds, because gRPC reports a failed bind only as a generic error plus
    a log line of its own. ``SO_REUSEADDR`` as servers use it: a port left in TIME_WAIT by a previous run is free.
    Port 0 (any free port) is not checked.
    """
    if port == 0:
        return
    h = _literal(host)
    try:
        infos = socket.getaddrinfo(h, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        raise OSError(f"cannot listen on {format_address(host, port)}: unknown host ({e.strerror})") from None
    for family, kind, proto, _, sockaddr in infos:
        with socket.socket(family, kind, proto) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                s.bind(sockaddr)
            except OSError as e:
                why = {errno.EADDRINUSE: "the port is in use (another serve-robot?)",
                       errno.EADDRNOTAVAIL: "not an address of this machine",
                       errno.EACCES: "permission denied (ports below 1024 need privileges)"}.get(
                    e.errno or 0, e.strerror or str(e))
                raise OSError(f"cannot listen on {format_address(host, port)}: {why}") from None
