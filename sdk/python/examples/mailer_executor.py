#!/usr/bin/env python3
"""Example RRQ executor named after no script type: register it with the runner as
"mailer" and call its handler as ``mailer#send_email`` — in a flow, with no
script_type (examples/handlers.yaml):

  runner --executors "mailer;cmd=python3 -u sdk/python/examples/mailer_executor.py;ro=sdk/python"

Handler:

  send_email   kwargs: to (an address), subject, text (optional). Writes the mail
               the jobs before it in the flow lead to — the text, then each result
               they passed on (kwargs["hero_deps"]) as "key: value" lines, empty
               values left out — and
               returns {"to", "subject", "body"}. It sends nothing anywhere: a real
               mailer would hand the mail to its SMTP server here.
"""

import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

import hero_executor as hx  # noqa: E402


def _lines(deps):
    """The results of the jobs before this one, as "key: value" lines (JSON for a
    value that is not a string), by job id and key."""
    out = []
    for job_id in sorted(deps, key=str):
        result = deps[job_id]
        if not isinstance(result, dict):
            result = {"output": result}
        for key in sorted(result):
            value = result[key]
            if value == "":
                continue  # e.g. the empty output of a script that wrote only results
            out.append(f"{key}: {value if isinstance(value, str) else json.dumps(value, separators=(',', ':'))}")
    return out


@hx.register("send_email")
def send_email(req):
    to = req.kwargs.get("to")
    if not isinstance(to, str) or "@" not in to:
        raise hx.HandlerError("kwargs.to must be a mail address", type="bad_arguments", code="NO_RECIPIENT")
    subject = str(req.kwargs.get("subject", ""))
    text = req.kwargs.get("text")
    body = ([str(text)] if text else []) + _lines(req.kwargs.get("hero_deps") or {})
    return {"to": to, "subject": subject, "body": "\n".join(body)}


if __name__ == "__main__":
    hx.serve()
