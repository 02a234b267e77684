"""hero_executor — an RRQ executor runtime (protocol v1) in one stdlib-only module.

Python >= 3.9. Register handlers, then serve::

    import hero_executor as hx

    @hx.register("echo")
    def echo(req):
        return {"args": req.args, "kwargs": req.kwargs}

    @hx.register("wait")
    async def wait(req):                 # async handlers are cancelled on a cancel frame
        await asyncio.sleep(req.kwargs["seconds"])

    if __name__ == "__main__":
        hx.serve()

``serve()`` listens where the orchestrator says: ``RRQ_EXECUTOR_SOCKET`` (a Unix
socket path) or ``RRQ_EXECUTOR_TCP_SOCKET`` (a localhost-only ``host:port``). Each
connection gets a thread that reads frames and a worker thread that runs its requests
one after the other, answering in order; cancel frames act at once, on any connection.

A handler takes one ``Request`` and returns a JSON-serialisable result (status
``success``). It may raise ``Retry(after_seconds)`` (status ``retry``), ``Timeout()``
(status ``timeout``), ``HandlerError(message, type=..., code=..., details=...)`` or any
other exception (status ``error``, type = the exception's class name). A cancel frame
sets ``req.cancelled``; sync handlers poll it (``req.check_cancelled()``, or sleep with
``req.sleep(seconds)``, which raises ``Cancelled``), async handlers get their task
cancelled. A handler that ends with an exception after a cancel gives status ``error``
with type ``cancelled``. Unknown function names give type ``handler_not_found``.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import ipaddress
import json
import logging
import os
import queue
import signal
import socket
import stat
import struct
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Tuple

__all__ = [
    "PROTOCOL_VERSION",
    "MAX_FRAME_SIZE",
    "Request",
    "Retry",
    "Timeout",
    "HandlerError",
    "Cancelled",
    "ProtocolError",
    "Executor",
    "register",
    "serve",
    "read_frame",
    "write_frame",
]

PROTOCOL_VERSION = "1"
MAX_FRAME_SIZE = 16 * 1024 * 1024
ENV_SOCKET = "RRQ_EXECUTOR_SOCKET"
ENV_TCP_SOCKET = "RRQ_EXECUTOR_TCP_SOCKET"
MESSAGE_TYPES = ("request", "response", "cancel")

log = logging.getLogger("hero_executor")


# --------------------------------------------------------------------------- errors


class Retry(Exception):
    """Raise to ask the orchestrator for a retry (status ``retry``)."""

    def __init__(self, after_seconds: Optional[float] = None, message: str = "") -> None:
        super().__init__(message or "retry requested")
        self.after_seconds = after_seconds
        self.message = message


class Timeout(Exception):
    """Raise when the handler timed itself out (status ``timeout``)."""


class HandlerError(Exception):
    """Raise for status ``error`` with an explicit type, code and JSON details."""

    def __init__(self, message: str, type: Optional[str] = None, code: Optional[str] = None,
                 details: Any = None) -> None:
        super().__init__(message)
        self.message = message
        self.type = type
        self.code = code
        self.details = details


class Cancelled(Exception):
    """Raised by ``Request.check_cancelled`` and ``Request.sleep`` after a cancel frame."""


class ProtocolError(Exception):
    """The peer sent bytes that are not a valid frame."""


# --------------------------------------------------------------------------- framing


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    chunks = []
    got = 0
    while got < n:
        chunk = sock.recv(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(sock: socket.socket, max_size: int = MAX_FRAME_SIZE) -> Optional[Tuple[str, dict]]:
    """Read one frame; return (type, payload), or None on a clean end of stream.

    Raises ProtocolError for a zero-length or oversized frame, a frame cut short by the
    peer closing, invalid UTF-8, invalid JSON, or an invalid envelope."""
    header = _recv_exact(sock, 4)
    if not header:
        return None
    if len(header) < 4:
        raise ProtocolError("connection closed mid-frame (%d of 4 header bytes)" % len(header))
    (size,) = struct.unpack(">I", header)
    if size == 0:
        raise ProtocolError("zero-length frame")
    if size > max_size:
        raise ProtocolError("frame of %d bytes exceeds the limit of %d" % (size, max_size))
    body = _recv_exact(sock, size)
    if len(body) < size:
        raise ProtocolError("connection closed mid-frame (%d of %d payload bytes)" % (len(body), size))
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ProtocolError("frame payload is not valid UTF-8: %s" % e) from None
    try:
        env = json.loads(text)
    except ValueError as e:
        raise ProtocolError("frame payload is not valid JSON: %s" % e) from None
    if not isinstance(env, dict):
        raise ProtocolError("frame is not a JSON object")
    mtype = env.get("type")
    if mtype not in MESSAGE_TYPES:
        raise ProtocolError("unknown envelope type %r" % (mtype,))
    payload = env.get("payload")
    if not isinstance(payload, dict):
        raise ProtocolError("payload of a %s frame is not an object" % mtype)
    return mtype, payload


def encode_frame(mtype: str, payload: dict) -> bytes:
    """Encode an envelope as one frame (raises ValueError/TypeError if not JSON-able)."""
    body = json.dumps({"type": mtype, "payload": payload}, ensure_ascii=False,
                      allow_nan=False, separators=(",", ":")).encode("utf-8")
    if len(body) > 0xFFFFFFFF:
        raise ValueError("frame too large")
    return struct.pack(">I", len(body)) + body


def write_frame(sock: socket.socket, mtype: str, payload: dict) -> None:
    sock.sendall(encode_frame(mtype, payload))


# --------------------------------------------------------------------------- request


class Request:
    """What a handler receives: the request's fields plus cancellation helpers."""

    def __init__(self, payload: dict) -> None:
        ctx = payload.get("context")
        if not isinstance(ctx, dict):
            ctx = {}
        args, kwargs = payload.get("args"), payload.get("kwargs")
        self.raw: dict = payload
        self.protocol_version: str = payload.get("protocol_version", "")
        self.request_id: str = payload.get("request_id", "")
        self.job_id: str = payload.get("job_id", "")
        self.function_name: str = payload.get("function_name", "")
        self.args: list = args if isinstance(args, list) else []
        self.kwargs: dict = kwargs if isinstance(kwargs, dict) else {}
        self.context: dict = ctx
        self.attempt: int = ctx.get("attempt", 1)
        self.enqueue_time: Optional[str] = ctx.get("enqueue_time")
        self.queue_name: Optional[str] = ctx.get("queue_name")
        self.deadline: Optional[str] = ctx.get("deadline")
        self.trace_context: Optional[dict] = ctx.get("trace_context")
        self.worker_id: Optional[str] = ctx.get("worker_id")
        self._cancel = threading.Event()
        self._cancel_reason = ""
        self._future: Optional[concurrent.futures.Future] = None
        self._lock = threading.Lock()
        self._invalid: Optional[str] = None  # why the request cannot run, if it cannot
        self._done = False

    @property
    def cancelled(self) -> bool:
        """True once a cancel frame (or shutdown) has cancelled this request."""
        return self._cancel.is_set()

    def check_cancelled(self) -> None:
        """Raise Cancelled if the request was cancelled."""
        if self._cancel.is_set():
            raise Cancelled(self._cancel_reason or "cancelled")

    def wait_cancelled(self, timeout: Optional[float] = None) -> bool:
        """Block until cancelled or timeout; return whether it was cancelled."""
        return self._cancel.wait(timeout)

    def sleep(self, seconds: float) -> None:
        """Sleep, but raise Cancelled as soon as the request is cancelled."""
        if self._cancel.wait(max(0.0, float(seconds))):
            raise Cancelled(self._cancel_reason or "cancelled")

    def _do_cancel(self, reason: str) -> bool:
        with self._lock:
            if self._cancel.is_set():
                return False
            self._cancel_reason = reason
            self._cancel.set()
            fut = self._future
        if fut is not None:
            fut.cancel()
        return True


# --------------------------------------------------------------------------- executor


def _outcome(req: Request, status: str, result: Any = None, error: Optional[dict] = None,
             retry_after: Optional[float] = None) -> dict:
    return {
        "job_id": req.job_id,
        "request_id": req.request_id,
        "status": status,
        "result": result,
        "error": error,
        "retry_after_seconds": retry_after,
    }


def _error(message: str, type_: str, code: Optional[str] = None, details: Any = None) -> dict:
    e: Dict[str, Any] = {"message": message, "type": type_}
    if code is not None:
        e["code"] = code
    if details is not None:
        e["details"] = details
    return e


class _Shutdown(Exception):
    pass


class Executor:
    """A registry of handlers and the server that runs them."""

    def __init__(self, max_frame_size: int = MAX_FRAME_SIZE) -> None:
        self.max_frame_size = max_frame_size
        self._handlers: Dict[str, Callable[[Request], Any]] = {}
        self._lock = threading.Lock()
        self._conns_changed = threading.Condition(self._lock)
        self._running: List[Request] = []
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._closing = threading.Event()
        self._conns: List[socket.socket] = []

    # -- handlers

    def register(self, name: Any = None) -> Callable:
        """Decorator: ``@register("name")``, or ``@register`` to use the function's name."""
        if callable(name):
            fn = name
            self._add(fn.__name__, fn)
            return fn

        def deco(fn: Callable) -> Callable:
            self._add(name or fn.__name__, fn)
            return fn
        return deco

    def _add(self, name: str, fn: Callable) -> None:
        with self._lock:
            if name in self._handlers:
                raise ValueError("handler %r registered twice" % name)
            self._handlers[name] = fn

    # -- cancellation

    def cancel(self, job_id: str, request_id: Optional[str] = None, reason: str = "cancelled by the orchestrator") -> int:
        """Cancel the job's request (or all its requests if request_id is None)."""
        with self._lock:
            targets = [r for r in self._running
                       if r.job_id == job_id and (not request_id or r.request_id == request_id)]
        return sum(1 for r in targets if r._do_cancel(reason))

    # -- running one request

    def _async_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None:
                loop = asyncio.new_event_loop()
                t = threading.Thread(target=loop.run_forever, name="hero-executor-asyncio", daemon=True)
                t.start()
                self._loop = loop
            return self._loop

    def execute(self, req: Request) -> dict:
        """Run the handler for req and return the outcome payload."""
        with self._lock:
            fn = self._handlers.get(req.function_name)
        if fn is None:
            return _outcome(req, "error", error=_error(
                "no handler registered for %r" % req.function_name, "handler_not_found"))
        if req.cancelled:
            return self._cancelled(req)
        try:
            result = fn(req)
            if inspect.isawaitable(result):
                result = self._await(req, result)
        except BaseException as e:  # noqa: BLE001 - every failure (even sys.exit) becomes an outcome
            return self._failure(req, e)
        try:
            json.dumps(result, allow_nan=False)
        except (TypeError, ValueError) as e:
            return _outcome(req, "error", error=_error(
                "result is not JSON-serialisable: %s" % e, "result_not_serializable"))
        return _outcome(req, "success", result=result)

    def _await(self, req: Request, awaitable: Any) -> Any:
        async def run() -> Any:
            return await awaitable
        fut = asyncio.run_coroutine_threadsafe(run(), self._async_loop())
        with req._lock:
            req._future = fut
            cancel_now = req._cancel.is_set()
        if cancel_now:
            fut.cancel()
        try:
            return fut.result()
        finally:
            with req._lock:
                req._future = None

    def _cancelled(self, req: Request) -> dict:
        return _outcome(req, "error", error=_error(req._cancel_reason or "cancelled", "cancelled"))

    def _failure(self, req: Request, e: BaseException) -> dict:
        if req.cancelled:
            return self._cancelled(req)
        if isinstance(e, Retry):
            err = _error(e.message, "Retry") if e.message else None
            after = float(e.after_seconds) if e.after_seconds is not None else None
            return _outcome(req, "retry", error=err, retry_after=after)
        if isinstance(e, Timeout):
            return _outcome(req, "timeout", error=_error(str(e) or "timeout", "Timeout"))
        if isinstance(e, HandlerError):
            details = e.details
            try:
                json.dumps(details, allow_nan=False)
            except (TypeError, ValueError):
                details = repr(details)
            return _outcome(req, "error", error=_error(e.message, e.type or type(e).__name__, e.code, details))
        if isinstance(e, (asyncio.CancelledError, concurrent.futures.CancelledError)):
            return _outcome(req, "error", error=_error(str(e) or "task cancelled", "cancelled"))
        log.warning("handler %s (request %s) raised %s: %s", req.function_name, req.request_id,
                    type(e).__name__, e, exc_info=(type(e), e, e.__traceback__))
        return _outcome(req, "error", error=_error(str(e) or type(e).__name__, type(e).__name__))

    # -- serving

    def serve(self, address: Optional[str] = None) -> None:
        """Listen (from the environment unless ``address`` is given: a socket path, or
        ``tcp://host:port``) and serve until SIGTERM/SIGINT."""
        if not logging.getLogger().handlers:
            logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                                format="%(asctime)s %(levelname)s %(name)s: %(message)s")
        listener, cleanup = _listen(address)
        in_main = threading.current_thread() is threading.main_thread()
        old = {}
        if in_main:
            def on_signal(signum: int, frame: Any) -> None:
                raise _Shutdown()
            for sig in (signal.SIGTERM, signal.SIGINT):
                old[sig] = signal.signal(sig, on_signal)
        try:
            self.serve_listener(listener)
        except _Shutdown:
            log.info("shutting down")
        finally:
            for sig, h in old.items():  # a second signal now acts as usual
                signal.signal(sig, h)
            try:
                listener.close()
            except OSError:
                pass
            self.shutdown()
            cleanup()

    def serve_listener(self, listener: socket.socket) -> None:
        """Accept connections on listener until it is closed or shutdown() is called."""
        while not self._closing.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                if self._closing.is_set():
                    return
                raise
            threading.Thread(target=self._serve_conn, args=(conn,), name="hero-executor-conn",
                             daemon=True).start()

    def shutdown(self, timeout: float = 5.0) -> None:
        """Cancel running requests, give their outcomes up to timeout to be written,
        then close the connections."""
        self._closing.set()
        with self._lock:
            running = list(self._running)
            conns = list(self._conns)
        for r in running:
            r._do_cancel("cancelled: executor shutting down")
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RD)
            except OSError:
                pass
        with self._conns_changed:
            self._conns_changed.wait_for(lambda: not self._conns, timeout)

    def _serve_conn(self, conn: socket.socket) -> None:
        with self._lock:
            self._conns.append(conn)
        work: "queue.Queue[Optional[Request]]" = queue.Queue()
        mine: List[Request] = []

        def worker() -> None:
            broken = False
            while True:
                req = work.get()
                if req is None:
                    return
                try:
                    if req._invalid is not None:
                        out = _outcome(req, "error", error=_error(req._invalid, "invalid_request"))
                    elif req.cancelled:
                        out = self._cancelled(req)
                    else:
                        out = self.execute(req)
                finally:
                    req._done = True
                    with self._lock:
                        if req in self._running:
                            self._running.remove(req)
                if broken:
                    continue
                try:
                    frame = encode_frame("response", out)
                except (TypeError, ValueError) as e:
                    frame = encode_frame("response", _outcome(req, "error", error=_error(
                        "outcome is not JSON-serialisable: %s" % e, "result_not_serializable")))
                try:
                    conn.sendall(frame)
                except OSError as e:
                    log.warning("cannot write response for request %s: %s", req.request_id, e)
                    broken = True

        wt = threading.Thread(target=worker, name="hero-executor-worker", daemon=True)
        wt.start()
        try:
            while True:
                try:
                    frame = read_frame(conn, self.max_frame_size)
                except ProtocolError as e:
                    if not self._closing.is_set():
                        log.warning("bad frame, closing connection: %s", e)
                        for r in mine:
                            r._do_cancel("connection to the orchestrator broken")
                    break
                except OSError:
                    break
                if frame is None:
                    break
                mtype, payload = frame
                if mtype == "request":
                    req = self._make_request(payload)
                    if req is None:
                        log.warning("request without request_id, closing connection")
                        break
                    mine[:] = [r for r in mine if not r._done] + [req]
                    work.put(req)
                elif mtype == "cancel":
                    job_id = payload.get("job_id")
                    if isinstance(job_id, str) and job_id:
                        rid = payload.get("request_id")
                        self.cancel(job_id, rid if isinstance(rid, str) and rid else None)
                else:
                    log.warning("unexpected %s frame ignored", mtype)
        finally:
            work.put(None)
            wt.join()
            try:
                conn.close()
            except OSError:
                pass
            with self._conns_changed:
                if conn in self._conns:
                    self._conns.remove(conn)
                self._conns_changed.notify_all()

    def _make_request(self, payload: dict) -> Optional[Request]:
        rid = payload.get("request_id")
        if not isinstance(rid, str) or not rid:
            return None
        req = Request(payload)
        problems = []
        if payload.get("protocol_version") != PROTOCOL_VERSION:
            problems.append("unsupported protocol_version %r" % (payload.get("protocol_version"),))
        if not isinstance(payload.get("job_id"), str) or not payload.get("job_id"):
            problems.append("job_id missing")
        if not isinstance(payload.get("function_name"), str) or not payload.get("function_name"):
            problems.append("function_name missing")
        if not isinstance(payload.get("args", []), list):
            problems.append("args is not an array")
        if not isinstance(payload.get("kwargs", {}), dict):
            problems.append("kwargs is not an object")
        if not isinstance(payload.get("context", {}), dict):
            problems.append("context is not an object")
        if problems:
            req._invalid = "; ".join(problems)
            if not isinstance(req.job_id, str):
                req.job_id = ""
        with self._lock:
            self._running.append(req)
        return req


def _listen(address: Optional[str]) -> Tuple[socket.socket, Callable[[], None]]:
    if address is None:
        path, tcp = os.environ.get(ENV_SOCKET, ""), os.environ.get(ENV_TCP_SOCKET, "")
        if path and tcp:
            raise RuntimeError("both %s and %s are set" % (ENV_SOCKET, ENV_TCP_SOCKET))
        if not path and not tcp:
            raise RuntimeError("neither %s nor %s is set" % (ENV_SOCKET, ENV_TCP_SOCKET))
    elif address.startswith("tcp://"):
        path, tcp = "", address[len("tcp://"):]
    else:
        path, tcp = address, ""
    if path:
        try:
            if stat.S_ISSOCK(os.lstat(path).st_mode):
                os.unlink(path)
        except FileNotFoundError:
            pass
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.bind(path)
        s.listen(128)

        def cleanup() -> None:
            try:
                os.unlink(path)
            except OSError:
                pass
        return s, cleanup
    host, port = _parse_local_tcp(tcp)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(128)
    return s, lambda: None


def _parse_local_tcp(hostport: str) -> Tuple[str, int]:
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise RuntimeError("bad TCP address %r (want host:port)" % hostport)
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if host.lower() == "localhost":
        return "127.0.0.1", int(port)
    try:
        if not ipaddress.ip_address(host).is_loopback:
            raise ValueError
    except ValueError:
        raise RuntimeError("TCP address %r is not localhost-only" % hostport) from None
    return host, int(port)


# --------------------------------------------------------------------------- default executor

_default = Executor()


def register(name: Any = None) -> Callable:
    """Register a handler on the default executor (see Executor.register)."""
    return _default.register(name)


def serve(address: Optional[str] = None) -> None:
    """Serve the default executor's handlers (see Executor.serve)."""
    _default.serve(address)


def default_executor() -> Executor:
    return _default
