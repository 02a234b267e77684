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
