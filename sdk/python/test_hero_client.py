"""Tests of hero_client that need no stack: the signature of docs/api.md's worked example,
retries against a local HTTP server that answers like the API, the flow-spec order.
The example against the real stack runs in tests/e2e (TestPythonProducerSDK).

    python3 sdk/python/test_hero_client.py
"""

import hashlib
import http.server
import json
import os
import sys
import threading
import unittest

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hero_client as hc  # noqa: E402


class SigningTest(unittest.TestCase):
    # docs/api.md, "Signed requests", the worked example (lib/auth checks the same).
    def test_worked_example(self):
        key = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
        body = b'{"jsonrpc":"2.0","id":1,"method":"flow.load","params":{"context_id":1,"id":1}}'
        self.assertEqual(hashlib.sha256(body).hexdigest(), "ef278e4992ba15d5c84530bc7fd9532e660752700144255a83f7b0d8cf557b48")
        headers = hc.sign(key, 7, body, timestamp=1795600000, nonce="0123456789abcdef0123456789abcdef")
        self.assertEqual(headers["X-Hero-Signature"],
                         "39ca5a1effac1eac37444b0716a2b5dcf47769125243d41fd3d50566aecc4196564cd7e33cd1f1d993563a996944aab0c150eab6220892fb3fa9c92fa7935a03")
        self.assertEqual(headers["X-Hero-Actor"], "7")
        self.assertEqual(headers["X-Hero-Timestamp"], "1795600000")


class EnvTest(unittest.TestCase):
    def test_api_url_follows_the_published_port(self):
        cases = [
            ({}, "https://127.0.0.1:9652/"),
            ({"HERO_HTTP_PORT": "19652"}, "https://127.0.0.1:19652/"),
            ({"HERO_ADDR": "api.example:9653", "HERO_HTTP_PORT": "8443"}, "https://api.example:8443/"),
            ({"HERO_ADDR": "[::1]:9653"}, "https://[::1]:9652/"),
            ({"HERO_HTTP_PORT": "19652", "HERO_PLAINTEXT": "1"}, "http://127.0.0.1:19652/"),
            ({"HERO_HTTP_PORT": "19652", "HERO_API_URL": "https://api/"}, "https://api/"),
        ]
        for env, want in cases:
            self.assertEqual(hc.env_api_url(env), want, env)
        with self.assertRaisesRegex(ValueError, "HERO_HTTP_PORT='x' is not a port"):
            hc.env_api_url({"HERO_HTTP_PORT": "x"})


class FakeAPI(http.server.BaseHTTPRequestHandler):
    """Answers each POST with the next of ``answers`` (a JSON-RPC error or result) and
    records the request's headers and body."""

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.server.seen.append((dict(self.headers), body))
        req = json.loads(body)
        answer = self.server.answers.pop(0) if self.server.answers else {"result": {"ok": True}}
        out = json.dumps(dict(answer, jsonrpc="2.0", id=req["id"])).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


class RetryTest(unittest.TestCase):
    def setUp(self):
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeAPI)
        self.srv.seen, self.srv.answers = [], []
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.key = Ed25519PrivateKey.generate()
        self.client = hc.Client(f"http://127.0.0.1:{self.srv.server_address[1]}/", actor=3, key=self.key)
        self.slept = []
        self.client.sleep = self.slept.append

    def tearDown(self):
        self.srv.shutdown()
        self.srv.server_close()

    unavailable = {"error": {"code": -32000, "message": "unavailable", "data": {"retry_after_ms": 250}}}

    def test_idempotent_call_retried_and_signed_anew(self):
        self.srv.answers = [self.unavailable, self.unavailable, {"result": {"id": 5, "status": "finished"}}]
        flow = self.client.load_flow(5)
        self.assertEqual(flow["status"], "finished")
        self.assertEqual(len(self.srv.seen), 3)
        self.assertEqual(self.slept, [0.25, 0.25])  # the server's hint
        nonces = {h["X-Hero-Nonce"] for h, _ in self.srv.seen}
        self.assertEqual(len(nonces), 3, "each try has its own nonce")
        pub = self.key.public_key()
        for h, body in self.srv.seen:
            msg = hc.canonical(3, "POST /", int(h["X-Hero-Timestamp"]), h["X-Hero-Nonce"], body)
            pub.verify(bytes.fromhex(h["X-Hero-Signature"]), msg.encode())  # raises when it does not verify

    def test_create_without_id_not_retried(self):
        self.srv.answers = [self.unavailable]
        with self.assertRaises(hc.Unavailable):
            self.client.create_job("print(1)")
        self.assertEqual(len(self.srv.seen), 1)

    def test_delayed_submit_and_start_send_run_at_or_delay(self):
        import datetime
        self.srv.answers = [{"result": {"job": {"id": 5, "status": "scheduled"}, "existing": False}},
                            {"result": {"job": {"id": 6}, "existing": False}},
                            {"result": {"id": 2, "status": "scheduled"}}]
        at = datetime.datetime(2026, 12, 24, 18, 0, tzinfo=datetime.timezone.utc)
        self.assertEqual(self.client.submit_job("print(1)", run_at=at)["job"]["status"], "scheduled")
        self.client.submit_job("print(1)", delay=90)
        self.client.start_flow(2, delay="10m")
        sent = [json.loads(body)["params"] for _, body in self.srv.seen]
        self.assertEqual(sent[0]["run_at"], "2026-12-24T18:00:00+00:00")
        self.assertEqual(sent[1]["delay"], "90s")
        self.assertEqual(sent[2]["delay"], "10m")
        with self.assertRaises(ValueError):
            self.client.submit_job("print(1)", run_at=datetime.datetime(2026, 12, 24))

    def test_flow_schedule_sends_its_template(self):
        self.srv.answers = [{"result": {"id": "etl"}}, {"result": {"id": "etl"}}]
        jobs = [{"name": "load", "type": "sh", "script": "echo L", "depends": ["extract"]},
                {"name": "extract", "type": "sh", "script": "echo E", "timeout": 30}]
        self.client.create_schedule("etl", every="1m", overlap="skip", flow=jobs, env={"DAY": "mon"})
        self.client.update_schedule("etl", flow=jobs[1:])
        sent = [json.loads(body)["params"] for _, body in self.srv.seen]
        self.assertNotIn("job", sent[0])
        self.assertEqual(sent[0]["flow"]["env_vars"], {"DAY": "mon"})
        self.assertEqual([(j["name"], j["depends"]) for j in sent[0]["flow"]["jobs"]], [("load", ["extract"]), ("extract", [])])
        self.assertEqual(sent[0]["flow"]["jobs"][1]["job"], {"script": "echo E", "script_type": "sh", "timeout": 30, "retries": 0})
        self.assertEqual([j["name"] for j in sent[1]["flow"]["jobs"]], ["extract"])
        with self.assertRaises(ValueError):  # a cycle: refused before anything is sent
            self.client.create_schedule("x", every="1m", flow=[{"name": "a", "type": "sh", "script": "true", "depends": ["a"]}])
        with self.assertRaises(ValueError):  # a job's script with a flow
            self.client.create_schedule("x", "true", every="1m", flow=jobs)
        self.assertEqual(len(self.srv.seen), 2)

    def test_debounce_and_policy_sent_by_submit_batch_and_create(self):
        self.srv.answers = [{"result": {"items": [{"job": {"id": 1}, "existing": False}, {"job": {"id": 2}, "existing": False}]}},
                            {"result": {"id": 3}}]
        self.client.submit_jobs([{"script": "print(1)", "debounce_key": "doc-42", "debounce": 5},
                                 {"script": "print(2)"}])
        self.client.create_job("print(3)", concurrency_key="c", concurrency_policy="cancel_newest")
        sent = [json.loads(body)["params"] for _, body in self.srv.seen]
        first, second = sent[0]["jobs"]
        self.assertEqual((first["debounce_key"], first["debounce"]), ("doc-42", "5s"))
        self.assertNotIn("debounce_key", second)
        self.assertEqual(sent[1]["job"]["concurrency_policy"], "cancel_newest")

    def test_submit_retried_only_when_it_names_its_job(self):
        self.srv.answers = [self.unavailable, {"result": {"job": {"id": 4}, "existing": False}}]
        self.assertEqual(self.client.submit_job("print(1)", unique_key="k", unique_ttl=60)["job"]["id"], 4)
        self.assertEqual(len(self.srv.seen), 2)
        sent = json.loads(self.srv.seen[1][1])["params"]
        self.assertEqual((sent["unique_key"], sent["unique_ttl_seconds"]), ("k", 60))
        self.srv.answers = [self.unavailable]
        with self.assertRaises(hc.Unavailable):
            self.client.submit_job("print(1)")
        self.assertEqual(len(self.srv.seen), 3)

    def test_priority_sent_as_given(self):
        self.srv.answers = [{"result": {"job": {"id": 4}, "existing": False}}, {"result": {"items": []}}]
        self.client.submit_job("print(1)", priority=1)
        self.assertEqual(json.loads(self.srv.seen[0][1])["params"]["job"]["priority"], 1)
        self.client.submit_jobs([{"script": "print(2)", "priority": 5, "concurrency_key": "cust-7", "concurrency_limit": 2},
                                 {"script": "print(3)"}])
        jobs = json.loads(self.srv.seen[1][1])["params"]["jobs"]
        self.assertEqual([j["job"].get("priority") for j in jobs], [5, None])
        self.assertEqual((jobs[0]["job"]["concurrency_key"], jobs[0]["job"]["concurrency_limit"]), ("cust-7", 2))
        self.assertNotIn("concurrency_key", jobs[1]["job"])

    def test_rate_limit_retried_for_any_call(self):
        self.srv.answers = [{"error": {"code": -32029, "message": "too many", "data": {"retry_after_ms": 10}}},
                            {"result": {"id": 9}}]
        self.assertEqual(self.client.create_job("print(1)")["id"], 9)
        self.assertEqual(self.slept, [0.01])

    def test_typed_errors(self):
        self.srv.answers = [{"error": {"code": -32602, "message": "invalid params: job.timeout", "data": {"field": "job.timeout"}}},
                            {"error": {"code": -32004, "message": "flow 8 not found"}}]
        with self.assertRaises(hc.InvalidParams) as cm:
            self.client.create_job("x", timeout=-1)
        self.assertEqual(cm.exception.field, "job.timeout")
        with self.assertRaises(hc.NotFound):
            self.client.load_flow(8)

    def test_unreachable_gives_up_after_the_retries(self):
        self.client.url = "http://127.0.0.1:1/"
        self.client.retries = 2
        with self.assertRaises(hc.TransportError):
            self.client.load_flow(1)
        self.assertEqual(len(self.slept), 2)


class FlowAPI(http.server.BaseHTTPRequestHandler):
    """Answers job.create_batch calls and job.create batches (each job gets the next
    id; a job that names a dependency not created before is recorded in ``bad``; a job
    whose script is "refuse" gets an error of its own), flow.create and flow.start;
    refuses the first ``limited`` batches whole with -32029, as the rate limit does;
    without ``has_create_batch``, job.create_batch is an unknown method (-32601).
    job.check_batch (unknown without ``has_check_batch``) stores nothing and refuses a
    job whose function names executor "nosuch", as a server none of whose runners
    announced it does; the jobs it checked are in ``checked``."""

    def create(self, job):
        srv = self.server
        if job.get("script") == "refuse":
            return None
        for d in job.get("depends", []):
            if d not in srv.made:
                srv.bad.append((job["script"], d))
        srv.made.append(len(srv.made) + 1)
        return dict(job, id=len(srv.made))

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        srv = self.server
        reqs = body if isinstance(body, list) else [body]
        srv.batches.append([r["method"] for r in reqs])
        out = []
        for r in reqs:
            if srv.limited > 0:
                out.append({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32029, "message": "too many", "data": {"retry_after_ms": 5}}})
                continue
            p = r["params"]
            if r["method"] == "job.create_batch" and not srv.has_create_batch:
                out.append({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32601, "message": "method not found"}})
                continue
            if r["method"] in ("flow.begin", "flow.abort") and not srv.has_begin:
                out.append({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32601, "message": "method not found"}})
                continue
            if r["method"] == "flow.begin":
                srv.begun = p["jobs"]
                res = {"flow_id": 9, "caller_id": 3, "first_job_id": 100, "last_job_id": 100 + p["jobs"] - 1,
                       "expires_at_ms": 0, "ttl_seconds": p.get("ttl_seconds", 60), "max_jobs": 100000}
                out.append({"jsonrpc": "2.0", "id": r["id"], "result": res})
                continue
            if r["method"] == "flow.abort":
                srv.aborted.append(p["id"])
                out.append({"jsonrpc": "2.0", "id": r["id"], "result": {"deleted": len(srv.staged)}})
                continue
            if r["method"] == "job.create_batch" and p.get("flow_id"):
                items = []
                for job in p["jobs"]:
                    if job.get("script") == "refuse":
                        items.append({"error": {"code": -32602, "message": "refused", "data": {"field": "script"}}})
                        continue
                    for d in job.get("depends", []):
                        if not 100 <= d < 100 + srv.begun:
                            srv.bad.append((job["script"], d))
                    srv.staged.append(job["id"])
                    items.append({"job": dict(job, flow_id=p["flow_id"])})
                out.append({"jsonrpc": "2.0", "id": r["id"], "result": {"items": items}})
                continue
            if r["method"] == "job.check_batch" and not srv.has_check_batch:
                out.append({"jsonrpc": "2.0", "id": r["id"], "error": {"code": -32601, "message": "method not found"}})
                continue
            if r["method"] == "job.check_batch":
                srv.checked.extend(p["jobs"])
                res = {"items": [{"error": {"code": -32602, "message": 'no runner in context 1 has executor "nosuch"',
                                            "data": {"field": "job.function_name"}}}
                                 if job.get("function_name", "").startswith("nosuch#") else {"job": job} for job in p["jobs"]]}
            elif r["method"] == "job.create_batch":
                items = []
                for job in p["jobs"]:
                    made = self.create(job)
                    items.append({"job": made} if made else {"error": {"code": -32602, "message": "refused", "data": {"field": "script"}}})
                res = {"items": items}
            elif r["method"] == "job.create":
                res = self.create(p["job"])
            elif r["method"] == "flow.create":
                srv.flow_jobs = p["flow"]["jobs"]
                res = dict(p["flow"], id=9)
            else:
                res = {"id": p["id"], "status": "started"}
            out.append({"jsonrpc": "2.0", "id": r["id"], "result": res})
        if srv.limited > 0:
            srv.limited -= 1
        raw = json.dumps(out if isinstance(body, list) else out[0]).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


class SubmitFlowTest(unittest.TestCase):
    def setUp(self):
        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FlowAPI)
        self.srv.batches, self.srv.made, self.srv.bad, self.srv.limited, self.srv.flow_jobs = [], [], [], 0, None
        self.srv.has_create_batch, self.srv.has_check_batch, self.srv.checked = True, True, []
        self.srv.has_begin, self.srv.begun, self.srv.staged, self.srv.aborted = False, 0, [], []
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()
        self.client = hc.Client(f"http://127.0.0.1:{self.srv.server_address[1]}/", actor=3, key=Ed25519PrivateKey.generate())
        self.slept = []
        self.client.sleep = self.slept.append

    def tearDown(self):
        self.srv.shutdown()
        self.srv.server_close()

    def wide(self):
        wide = [{"name": f"a{i}", "type": "sh", "script": f"a{i}"} for i in range(30)]
        return [{"name": "c", "type": "sh", "script": "c", "depends": ["b"]}] + wide + \
               [{"name": "b", "type": "sh", "script": "b", "depends": [w["name"] for w in wide]}]

    def test_a_level_in_one_call_each_job_after_its_dependencies(self):
        self.client.BATCH = 20
        flow = self.client.submit_flow(self.wide())
        self.assertEqual(flow["status"], "started")
        self.assertEqual(self.srv.bad, [], "a job was created before a dependency")
        creates = [b for b in self.srv.batches if b[0].startswith("job.create")]
        self.assertEqual(creates, [["job.create_batch"]] * 4, "one job.create_batch call per part of a level")
        self.assertEqual(len(self.srv.made), 32)
        self.assertEqual(len(self.srv.flow_jobs), 32)
        self.assertEqual(self.srv.flow_jobs[0], 32, "the flow lists the jobs in the order given (c first, created last)")

    def test_without_create_batch_a_level_in_one_batch(self):
        self.srv.has_create_batch = False
        self.client.BATCH = 20
        self.client.submit_flow(self.wide())
        self.assertEqual(self.srv.bad, [], "a job was created before a dependency")
        creates = [b for b in self.srv.batches if b[0] == "job.create"]
        self.assertEqual([len(b) for b in creates], [20, 10, 1, 1], "the 30 independent jobs in batches of 20, then b, then c")
        self.assertEqual([b for b in self.srv.batches if b[0] == "job.create_batch"], [["job.create_batch"]], "asked once")

    def test_a_flow_created_as_a_unit(self):
        self.srv.has_begin = True
        self.client.BATCH = 20
        seen = []
        flow = self.client.submit_flow(self.wide(), ttl_seconds=7, progress=lambda n, total: seen.append((n, total)))
        self.assertEqual(flow["status"], "started")
        self.assertEqual(self.srv.begun, 32, "flow.begin sizes the flow first")
        self.assertEqual(self.srv.bad, [], "a dependency outside the begun ids")
        self.assertEqual(sorted(self.srv.staged), list(range(100, 132)), "every job gets an id flow.begin gave")
        self.assertEqual(sorted(self.srv.flow_jobs), list(range(100, 132)))
        self.assertEqual(self.srv.flow_jobs[0], 131, "the flow lists the jobs in the order given (c, last in dependency order)")
        self.assertEqual(seen, [(20, 32), (32, 32)])
        self.assertEqual(self.srv.aborted, [])

    def test_a_refused_job_aborts_the_creation(self):
        self.srv.has_begin = True
        with self.assertRaises(hc.InvalidParams) as e:
            self.client.submit_flow([{"name": "ok", "type": "sh", "script": "a"}, {"name": "bad", "type": "sh", "script": "refuse"}])
        self.assertIn("job 'bad' of the flow: refused", str(e.exception))
        self.assertEqual(self.srv.aborted, [9], "flow.abort deletes what was made")
        self.assertIsNone(self.srv.flow_jobs, "no flow made")

    def test_a_refused_job_names_itself(self):
        with self.assertRaises(hc.InvalidParams) as e:
            self.client.submit_flow([{"name": "ok", "type": "sh", "script": "a"}, {"name": "bad", "type": "sh", "script": "refuse"}])
        self.assertIn("job 'bad' of the flow: refused", str(e.exception))
        self.assertIsNone(self.srv.flow_jobs, "no flow made")

    def test_the_server_checks_every_job_before_the_first_is_created(self):
        jobs = [{"name": "measure", "type": "sh", "script": "a"}, {"name": "other", "type": "sh", "script": "b"},
                {"name": "notify", "function": "nosuch#send", "depends": ["measure"]}]
        with self.assertRaises(hc.InvalidParams) as e:
            self.client.submit_flow(jobs)
        self.assertIn("job 'notify' of the flow: no runner in context 1 has executor \"nosuch\"", str(e.exception))
        self.assertEqual((self.srv.made, self.srv.flow_jobs), ([], None), "nothing created")
        self.assertEqual([j.get("depends") for j in self.srv.checked], [None] * 3, "each job checked, without dependencies")
        jobs[2]["function"] = "mailer#send"
        self.client.submit_flow(jobs)
        self.assertEqual((len(self.srv.made), len(self.srv.flow_jobs), self.srv.bad), (3, 3, []))

    def test_without_check_batch_each_job_is_checked_as_it_is_created(self):
        self.srv.has_check_batch = False
        flow = self.client.submit_flow([{"name": "a", "type": "sh", "script": "a"},
                                        {"name": "b", "function": "mailer#send", "depends": ["a"]}])
        self.assertEqual((flow["status"], len(self.srv.made)), ("started", 2))

    def test_create_jobs_returns_each_job_or_its_error(self):
        got = self.client.create_jobs([{"script": "a", "script_type": "sh"}, {"script": "refuse", "script_type": "sh"},
                                       {"function": "go#noop", "depends": [1]}])
        self.assertEqual(got[0]["id"], 1)
        self.assertIsInstance(got[1], hc.InvalidParams)
        self.assertEqual(got[2]["function_name"], "go#noop")
        self.assertEqual(got[2]["depends"], [1])

    def test_a_rate_limited_batch_is_sent_again(self):
        self.srv.limited = 1
        self.client.submit_flow([{"name": "a", "type": "sh", "script": "a"}, {"name": "b", "type": "sh", "script": "b"}])
        self.assertEqual(self.slept, [0.005])
        self.assertEqual(len(self.srv.made), 2, "each job created once")


class FlowSpecTest(unittest.TestCase):
    def test_dependency_order(self):
        order = hc._topological([{"name": "d", "depends": ["b", "c"]}, {"name": "b", "depends": ["a"]},
                                 {"name": "c", "depends": ["a"]}, {"name": "a"}])
        names = [s["name"] for s in order]
        self.assertLess(names.index("a"), names.index("b"))
        self.assertLess(names.index("c"), names.index("d"))

    def test_cycle_and_unknown_dependency(self):
        with self.assertRaisesRegex(ValueError, "cycle: a -> b -> a"):
            hc._topological([{"name": "a", "depends": ["b"]}, {"name": "b", "depends": ["a"]}])
        with self.assertRaisesRegex(ValueError, "depends on 'z'"):
            hc._topological([{"name": "a", "depends": ["z"]}])


if __name__ == "__main__":
    unittest.main()
