#!/usr/bin/env python3
"""Example RRQ executor built on hero_executor.

The orchestrator starts it with RRQ_EXECUTOR_SOCKET or RRQ_EXECUTOR_TCP_SOCKET set.
Handlers:

  echo         returns {"args": args, "kwargs": kwargs}
  sleep        sleeps kwargs["seconds"], ending early (cancelled) on a cancel frame
  async_sleep  the same as an async handler (its task is cancelled)
  noop         returns None
  fail         raises ValueError (status error, type "ValueError")
  retry        raises Retry(kwargs["after_seconds"])
  stubborn     sleeps kwargs["seconds"] ignoring cancellation (exercises the kill path);
               with kwargs["started_file"] it first creates that file (the call has begun)
  crash        kills the process mid-request with os._exit(1)
  flaky        kills the process on the first attempt (os._exit(1)), succeeds after
"""

import asyncio
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import hero_executor as hx  # noqa: E402


@hx.register("echo")
def echo(req):
    return {"args": req.args, "kwargs": req.kwargs}


@hx.register("sleep")
def sleep(req):
    seconds = float(req.kwargs.get("seconds", 0))
    req.sleep(seconds)  # raises hx.Cancelled on a cancel frame
    return {"slept": seconds}


@hx.register("async_sleep")
async def async_sleep(req):
    seconds = float(req.kwargs.get("seconds", 0))
    await asyncio.sleep(seconds)  # the task is cancelled on a cancel frame
    return {"slept": seconds}


@hx.register("noop")
def noop(req):
    return None


@hx.register("fail")
def fail(req):
    raise ValueError(req.kwargs.get("message", "the example handler failed on purpose"))


@hx.register("retry")
def retry(req):
    raise hx.Retry(req.kwargs.get("after_seconds"), "try again later")


@hx.register("stubborn")
def stubborn(req):
    seconds = float(req.kwargs.get("seconds", 0))
    started = req.kwargs.get("started_file")
    if started:
        open(started, "w").close()
    time.sleep(seconds)  # deliberately ignores cancellation
    return {"slept": seconds}


@hx.register("crash")
def crash(req):
    sys.stdout.flush()
    os._exit(1)


@hx.register("flaky")
def flaky(req):
    if req.attempt <= 1:
        sys.stdout.flush()
        os._exit(1)
    return {"attempt": req.attempt}


if __name__ == "__main__":
    hx.serve()
