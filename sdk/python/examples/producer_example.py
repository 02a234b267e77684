#!/usr/bin/env python3
"""A producer: submits a flow, watches it, waits for it, runs a job, submits one —
every request signed by the actor's Ed25519 key (hero_client, docs/sdk-python.md).

Configured as heroctl is, from the environment:

    export HERO_TLS_CA=~/.config/hero/ca.pem      # the stack's CA (README, Quickstart); the URL: HERO_API_URL,
                                                  # else https://127.0.0.1:$HERO_HTTP_PORT (9652)/
    export HERO_ACTOR=1 HERO_CONTEXT=1      # the key: ~/.config/hero/keys/actor-1.pem, or HERO_KEY
    python3 sdk/python/examples/producer_example.py

The actor needs the admin role in the context (it creates jobs) and a runner serving
sh and python (README, Quickstart). Exits 0 when every step gave what it should.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import hero_client as hc  # noqa: E402

# A diamond, as examples/diamond.yaml: a; b and c after a; d after both. Each job
# publishes KEY=VALUE results; its dependents read them as HERO_DEP_<job id>_<KEY>.
FLOW = [
    {"name": "a", "type": "sh", "script": 'echo "SEED=21" >> "$HERO_RESULT_FILE"'},
    {"name": "b", "type": "python", "depends": ["a"], "script": (
        "import os\n"
        "seed = next(v for k, v in os.environ.items() if k.endswith('_SEED'))\n"
        "open(os.environ['HERO_RESULT_FILE'], 'a').write(f'DOUBLED={int(seed) * 2}\\n')\n")},
    {"name": "c", "type": "sh", "depends": ["a"], "script": (
        "for v in $(env | grep '^HERO_DEP_.*_SEED=' | cut -d= -f2); do s=$v; done\n"
        'echo "SQUARED=$((s * s))" >> "$HERO_RESULT_FILE"\n')},
    {"name": "d", "type": "python", "depends": ["b", "c"], "retries": 1, "script": (
        "import os\n"
        "deps = {k: v for k, v in os.environ.items() if k.startswith('HERO_DEP_')}\n"
        "total = sum(int(v) for k, v in deps.items() if k.endswith(('_DOUBLED', '_SQUARED')))\n"
        "print(f'{os.environ[\"GREETING\"]}: total {total}')\n"
        "open(os.environ['HERO_RESULT_FILE'], 'a').write(f'TOTAL={total}\\n')\n")},
]


def main() -> int:
    client = hc.Client.from_env()

    # 1. submit: the jobs are created in dependency order, then the flow, then started.
    flow = client.submit_flow(FLOW, env={"GREETING": "hello"})
    print(f"submitted flow {flow['id']} with jobs {flow['jobs']}")

    # 2. watch: its events as they happen, until the flow ends.
    for ev in client.watch_flow(flow["id"]):
        print(f"event {ev['type']} job={ev.get('job_id', '-')} status={ev.get('status', '')}")

    # 3. wait: the flow as it ended, with its results ("<job id>.<KEY>").
    done = client.wait_flow(flow["id"], timeout=120, check=True)
    last = flow["jobs"][-1]
    total = done["result"].get(f"{last}.TOTAL")
    print(f"flow {done['id']} {done['status']}: TOTAL={total}")
    if total != "483":
        print(f"unexpected result: {done['result']}", file=sys.stderr)
        return 1

    # 4. run: one job, waited for; its log holds what it printed.
    job = client.run_job("print(6*7)", script_type="python", timeout=60, check=True)
    out = client.job_logs(job["id"])["logs"].strip()
    print(f"job {job['id']} {job['status']}: {out}")
    if out != "42":
        return 1

    # 5. submit: fire and forget; a unique key makes a second submission return the
    # first job instead of another. Then wait for it.
    first = client.submit_job("print('submitted')", script_type="python", unique_key=f"example-{flow['id']}", unique_ttl=600)
    again = client.submit_job("print('submitted')", script_type="python", unique_key=f"example-{flow['id']}", unique_ttl=600)
    if again["job"]["id"] != first["job"]["id"] or not again["existing"]:
        print(f"the unique key did not hold: {first} then {again}", file=sys.stderr)
        return 1
    sub = client.wait_job(first["job"]["id"], timeout=60, check=True)
    print(f"submitted job {sub['id']} {sub['status']} (submitted twice, one job)")

    # 6. typed errors: a flow that does not exist.
    try:
        client.load_flow(999999)
    except hc.NotFound as e:
        print(f"not found, as expected: {e}")
    else:
        print("flow 999999 exists?", file=sys.stderr)
        return 1
    print("producer example: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
