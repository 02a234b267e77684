"""hero_client — a producer client for the Hero coordinator's JSON-RPC API, in one module.

Python >= 3.9, the standard library plus ``cryptography`` (Debian: python3-cryptography)
for Ed25519. Every request is signed by the actor's key exactly as docs/api.md
("Signed requests") says, or carries an operator secret::

    import hero_client as hc

    client = hc.Client.from_env()          # HERO_API_URL, HERO_ACTOR, HERO_CONTEXT, HERO_KEY, HERO_TLS_CA
    flow = client.submit_flow([
        {"name": "a", "type": "sh", "script": 'echo "SEED=21" >> "$HERO_RESULT_FILE"'},
        {"name": "b", "type": "python", "depends": ["a"], "script": "print('after a')"},
    ])
    for event in client.watch_flow(flow["id"]):
        print(event["type"], event.get("job_id"))
    done = client.wait_flow(flow["id"])     # the flow once it ended
    job = client.run_job("print(6*7)", script_type="python")
    sub = client.submit_job("print('later')", unique_key="nightly-1", unique_ttl=3600)
    done = client.wait_job(sub["job"]["id"])

Objects are the API's JSON objects as dicts (the seeds' field names, numbers as
numbers). Errors are typed: ``HeroError`` and one subclass per JSON-RPC error code
(``NotFound``, ``InvalidParams``, ``Unauthenticated``, …), ``TransportError`` when the
API cannot be reached, ``FlowFailed`` / ``JobFailed`` when a flow or job the client
waited for ended in error and the caller asked to be told (``check=True``).

Idempotent calls (loads, lists, logs, events, waits, ``flow.start``, creates that name
their id, and submissions that name their job by id or ``unique_key``) are retried on transient faults — the API unreachable, HTTP 502/503/504,
``-32000`` unavailable — with exponential backoff, honouring the server's
``retry_after_ms``; a ``-32029`` rate-limit refusal is retried for any call (the server
refused it before running it). Each try is signed anew (a new nonce and timestamp).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import secrets
import ssl
import time
import urllib.error
import urllib.request
from typing import Any, Callable, Dict, Iterator, List, Optional

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

__all__ = [
    "SCHEME",
    "JSONRPC_TARGET",
    "canonical",
    "sign",
    "load_key",
    "Client",
    "HeroError",
    "TransportError",
    "ParseError",
    "InvalidRequest",
    "MethodNotFound",
    "InvalidParams",
    "InternalError",
    "Unavailable",
    "Unauthenticated",
    "PermissionDenied",
    "NotFound",
    "Timeout",
    "AlreadyExists",
    "FailedPrecondition",
    "Gone",
    "TooManyRequests",
    "FlowFailed",
    "JobFailed",
    "IDEMPOTENT_METHODS",
]

# The first line of every canonical string (docs/api.md, Signed requests).
SCHEME = "HERO-ED25519-V1"
# The target of every JSON-RPC request: the HTTP method and path.
JSONRPC_TARGET = "POST /"

# Methods whose repetition changes nothing: retried on transient faults. A create is
# idempotent only when it names its id (the server returns the stored object).
IDEMPOTENT_METHODS = frozenset({
    "actor.load", "context.load", "runner.load", "runner.list", "job.load", "job.list",
    "job.logs", "flow.load", "flow.list", "flow.dag", "flow.wait", "flow.start",
    "message.load", "events.read", "dlq.list", "dlq.show", "rpc.discover", "job.check_batch",
})
_CREATES = {"actor.create": "actor", "context.create": "context", "runner.create": "runner",
            "job.create": "job", "flow.create": "flow", "message.create": "message"}

FLOW_ENDED = ("finished", "error")
JOB_ENDED = ("finished", "error")


# ---------------------------------------------------------------- errors

class HeroError(Exception):
    """An error answer of the API: its JSON-RPC ``code``, ``message`` and ``data``."""

    code = 0

    def __init__(self, message: str, code: Optional[int] = None, data: Optional[dict] = None, method: str = ""):
        super().__init__(message)
        if code is not None:
            self.code = code
        self.message = message
        self.data = data or {}
        self.method = method

    def __str__(self) -> str:
        where = f"{self.method}: " if self.method else ""
        return f"{where}{self.message} ({self.code})"


class TransportError(HeroError):
    """The API could not be reached, or answered something that is not JSON-RPC.
    ``status``: the HTTP status when there was one; ``transient``: worth another try
    (unreachable, HTTP 502/503/504); ``refused``: nothing was sent or run (a refused
    connection, an HTTP 503), so even a call that is not idempotent may be tried again."""

    status = 0
    transient = False
    refused = False


class ParseError(HeroError):
    code = -32700


class InvalidRequest(HeroError):
    code = -32600


class MethodNotFound(HeroError):
    code = -32601


class InvalidParams(HeroError):
    """A field is missing, of the wrong type, unknown or breaks a rule: ``field`` names it."""
    code = -32602

    @property
    def field(self) -> str:
        return str(self.data.get("field", ""))


class InternalError(HeroError):
    code = -32603


class Unavailable(HeroError):
    """Redis or a service behind the API cannot be reached now: retry."""
    code = -32000


class Unauthenticated(HeroError):
    code = -32001


class PermissionDenied(HeroError):
    code = -32003


class NotFound(HeroError):
    code = -32004


class Timeout(HeroError):
    """A wait ended first (``job.run``, ``flow.wait``); the job or flow goes on."""
    code = -32008


class AlreadyExists(HeroError):
    """An object of that id exists with different content."""
    code = -32009


class FailedPrecondition(HeroError):
    code = -32010


class Gone(HeroError):
    """``events.read`` from an event id the stream no longer holds: reload, follow from "$"."""
    code = -32011


class TooManyRequests(HeroError):
    code = -32029


_BY_CODE = {c.code: c for c in (ParseError, InvalidRequest, MethodNotFound, InvalidParams, InternalError,
                                Unavailable, Unauthenticated, PermissionDenied, NotFound, Timeout,
                                AlreadyExists, FailedPrecondition, Gone, TooManyRequests)}


class FlowFailed(Exception):
    """A flow ended in error; ``flow`` is the flow as the API returned it."""

    def __init__(self, flow: dict):
        super().__init__(f"flow {flow.get('id')} ended in error: {flow.get('error', '')}")
        self.flow = flow


class JobFailed(Exception):
    """A job ended in error; ``job`` is the job as the API returned it."""

    def __init__(self, job: dict):
        super().__init__(f"job {job.get('id')} ended in error: {job.get('error', '')}")
        self.job = job


def _error(method: str, err: dict) -> HeroError:
    code = int(err.get("code", 0))
    cls = _BY_CODE.get(code, HeroError)
    return cls(str(err.get("message", "")), code=code, data=err.get("data") or {}, method=method)


# ---------------------------------------------------------------- signing

def canonical(actor: int, target: str, timestamp: int, nonce: str, body: bytes) -> str:
    """The string a request's signature covers: six lines joined by LF, no trailing LF."""
    return "\n".join([SCHEME, str(actor), target, str(timestamp), nonce, hashlib.sha256(body).hexdigest()])


def sign(key: Ed25519PrivateKey, actor: int, body: bytes, target: str = JSONRPC_TARGET,
         timestamp: Optional[int] = None, nonce: Optional[str] = None) -> Dict[str, str]:
    """The four X-Hero-* headers of a signed request whose bytes are ``body``."""
    ts = int(time.time()) if timestamp is None else timestamp
    nonce = secrets.token_hex(16) if nonce is None else nonce
    sig = key.sign(canonical(actor, target, ts, nonce, body).encode("utf-8"))
    return {"X-Hero-Actor": str(actor), "X-Hero-Timestamp": str(ts), "X-Hero-Nonce": nonce,
            "X-Hero-Signature": sig.hex()}


def load_key(path: str) -> Ed25519PrivateKey:
    """An actor's private key from its PKCS#8 PEM file (``heroctl key generate``)."""
    with open(path, "rb") as f:
        key = serialization.load_pem_private_key(f.read(), password=None)
    if not isinstance(key, Ed25519PrivateKey):
        raise ValueError(f"{path}: not an Ed25519 private key")
    return key


def _config_dir() -> str:
    if os.environ.get("HERO_CONFIG_DIR"):
        return os.environ["HERO_CONFIG_DIR"]
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "hero")


def env_api_url(env: Any = None) -> str:
    """The JSON-RPC endpoint the environment names, as heroctl reads it: HERO_API_URL,
    else https:// (http:// with HERO_PLAINTEXT=1) on the host of HERO_ADDR (default
    127.0.0.1) and the port HERO_HTTP_PORT (default 9652): the port docker-compose.yml
    publishes the API on, so that moving it moves the clients too."""
    env = os.environ if env is None else env
    if env.get("HERO_API_URL"):
        return env["HERO_API_URL"]
    host = "127.0.0.1"
    addr = env.get("HERO_ADDR")
    if addr:
        host = addr.rsplit(":", 1)[0] if ":" in addr else addr
    port = env.get("HERO_HTTP_PORT") or "9652"
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"HERO_HTTP_PORT={port!r} is not a port (a number from 1 to 65535)")
    scheme = "http" if env.get("HERO_PLAINTEXT") == "1" else "https"
    return f"{scheme}://{host}:{port}/"


# ---------------------------------------------------------------- client

class Client:
    """A JSON-RPC client acting as one actor (signed) or as an operator (secret).

    ``url``: the JSON-RPC endpoint (``https://127.0.0.1:9652/``); ``actor`` and ``key``
    (an ``Ed25519PrivateKey`` or the path of its PEM file) sign each request;
    ``admin_secret`` sends ``Authorization: Bearer`` instead (with ``actor``: acting for
    it). ``context`` is the context id the job and flow helpers use. ``ca_file``: the
    CA that signed the API's certificate (the stack's ``ca.pem``). ``retries``: how many
    times an idempotent call is tried again on a transient fault.
    """

    def __init__(self, url: str = "https://127.0.0.1:9652/", *, actor: Optional[int] = None,
                 key: Any = None, admin_secret: Optional[str] = None, context: int = 1,
                 ca_file: Optional[str] = None, timeout: float = 30.0, retries: int = 5,
                 backoff: float = 0.2, max_backoff: float = 5.0):
        if isinstance(key, str):
            key = load_key(key)
        if admin_secret is None and (actor is None or key is None):
            raise ValueError("Client: give actor and key (signed requests) or admin_secret (an operator)")
        self.url = url
        self.actor = actor
        self.key = key
        self.admin_secret = admin_secret
        self.context = context
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self._ssl = ssl.create_default_context(cafile=ca_file) if url.startswith("https") else None
        self._id = 0
        self.sleep: Callable[[float], None] = time.sleep  # replaceable in tests

    @classmethod
    def from_env(cls, **overrides: Any) -> "Client":
        """A client configured as heroctl is: HERO_API_URL (default: the host of
        HERO_ADDR, else 127.0.0.1, on the port HERO_HTTP_PORT, else 9652: see
        env_api_url), HERO_ACTOR, HERO_CONTEXT (default 1), HERO_KEY (default
        $HERO_CONFIG_DIR/keys/actor-<id>.pem, else ~/.config/hero/keys/…),
        HERO_TLS_CA, HERO_ADMIN_SECRET (used when no actor key is found)."""
        env = os.environ
        kw: Dict[str, Any] = {
            "url": env_api_url(env),
            "context": int(env.get("HERO_CONTEXT") or "1"),
            "ca_file": env.get("HERO_TLS_CA") or None,
        }
        actor = env.get("HERO_ACTOR")
        if actor:
            kw["actor"] = int(actor)
            path = env.get("HERO_KEY") or os.path.join(_config_dir(), "keys", f"actor-{int(actor)}.pem")
            if os.path.exists(path):
                kw["key"] = path
            elif not env.get("HERO_ADMIN_SECRET"):
                raise ValueError(f"no key for actor {actor} at {path}: set HERO_KEY or create it with heroctl key generate")
        if "key" not in kw and env.get("HERO_ADMIN_SECRET"):
            kw["admin_secret"] = env["HERO_ADMIN_SECRET"]
        kw.update(overrides)
        return cls(**kw)

    # ------------------------------------------------------------ the wire

    def call(self, method: str, params: Optional[dict] = None, *, idempotent: Optional[bool] = None,
             timeout: Optional[float] = None) -> Any:
        """Calls one JSON-RPC method and returns its result; raises a HeroError subclass.
        ``idempotent`` (default: from the method, see IDEMPOTENT_METHODS) allows retries
        on transient faults."""
        if idempotent is None:
            idempotent = _idempotent(method, params or {})
        attempt = 0
        while True:
            try:
                return self._call_once(method, params or {}, timeout)
            except (TransportError, Unavailable, TooManyRequests) as e:
                if isinstance(e, TransportError):
                    retryable = e.transient and (idempotent or e.refused)
                else:
                    retryable = isinstance(e, TooManyRequests) or idempotent
                if not retryable or attempt >= self.retries:
                    raise
                self.sleep(self._delay(attempt, e))
                attempt += 1

    def _delay(self, attempt: int, err: HeroError) -> float:
        hint = err.data.get("retry_after_ms") if isinstance(err.data, dict) else None
        if isinstance(hint, (int, float)) and hint > 0:
            return min(hint / 1000.0, self.max_backoff)
        d = min(self.backoff * (2 ** attempt), self.max_backoff)
        return d / 2 + random.uniform(0, d / 2)

    #: requests per JSON-RPC batch of call_batch's callers (the API takes up to
    #: --max-batch, 1000 by default, and counts each against the rate limit)
    BATCH = 500

    def call_batch(self, method: str, params: List[dict], *, timeout: Optional[float] = None) -> List[Any]:
        """Calls one method once for each of ``params`` in one JSON-RPC batch (one round
        trip) and returns the results in order; raises the first failed item's error
        (the items before it were done). A batch the server refused whole before doing
        anything (its rate limit answers every item -32029, or the connection was
        refused) is sent again after the server's hint, like call."""
        if not params:
            return []
        attempt = 0
        while True:
            first = self._id + 1
            self._id += len(params)
            reqs = [{"jsonrpc": "2.0", "id": first + k, "method": method, "params": p} for k, p in enumerate(params)]
            try:
                answer = self._post(json.dumps(reqs, separators=(",", ":")).encode("utf-8"), method, timeout)
            except TransportError as e:
                if not (e.transient and e.refused) or attempt >= self.retries:
                    raise
                self.sleep(self._delay(attempt, e))
                attempt += 1
                continue
            if isinstance(answer, dict) and answer.get("error"):
                err = _error(method, answer["error"])  # the batch as a whole refused
            elif not isinstance(answer, list):
                raise TransportError(f"the API answered a batch with a JSON {type(answer).__name__}, not a list", method=method)
            else:
                by_id = {a.get("id"): a for a in answer if isinstance(a, dict)}
                items = [by_id.get(first + k) for k in range(len(params))]
                if any(a is None for a in items):
                    raise TransportError(f"the API left requests of the batch unanswered ({len(answer)} of {len(params)} answers)", method=method)
                errors = [a.get("error") for a in items]
                if not all(e and e.get("code") == TooManyRequests.code for e in errors):
                    for a in items:
                        if a.get("error"):
                            raise _error(method, a["error"])
                    return [a.get("result") for a in items]
                err = _error(method, errors[0])
            if not isinstance(err, TooManyRequests) or attempt >= self.retries:
                raise err
            self.sleep(self._delay(attempt, err))
            attempt += 1

    def _call_once(self, method: str, params: dict, timeout: Optional[float]) -> Any:
        self._id += 1
        body = json.dumps({"jsonrpc": "2.0", "id": self._id, "method": method, "params": params},
                          separators=(",", ":")).encode("utf-8")
        answer = self._post(body, method, timeout)
        if not isinstance(answer, dict):
            raise TransportError(f"the API answered a JSON {type(answer).__name__}, not a response object", method=method)
        if answer.get("error"):
            raise _error(method, answer["error"])
        return answer.get("result")

    def _post(self, body: bytes, method: str, timeout: Optional[float]) -> Any:
        """POSTs a signed request body and returns the decoded JSON answer."""
        headers = {"Content-Type": "application/json"}
        if self.admin_secret is not None:
            headers["Authorization"] = "Bearer " + self.admin_secret
            if self.actor is not None:
                headers["X-Hero-Actor"] = str(self.actor)
        else:
            headers.update(sign(self.key, self.actor, body))
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout or self.timeout, context=self._ssl) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as e:
            retry_after = (e.headers.get("Retry-After") if e.headers else None) or ""
            err = TransportError(f"HTTP {e.code} from {self.url}", code=0, method=method,
                                 data={"retry_after_ms": int(retry_after) * 1000} if retry_after.isdigit() else {})
            err.status = e.code
            err.transient = e.code in (502, 503, 504)
            err.refused = e.code == 503  # over the connection cap: answered at once, nothing ran
            raise err from e
        except (urllib.error.URLError, OSError) as e:
            reason = getattr(e, "reason", e)
            err = TransportError(f"cannot reach the API at {self.url}: {reason}", code=0, method=method)
            err.transient = True
            # a refused connection sent nothing: any call may be tried again
            err.refused = isinstance(reason, ConnectionRefusedError)
            raise err from e
        try:
            return json.loads(raw)
        except ValueError as e:
            raise TransportError(f"the API answered something that is not JSON: {raw[:200]!r}", method=method) from e

    def _ctx(self, context_id: Optional[int]) -> int:
        return self.context if context_id is None else context_id

    # ------------------------------------------------------------ jobs

    def create_job(self, script: str = "", script_type: str = "python", *, id: Optional[int] = None,
                   depends: Optional[List[int]] = None, env: Optional[Dict[str, str]] = None,
                   timeout: int = 0, retries: int = 0, runner_id: Optional[int] = None,
                   function: Optional[str] = None, args: Optional[list] = None, kwargs: Optional[dict] = None,
                   priority: Optional[int] = None, concurrency_key: Optional[str] = None,
                   concurrency_limit: Optional[int] = None, concurrency_policy: Optional[str] = None,
                   context_id: Optional[int] = None) -> dict:
        """Creates a job (``job.create``; admins): a script, or a handler job when
        ``function`` (``executor#handler``) is given. ``priority`` orders it in its queue:
        1 first … 5 last (none: 3); at most ``concurrency_limit`` (none: 1) jobs of its
        ``concurrency_key`` are in flight at once, and ``concurrency_policy`` (``queue``,
        ``cancel_newest``, ``cancel_oldest``) says what happens to one that meets the
        limit (docs/scheduling.md). Returns the Job."""
        return self.call("job.create", {"context_id": self._ctx(context_id),
                                        "job": _job(script, script_type, id, depends, env, timeout, retries,
                                                    runner_id, function, args, kwargs, priority,
                                                    concurrency_key, concurrency_limit, concurrency_policy)})

    def create_jobs(self, jobs: List[dict], context_id: Optional[int] = None) -> List[Any]:
        """Creates up to 1000 jobs in one call (``job.create_batch``; admins), each on
        its own: each a dict of create_job's keywords (``script``, ``script_type``,
        ``id``, ``depends``, ``env``, ``timeout``, ``retries``, ``runner_id``,
        ``function``, ``args``, ``kwargs``, ``priority``, ``concurrency_key``,
        ``concurrency_limit``, ``concurrency_policy``). Returns, in order, for each job the Job
        (created, or found: the same job under an ``id`` given before), or the error
        that refused it: a HeroError instance, returned, not raised (the other jobs are
        stored). Raises when the call is refused as a whole (malformed, or the caller
        is no admin of the context)."""
        return self._create_batch([_job(
            spec.get("script", ""), spec.get("script_type", "python"), spec.get("id"), spec.get("depends"),
            spec.get("env"), spec.get("timeout", 0), spec.get("retries", 0), spec.get("runner_id"),
            function=spec.get("function"), args=spec.get("args"), kwargs=spec.get("kwargs"),
            priority=spec.get("priority"), concurrency_key=spec.get("concurrency_key"),
            concurrency_limit=spec.get("concurrency_limit"), concurrency_policy=spec.get("concurrency_policy"))
            for spec in jobs], context_id)

    def _create_batch(self, jobs: List[dict], context_id: Optional[int]) -> List[Any]:
        """job.create_batch of jobs as the API takes them (_job): each Job or its error."""
        made = self.call("job.create_batch", {"context_id": self._ctx(context_id), "jobs": jobs})
        return [_error("job.create_batch", item["error"]) if item.get("error") else item["job"]
                for item in made["items"]]

    def run_job(self, script: str = "", script_type: str = "python", *, wait: Optional[float] = None,
                check: bool = False, context_id: Optional[int] = None, **job: Any) -> dict:
        """Runs a standalone job and waits for its end (``job.run``; executors): returns
        the Job once it ended. ``wait`` bounds the wait in seconds (Timeout when it
        passes; the job goes on); ``check=True`` raises JobFailed for a job that ended
        in error. Other keywords as create_job (env, timeout, retries, function, …)."""
        params: Dict[str, Any] = {"context_id": self._ctx(context_id), "job": _job_from(script, script_type, job)}
        http_timeout = self.timeout
        if wait is not None:
            params["timeout"] = int(wait)
            http_timeout = wait + 30
        else:
            http_timeout = max(self.timeout, params["job"].get("timeout", 0) + 330)
        out = self.call("job.run", params, timeout=http_timeout)
        if check and out.get("status") == "error":
            raise JobFailed(out)
        return out

    def submit_job(self, script: str = "", script_type: str = "python", *, unique_key: Optional[str] = None,
                   unique_ttl: Optional[int] = None, run_at: Any = None, delay: Any = None,
                   debounce_key: Optional[str] = None, debounce: Any = None,
                   context_id: Optional[int] = None, **job: Any) -> dict:
        """Submits a standalone job and returns at once (``job.submit``; executors): the
        job is created and dispatched in one step. Returns ``{job, existing}``;
        ``existing`` is true when ``unique_key`` (kept ``unique_ttl`` seconds) or the
        job's ``id`` named a job submitted before, which is returned instead of a new
        one. ``run_at`` (a datetime or an RFC 3339 string) or ``delay`` (seconds, or a
        duration string such as ``"90s"``) delays the job: it is stored ``scheduled``
        and dispatched then; stop_job before then cancels it. ``debounce_key`` with a
        ``debounce`` window (seconds, or ``"5s"``): of the submissions with the key within
        the window only the last runs, at the window's end; the others end cancelled.
        Follow it with wait_job or events. Other keywords as create_job."""
        params = {"context_id": self._ctx(context_id), "job": _job_from(script, script_type, job)}
        params.update(_unique(unique_key, unique_ttl))
        params.update(_debounce(debounce_key, debounce))
        params.update(_delay(run_at, delay))
        return self.call("job.submit", params)

    def submit_jobs(self, jobs: List[dict], context_id: Optional[int] = None) -> List[dict]:
        """Submits up to 1000 standalone jobs in one call and one step
        (``job.submit_batch``): each a dict of submit_job's keywords (``script``,
        ``script_type``, ``unique_key``, ``unique_ttl``, ``debounce_key``, ``debounce``,
        ``env``, …). One bad job refuses
        them all. Returns ``[{job, existing}]`` in order."""
        items = []
        for spec in jobs:
            spec = dict(spec)
            item: Dict[str, Any] = _unique(spec.pop("unique_key", None), spec.pop("unique_ttl", None))
            item.update(_delay(spec.pop("run_at", None), spec.pop("delay", None)))
            item.update(_debounce(spec.pop("debounce_key", None), spec.pop("debounce", None)))
            item["job"] = _job_from(spec.pop("script", ""), spec.pop("script_type", "python"), spec)
            items.append(item)
        return self.call("job.submit_batch", {"context_id": self._ctx(context_id), "jobs": items})["items"]

    def load_job(self, id: int, caller_id: Optional[int] = None, context_id: Optional[int] = None) -> dict:
        return self.call("job.load", {"context_id": self._ctx(context_id), "caller_id": self._caller(caller_id), "id": id})

    def job_logs(self, id: int, caller_id: Optional[int] = None, offset: int = 0, context_id: Optional[int] = None) -> dict:
        """A job's log from ``offset``: ``{logs, next_offset, complete}``."""
        return self.call("job.logs", {"context_id": self._ctx(context_id), "caller_id": self._caller(caller_id),
                                      "id": id, "offset": offset})

    def wait_job(self, id: int, caller_id: Optional[int] = None, timeout: float = 300.0, check: bool = False,
                 context_id: Optional[int] = None, poll: float = 0.2) -> dict:
        """Waits for a job created or submitted before to end, reading it (``job.load``)
        at growing intervals (``poll`` up to 2 s); Timeout after ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.load_job(id, caller_id, context_id)
            if job.get("status") in JOB_ENDED:
                if check and job["status"] == "error":
                    raise JobFailed(job)
                return job
            left = deadline - time.monotonic()
            if left <= 0:
                raise Timeout(f"job {id} is still {job.get('status')} after {timeout:g}s", method="job.load",
                              data={"status": job.get("status")})
            self.sleep(min(poll, left))
            poll = min(poll * 1.5, 2.0)

    def stop_job(self, id: int, caller_id: Optional[int] = None, context_id: Optional[int] = None) -> dict:
        return self.call("job.stop", {"context_id": self._ctx(context_id), "caller_id": self._caller(caller_id), "id": id})

    def _caller(self, caller_id: Optional[int]) -> int:
        if caller_id is not None:
            return caller_id
        if self.actor is None:
            raise ValueError("caller_id is needed when the client acts as no actor")
        return self.actor

    # ------------------------------------------------------------ flows

    def create_flow(self, jobs: List[int], *, id: Optional[int] = None, env: Optional[Dict[str, str]] = None,
                    context_id: Optional[int] = None) -> dict:
        """Creates a flow of jobs created before (``flow.create``; admins)."""
        flow: Dict[str, Any] = {"jobs": list(jobs)}
        if id is not None:
            flow["id"] = id
        if env:
            flow["env_vars"] = dict(env)
        return self.call("flow.create", {"context_id": self._ctx(context_id), "flow": flow})

    def start_flow(self, id: int, context_id: Optional[int] = None, *, run_at: Any = None, delay: Any = None) -> dict:
        """Checks a flow's DAG and starts it (``flow.start``); with ``run_at`` (a
        datetime or an RFC 3339 string) or ``delay`` (seconds or ``"90s"``) schedules
        its start then (status ``scheduled``; cancel_flow before then cancels it)."""
        params = {"context_id": self._ctx(context_id), "id": id}
        params.update(_delay(run_at, delay))
        return self.call("flow.start", params)

    def begin_flow(self, jobs: int, *, ttl_seconds: Optional[int] = None, caller_id: Optional[int] = None,
                   context_id: Optional[int] = None) -> dict:
        """Begins a flow of ``jobs`` jobs created as a unit (``flow.begin``; admins): the
        server checks the size against its limit before anything is stored and
        reserves the flow's id and its jobs' ids. Returns ``{flow_id, caller_id,
        first_job_id, last_job_id, expires_at_ms, ttl_seconds, max_jobs}``; create the
        jobs with create_flow_jobs (ids first_job_id..last_job_id), then create_flow
        with ``id=flow_id`` and every job. Not renewed within ``ttl_seconds`` (each
        create_flow_jobs renews it; default 60), the creation is deleted with its jobs;
        abort_flow deletes it at once."""
        params: Dict[str, Any] = {"context_id": self._ctx(context_id), "jobs": jobs}
        if ttl_seconds:
            params["ttl_seconds"] = ttl_seconds
        if caller_id:
            params["caller_id"] = caller_id
        return self.call("flow.begin", params)

    def create_flow_jobs(self, flow_id: int, jobs: List[dict], context_id: Optional[int] = None) -> List[Any]:
        """``job.create_batch`` of the jobs of a flow begun with begin_flow (each with its
        ``id`` from the range it gave): each Job or its error."""
        made = self.call("job.create_batch", {"context_id": self._ctx(context_id), "jobs": jobs, "flow_id": flow_id})
        return [_error("job.create_batch", item["error"]) if item.get("error") else item["job"]
                for item in made["items"]]

    def abort_flow(self, id: int, context_id: Optional[int] = None) -> int:
        """Deletes the jobs of a flow begun with begin_flow and not created (``flow.abort``);
        returns how many."""
        return self.call("flow.abort", {"context_id": self._ctx(context_id), "id": id})["deleted"]

    def submit_flow(self, jobs: List[dict], *, env: Optional[Dict[str, str]] = None, start: bool = True,
                    context_id: Optional[int] = None, ttl_seconds: Optional[int] = None,
                    progress: Optional[Callable[[int, int], None]] = None) -> dict:
        """Creates and starts a flow from job specs, as a flow file lists them (heroctl
        flow submit): each a dict with ``name``, ``type`` and ``script`` (or
        ``function``, ``args``, ``kwargs``), optional ``depends`` (names), ``env``,
        ``timeout``, ``retries``, ``runner``. Jobs are created level by level (each after
        the jobs it depends on, whose ids the server picks), a level's jobs in
        ``job.create_batch`` calls of up to BATCH (one round trip each; against a server
        without it, JSON-RPC batches of ``job.create``). Before the first is created,
        the server checks them all as it would create them (``job.check_batch``): a job
        it would refuse — one naming an executor no runner of the context announced,
        say — raises its error, naming it, and nothing is stored (a server without
        ``job.check_batch`` checks each job as it is created: the jobs made before a
        refused one stay). Returns the Flow (its ``jobs`` are the job ids, in the order
        of ``jobs``).

        A server with ``flow.begin`` gets the flow as a unit: begin_flow (the size
        checked first, every id given at once), the jobs in dependency order in
        ``job.create_batch`` calls of BATCH with ``flow_id`` (``progress(created,
        total)`` after each), then ``flow.create``; an error deletes what was made
        (abort_flow), and a process killed midway leaves it to the server, which deletes
        it once ``ttl_seconds`` (default 60) pass without a call."""
        order = _topological(jobs)
        self._check_flow(order, context_id)
        try:
            flow = self._submit_staged(jobs, order, env, context_id, ttl_seconds, progress)
        except MethodNotFound:
            flow = self._submit_levels(jobs, order, env, context_id)
        if start:
            flow = self.start_flow(flow["id"], context_id)
        return flow

    def _submit_staged(self, jobs: List[dict], order: List[dict], env: Optional[Dict[str, str]],
                       context_id: Optional[int], ttl_seconds: Optional[int],
                       progress: Optional[Callable[[int, int], None]]) -> dict:
        """submit_flow's creation as a unit (flow.begin); the flow, not started."""
        stage = self.begin_flow(len(jobs), ttl_seconds=ttl_seconds, context_id=context_id)
        ids = {spec["name"]: stage["first_job_id"] + k for k, spec in enumerate(order)}
        try:
            for at in range(0, len(order), self.BATCH):
                part = order[at:at + self.BATCH]
                batch = []
                for spec in part:
                    job = _flow_job(spec, [ids[d] for d in spec.get("depends", [])])
                    job["id"] = ids[spec["name"]]
                    batch.append(job)
                for spec, job in zip(part, self.create_flow_jobs(stage["flow_id"], batch, context_id)):
                    if isinstance(job, HeroError):
                        job.message = f"job {spec['name']!r} of the flow: {job.message}"
                        raise job
                if progress:
                    progress(at + len(part), len(order))
            return self.create_flow([ids[s["name"]] for s in jobs], id=stage["flow_id"], env=env, context_id=context_id)
        except BaseException:
            try:
                self.abort_flow(stage["flow_id"], context_id)
            except HeroError:
                pass  # the server deletes it when its ttl passes
            raise

    def _submit_levels(self, jobs: List[dict], order: List[dict], env: Optional[Dict[str, str]],
                       context_id: Optional[int]) -> dict:
        """submit_flow's creation against a server without flow.begin: the jobs level by
        level, then the flow (not started); jobs made before a failure stay."""
        ids: Dict[str, int] = {}
        batched = True  # job.create_batch, until the server does not know it
        for level in _levels(order):
            # a level's jobs in batches: one round trip for up to BATCH of them (their
            # dependencies are all in earlier levels)
            for at in range(0, len(level), self.BATCH):
                part = level[at:at + self.BATCH]
                level_jobs = [_flow_job(spec, [ids[d] for d in spec.get("depends", [])]) for spec in part]
                made: List[Any] = []
                if batched:
                    try:
                        made = self._create_batch(level_jobs, context_id)
                    except MethodNotFound:
                        batched = False
                if not batched:
                    made = self.call_batch("job.create", [{"context_id": self._ctx(context_id), "job": job}
                                                          for job in level_jobs])
                for spec, job in zip(part, made):
                    if isinstance(job, HeroError):
                        job.message = f"job {spec['name']!r} of the flow: {job.message}"
                        raise job
                    ids[spec["name"]] = job["id"]
        return self.create_flow([ids[s["name"]] for s in jobs], env=env, context_id=context_id)

    def _check_flow(self, specs: List[dict], context_id: Optional[int]) -> None:
        """Has the server check a flow's job specs as it would create them
        (``job.check_batch``, 1000 a call), each without its dependencies (their ids are
        not known yet; _topological checked them): raises the first refusal, naming its
        job. Nothing when the server does not know the method."""
        for at in range(0, len(specs), 1000):
            part = specs[at:at + 1000]
            try:
                checked = self.call("job.check_batch", {"context_id": self._ctx(context_id),
                                                        "jobs": [_flow_job(spec, []) for spec in part]})
            except MethodNotFound:
                return
            for spec, item in zip(part, checked["items"]):
                if item.get("error"):
                    err = _error("job.check_batch", item["error"])
                    err.message = f"job {spec['name']!r} of the flow: {err.message}"
                    raise err

    def load_flow(self, id: int, context_id: Optional[int] = None) -> dict:
        return self.call("flow.load", {"context_id": self._ctx(context_id), "id": id})

    def flow_dag(self, id: int, context_id: Optional[int] = None, *, offset: int = 0,
                 limit: Optional[int] = None) -> dict:
        """``flow.dag``: ``{flow, nodes}``; with ``limit`` (at most 10,000), or for a flow of
        more than 10,000 jobs, one page from ``offset`` with ``next_offset`` (0: the last)
        and ``counts``, the flow without its job list (flow_dag_pages reads them all)."""
        params: Dict[str, Any] = {"context_id": self._ctx(context_id), "id": id}
        if offset:
            params["offset"] = offset
        if limit is not None:
            params["limit"] = limit
        return self.call("flow.dag", params)

    def flow_dag_pages(self, id: int, limit: int = 5000, context_id: Optional[int] = None) -> Iterator[dict]:
        """Yields a flow's DAG nodes a page (``limit``) at a time, in the flow's order."""
        offset = 0
        while True:
            page = self.flow_dag(id, context_id, offset=offset, limit=limit)
            yield from page["nodes"]
            offset = page.get("next_offset") or 0
            if not offset:
                return

    def flow_counts(self, id: int, context_id: Optional[int] = None) -> dict:
        """``flow.counts``: the flow's nodes by state (``started, total, ended, completed,
        failed, cancelled, not_ended``), O(1) whatever its size."""
        return self.call("flow.counts", {"context_id": self._ctx(context_id), "id": id})

    def cancel_flow(self, id: int, context_id: Optional[int] = None) -> dict:
        return self.call("flow.cancel", {"context_id": self._ctx(context_id), "id": id})

    def wait_flow(self, id: int, timeout: float = 300.0, check: bool = False,
                  context_id: Optional[int] = None) -> dict:
        """Waits until a flow ends (``flow.wait``, one notification per flow end, no
        polling) and returns it; Timeout after ``timeout`` seconds (the flow goes on);
        ``check=True`` raises FlowFailed for a flow that ended in error."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            step = int(max(1, min(3600, left)))
            try:
                flow = self.call("flow.wait", {"context_id": self._ctx(context_id), "id": id, "timeout": step},
                                 timeout=step + 30)
            except Timeout:
                if time.monotonic() >= deadline:
                    raise
                continue
            if check and flow.get("status") == "error":
                raise FlowFailed(flow)
            return flow

    def run_flow(self, jobs: List[dict], *, env: Optional[Dict[str, str]] = None, timeout: float = 300.0,
                 check: bool = True, context_id: Optional[int] = None) -> dict:
        """submit_flow, then wait_flow: the flow once it ended (FlowFailed if it ended
        in error, unless check=False)."""
        flow = self.submit_flow(jobs, env=env, context_id=context_id)
        return self.wait_flow(flow["id"], timeout=timeout, check=check, context_id=context_id)

    # ------------------------------------------------------------ schedules

    def create_schedule(self, id: str, script: str = "", script_type: str = "python", *, cron: Optional[str] = None,
                        every: Any = None, timezone: Optional[str] = None, jitter: Any = None,
                        overlap: Optional[str] = None, catchup_window: Any = None, paused: bool = False,
                        note: str = "", flow: Optional[List[dict]] = None, env: Optional[Dict[str, str]] = None,
                        context_id: Optional[int] = None, **job: Any) -> dict:
        """Creates schedule ``id`` of a job, or of a flow (``schedule.create``; admins):
        ``cron`` (5 fields, or 6 with seconds; ``@daily``, …) in ``timezone``, or
        ``every`` (seconds or ``"30s"``); ``jitter``; ``overlap`` (``skip``,
        ``buffer_one``, ``allow_all``, ``cancel_previous``; for a flow, judged by the
        last run's flow); ``catchup_window`` (default ``"1m"``; 0: every missed tick
        runs); ``paused`` with ``note``. Each run is a submit_job of the job (keywords as
        submit_job's) as the creator's, with ``schedule_id`` and ``schedule_tick_ms``; or,
        with ``flow`` (job specs as submit_flow takes them: ``name``, ``type``,
        ``script``, ``depends``, …) and its ``env``, a flow of those jobs created as a
        unit and started, the flow (and its jobs) with ``schedule_id`` and
        ``schedule_tick_ms``."""
        params = {"context_id": self._ctx(context_id), "id": id, "spec": _spec(cron, every, timezone, jitter)}
        if flow is not None:
            if script or job:
                raise ValueError("a flow's schedule takes flow (its jobs), not a job's script or keywords")
            params["flow"] = _flow_template(flow, env)
        else:
            params["job"] = _job_from(script, script_type, job)
        params.update(_schedule_opts(overlap, catchup_window))
        if paused:
            params.update({"paused": True, "note": note})
        return self.call("schedule.create", params)

    def update_schedule(self, id: str, *, cron: Optional[str] = None, every: Any = None, timezone: Optional[str] = None,
                        jitter: Any = None, overlap: Optional[str] = None, catchup_window: Any = None,
                        job: Optional[dict] = None, flow: Optional[List[dict]] = None,
                        env: Optional[Dict[str, str]] = None, context_id: Optional[int] = None) -> dict:
        """Changes what is given of a schedule (``schedule.update``; admins): its spec
        (``cron`` or ``every``, with ``timezone``, ``jitter``), ``overlap``,
        ``catchup_window``, ``job`` (a dict of submit_job's keywords) or ``flow`` (job
        specs as create_schedule's, with ``env``)."""
        params: Dict[str, Any] = {"context_id": self._ctx(context_id), "id": id}
        if cron is not None or every is not None:
            params["spec"] = _spec(cron, every, timezone, jitter)
        if job is not None:
            job = dict(job)
            params["job"] = _job_from(job.pop("script", ""), job.pop("script_type", "python"), job)
        if flow is not None:
            params["flow"] = _flow_template(flow, env)
        params.update(_schedule_opts(overlap, catchup_window))
        return self.call("schedule.update", params)

    def load_schedule(self, id: str, context_id: Optional[int] = None) -> dict:
        """A schedule with its next tick and its counts (``fired``, ``skipped``, ``missed``)."""
        return self.call("schedule.load", {"context_id": self._ctx(context_id), "id": id})

    def list_schedules(self, context_id: Optional[int] = None) -> List[dict]:
        return self.call("schedule.list", {"context_id": self._ctx(context_id)})["items"]

    def pause_schedule(self, id: str, note: str = "", context_id: Optional[int] = None) -> dict:
        """Pauses a schedule with a note: no tick fires until resume_schedule (executors)."""
        return self.call("schedule.pause", {"context_id": self._ctx(context_id), "id": id, "note": note})

    def resume_schedule(self, id: str, note: str = "", context_id: Optional[int] = None) -> dict:
        """Resumes a schedule from its next tick after now (executors)."""
        return self.call("schedule.resume", {"context_id": self._ctx(context_id), "id": id, "note": note})

    def delete_schedule(self, id: str, context_id: Optional[int] = None) -> dict:
        """Deletes a schedule; its runs stay (admins)."""
        return self.call("schedule.delete", {"context_id": self._ctx(context_id), "id": id})

    def trigger_schedule(self, id: str, context_id: Optional[int] = None) -> dict:
        """Makes a run of a schedule now, whatever its spec or pause: ``{job, existing}``
        (a flow's schedule: ``{flow, existing}``, the flow started)."""
        return self.call("schedule.trigger", {"context_id": self._ctx(context_id), "id": id})

    def backfill_schedule(self, id: str, start: Any, end: Any, context_id: Optional[int] = None) -> dict:
        """Makes the runs of a schedule's ticks from ``start`` (included) to ``end``
        (excluded), datetimes or RFC 3339 strings, at most 10,000 (admins); a tick whose
        run exists is not made again: ``{runs, existing}``."""
        return self.call("schedule.backfill", {"context_id": self._ctx(context_id), "id": id,
                                               "from": _delay(start, None)["run_at"], "to": _delay(end, None)["run_at"]})

    # ------------------------------------------------------------ queues

    def list_queues(self, context_id: Optional[int] = None) -> List[dict]:
        """The context's job queues with their ``depth``, ``runners`` and pause (``queue.list``)."""
        return self.call("queue.list", {"context_id": self._ctx(context_id)})["items"]

    def pause_queue(self, script_type: Optional[str] = None, *, executor: Optional[str] = None, note: str = "",
                    context_id: Optional[int] = None) -> dict:
        """Pauses a job queue, a script type's or an executor's (``queue.pause``;
        executors): none of its jobs starts until resume_queue; running jobs go on."""
        return self.call("queue.pause", _queue_ref(self._ctx(context_id), script_type, executor, note))

    def resume_queue(self, script_type: Optional[str] = None, *, executor: Optional[str] = None, note: str = "",
                     context_id: Optional[int] = None) -> dict:
        """Resumes a paused job queue (``queue.resume``): its jobs start again."""
        return self.call("queue.resume", _queue_ref(self._ctx(context_id), script_type, executor, note))

    # ------------------------------------------------------------ limits

    def set_limit(self, scope: str, *, max_running: Optional[int] = None, rate: Optional[int] = None,
                  per: Optional[str] = None, burst: Optional[int] = None, context_id: Optional[int] = None) -> dict:
        """Sets a run or rate limit of the context (``limit.set``; admins): ``scope`` is
        ``context``, ``type:<script type>``, ``executor:<name>`` or ``key:<concurrency
        key>``; at most ``max_running`` of its jobs run at once, at most ``rate`` start
        per ``per`` (``"1s"``, ``"1m"``; none: a second), ``burst`` at once after a quiet
        time. It replaces the scope's limit and holds from the next claim
        (docs/scheduling.md). Returns the Limit."""
        p: Dict[str, Any] = {"context_id": self._ctx(context_id), "scope": scope}
        for k, v in (("max_running", max_running), ("rate", rate), ("per", per), ("burst", burst)):
            if v is not None:
                p[k] = v
        return self.call("limit.set", p)

    def list_limits(self, context_id: Optional[int] = None) -> List[dict]:
        """The context's limits (``limit.list``), each with ``running``: the runs its
        ``max_running`` counts now."""
        return self.call("limit.list", {"context_id": self._ctx(context_id)})["items"]

    def delete_limit(self, scope: str, context_id: Optional[int] = None) -> bool:
        """Removes a limit of the context (``limit.delete``; admins); False when there
        was none."""
        return bool(self.call("limit.delete", {"context_id": self._ctx(context_id), "scope": scope})["deleted"])

    # ------------------------------------------------------------ events

    def read_events(self, after: str = "0", flow_id: Optional[int] = None, limit: int = 100,
                    context_id: Optional[int] = None) -> dict:
        """One page of the context's events after an event id: ``{events, next}``."""
        params: Dict[str, Any] = {"context_id": self._ctx(context_id), "after": after, "limit": limit}
        if flow_id:
            params["flow_id"] = flow_id
        return self.call("events.read", params)

    def events(self, after: str = "$", flow_id: Optional[int] = None, poll: float = 0.2, max_poll: float = 1.0,
               context_id: Optional[int] = None, stop: Optional[Callable[[dict], bool]] = None) -> Iterator[dict]:
        """Follows the context's event stream (``events.read``), optionally one flow's,
        from the event id ``after`` ("$": from now on; "0": from the start), yielding
        each event once, in order. Between empty pages it waits ``poll`` seconds, growing
        to ``max_poll``. Ends after an event for which ``stop`` returns true. A Gone
        error means events were trimmed: reload what you follow, continue from "$"."""
        delay = poll
        while True:
            page = self.read_events(after, flow_id, context_id=context_id)
            after = page["next"]
            for ev in page["events"]:
                yield ev
                if stop is not None and stop(ev):
                    return
            if page["events"]:
                delay = poll
                continue
            self.sleep(delay)
            delay = min(delay * 2, max_poll)

    def watch_flow(self, id: int, after: str = "0", context_id: Optional[int] = None, **kw: Any) -> Iterator[dict]:
        """The events of one flow, from ``after`` ("0": all of them), until the flow
        ends (``flow.finished`` or ``flow.error``). A flow that has already ended
        yields its events and stops."""
        return self.events(after, flow_id=id, context_id=context_id,
                           stop=lambda ev: ev.get("type") in ("flow.finished", "flow.error"), **kw)


def _idempotent(method: str, params: dict) -> bool:
    if method in IDEMPOTENT_METHODS:
        return True
    if method == "job.submit":
        return _names_itself(params)
    if method == "job.submit_batch":
        return all(_names_itself(item) for item in params.get("jobs", []))
    if method == "job.create_batch":
        return all(isinstance(j, dict) and bool(j.get("id")) for j in params.get("jobs", []))
    field = _CREATES.get(method)
    if field is not None:
        obj = params.get(field)
        return isinstance(obj, dict) and bool(obj.get("id"))
    return False


def _names_itself(item: dict) -> bool:
    """A submission that names its job (an id, or a unique key) returns that job when
    repeated, instead of submitting another."""
    job = item.get("job") or {}
    return bool(item.get("unique_key")) or bool(job.get("id"))


def _debounce(key: Optional[str], window: Any) -> Dict[str, Any]:
    """A submission's debounce_key and debounce window (seconds, or "5s") as job.submit
    takes them; none when neither is given (the server refuses one without the other)."""
    if key is None and window is None:
        return {}
    return {"debounce_key": "" if key is None else str(key),
            "debounce": f"{float(window):g}s" if isinstance(window, (int, float)) else str(window or "")}


def _job_from(script: str, script_type: str, kw: Dict[str, Any]) -> dict:
    """A standalone job from create_job's keywords (no depends); unknown ones are refused."""
    kw = dict(kw)
    job = _job(script, script_type, kw.pop("id", None), None, kw.pop("env", None), kw.pop("timeout", 0),
               kw.pop("retries", 0), kw.pop("runner_id", None), kw.pop("function", None), kw.pop("args", None),
               kw.pop("kwargs", None), kw.pop("priority", None), kw.pop("concurrency_key", None),
               kw.pop("concurrency_limit", None), kw.pop("concurrency_policy", None))
    if kw:
        raise TypeError(f"unknown job arguments {sorted(kw)}")
    return job


def _delay(run_at: Any, delay: Any) -> Dict[str, Any]:
    """The API's run_at (RFC 3339) and delay (a duration string) from a datetime or a
    string, and seconds or a string."""
    out: Dict[str, Any] = {}
    if run_at is not None:
        if hasattr(run_at, "isoformat"):
            if getattr(run_at, "tzinfo", None) is None:
                raise ValueError("run_at needs a time zone (datetime.now(timezone.utc) + …)")
            run_at = run_at.isoformat()
        out["run_at"] = str(run_at)
    if delay is not None:
        out["delay"] = f"{float(delay):g}s" if isinstance(delay, (int, float)) else str(delay)
    return out


def _spec(cron: Optional[str], every: Any, timezone: Optional[str], jitter: Any) -> Dict[str, Any]:
    """A schedule's spec: cron (with a time zone) or every (seconds or a duration string)."""
    if (cron is None) == (every is None):
        raise ValueError("give cron or every (not both)")
    spec: Dict[str, Any] = {"cron": cron} if cron is not None else {"every": _duration(every)}
    if timezone:
        spec["timezone"] = timezone
    if jitter is not None:
        spec["jitter"] = _duration(jitter)
    return spec


def _duration(v: Any) -> str:
    return f"{float(v):g}s" if isinstance(v, (int, float)) else str(v)


def _schedule_opts(overlap: Optional[str], catchup_window: Any) -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if overlap is not None:
        out["overlap"] = overlap
    if catchup_window is not None:
        out["catchup_window"] = _duration(catchup_window)
    return out


def _flow_template(jobs: List[dict], env: Optional[Dict[str, str]]) -> Dict[str, Any]:
    """A flow's schedule's flow as schedule.create takes it: the job specs (as
    submit_flow's, checked as it checks them) by name, each naming its dependencies."""
    _topological(jobs)
    out: Dict[str, Any] = {"jobs": [{"name": spec["name"], "depends": list(spec.get("depends", [])), "job": _flow_job(spec, [])}
                                    for spec in jobs]}
    if env:
        out["env_vars"] = dict(env)
    return out


def _queue_ref(context_id: int, script_type: Optional[str], executor: Optional[str], note: str) -> Dict[str, Any]:
    """queue.pause's and queue.resume's params: the queue by its script type or its executor."""
    if (script_type is None) == (executor is None):
        raise ValueError("give the queue's script_type or executor (not both)")
    out: Dict[str, Any] = {"context_id": context_id, "note": note}
    if script_type is not None:
        out["script_type"] = script_type
    else:
        out["executor"] = executor
    return out


def _unique(key: Optional[str], ttl: Optional[int]) -> Dict[str, Any]:
    if key is None:
        return {}
    if not ttl:
        raise ValueError("unique_key needs unique_ttl (seconds the key is kept)")
    return {"unique_key": key, "unique_ttl_seconds": int(ttl)}


def _job(script: str, script_type: str, id: Optional[int], depends: Optional[List[int]],
         env: Optional[Dict[str, str]], timeout: int, retries: int, runner_id: Optional[int],
         function: Optional[str], args: Optional[list], kwargs: Optional[dict],
         priority: Optional[int] = None, concurrency_key: Optional[str] = None,
         concurrency_limit: Optional[int] = None, concurrency_policy: Optional[str] = None) -> dict:
    job: Dict[str, Any] = {"timeout": timeout, "retries": retries}
    if concurrency_policy is not None:
        job["concurrency_policy"] = str(concurrency_policy)
    if priority is not None:
        job["priority"] = int(priority)
    if concurrency_key is not None:
        job["concurrency_key"] = str(concurrency_key)
    if concurrency_limit is not None:
        job["concurrency_limit"] = int(concurrency_limit)
    if function:
        job.update({"function_name": function, "args": list(args or []), "kwargs": dict(kwargs or {})})
    else:
        job.update({"script": script, "script_type": script_type})
    if id is not None:
        job["id"] = id
    if depends:
        job["depends"] = list(depends)
    if env:
        job["env_vars"] = dict(env)
    if runner_id is not None:
        job["runner_id"] = runner_id
    return job


def _flow_job(spec: dict, depends: List[int]) -> dict:
    """A job spec of submit_flow as the API takes it (_job), with its dependencies' ids."""
    return _job(spec.get("script", ""), spec.get("type", "python"), None, depends, spec.get("env"),
                spec.get("timeout", 0), spec.get("retries", 0), spec.get("runner"), function=spec.get("function"),
                args=spec.get("args"), kwargs=spec.get("kwargs"), priority=spec.get("priority"),
                concurrency_key=spec.get("concurrency_key"), concurrency_limit=spec.get("concurrency_limit"),
                concurrency_policy=spec.get("concurrency_policy"))


def _levels(order: List[dict]) -> List[List[dict]]:
    """The job specs of a dependency order (_topological) by level: 0 for a job with no
    dependency, else one more than its dependencies' highest."""
    level: Dict[str, int] = {}
    out: List[List[dict]] = []
    for spec in order:
        n = max((level[d] + 1 for d in spec.get("depends", [])), default=0)
        level[spec["name"]] = n
        if n == len(out):
            out.append([])
        out[n].append(spec)
    return out


def _topological(jobs: List[dict]) -> List[dict]:
    """The job specs in an order where each comes after the ones it depends on."""
    by_name: Dict[str, dict] = {}
    for i, spec in enumerate(jobs):
        name = spec.get("name")
        if not name:
            raise ValueError(f"job {i + 1}: no name")
        if name in by_name:
            raise ValueError(f"job {name!r} is listed twice")
        by_name[name] = spec
    out: List[dict] = []
    state: Dict[str, int] = {}  # 1 visiting, 2 done

    def visit(name: str, path: List[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            raise ValueError("dependency cycle: " + " -> ".join(path + [name]))
        state[name] = 1
        for dep in by_name[name].get("depends", []):
            if dep not in by_name:
                raise ValueError(f"job {name!r} depends on {dep!r}, which is not in the flow")
            visit(dep, path + [name])
        state[name] = 2
        out.append(by_name[name])

    for spec in jobs:
        visit(spec["name"], [])
    return out
