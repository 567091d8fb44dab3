"""Builds of the server compared so that the machine's drift cannot decide it: the floor and the
builds take turns, ROUNDS rounds of PERF_SECONDS s of one workload at CONNECTIONS connections (wrk
-t2 above 2 connections). Prints each round's throughput and CPU per request, and per round each
build's ratio to the first and every build's ratio to the floor.
    python3 scripts/perf/ab.py BEFORE AFTER [MORE...] [echo|list50|progress10|submit+poll]
Each build is a `target/release/examples/perf_server` copied aside, optionally named `label=path`
(unnamed, two builds are `before` and `after`, more are `build1`, `build2`, ...); for echo a build's
`target/release/local` will do (always the local run), but list50's filler tools and progress10
are perf_server's. The floor is
`target/release/examples/floor` (scripts/perf.sh builds it). submit+poll needs Redis at
PERF_REDIS_URL (redis://127.0.0.1:6379), and runs with the harness's job settings and a key prefix of
its own, deleted at the end. Environment: CONNECTIONS
(64), ROUNDS (3), PERF_SECONDS (4), PERF_EDGE (local; `vercel` serves every build through the
`vercel_runtime` edge, as api/mcp.rs does), PERF_BATCH (unset; 1 runs wrk under SCHED_BATCH, as the
harness's `echo-batch` row; needs chrt from util-linux). The order in which they take their turns
moves by one each round, so that none always follows the same one. Needs wrk."""
import json, os, statistics, sys, tempfile, importlib.util
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
WORKLOADS = ("echo", "list50", "progress10", "submit+poll")
workloads = [a for a in sys.argv[1:] if a in WORKLOADS]
named = [a.split("=", 1) if "=" in a else [None, a] for a in sys.argv[1:] if a not in WORKLOADS]
if len(named) < 2 or len(workloads) > 1:
    sys.exit(__doc__)
default_labels = ["before", "after"] if len(named) == 2 else [f"build{i}" for i in range(1, len(named) + 1)]
builds = {label or default: path for (label, path), default in zip(named, default_labels)}
if len(builds) < len(named) or "floor" in builds:
    sys.exit("each build needs a label of its own, and not `floor`")
for path in builds.values():
    if not os.path.isfile(path):
        sys.exit(f"{path}: no such build")
workload = workloads[0] if workloads else "echo"
connections = int(os.environ.get("CONNECTIONS", "64"))
rounds = int(os.environ.get("ROUNDS", "3"))
run.SECONDS = int(os.environ.get("PERF_SECONDS", "4"))
floor_bin = os.path.join(run.ROOT, "target/release/examples/floor")
work = tempfile.mkdtemp()
requests = {
    "echo": ("tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": run.META}, "echo"),
    "list50": ("tools/list", {"_meta": run.META}, None),
    "progress10": ("tools/call", {"name": "progress10", "arguments": {}, "_meta": dict(run.META, progressToken="p")}, "progress10"),
}
probe = lambda port: run.post(port, "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": run.META}, name="echo")
jobs = workload == "submit+poll"
env = dict(run.server_env(f"perf-ab:{os.getpid()}", jobs), PERF_EDGE=os.environ.get("PERF_EDGE", "local"))
submit = ("tools/call", {"name": "submit_job", "arguments": {"steps": 1}, "_meta": run.META}, "submit_job")

def files(port):
    """The workload's request files; a poll needs a handle the server under test issued."""
    if not jobs:
        method, params, name = requests[workload]
        return [run.request_file(work, workload, method, params, name=name)]
    method, params, name = submit
    handle = json.loads(run.post(port, method, params, name=name)["result"]["content"][0]["text"])["jobId"]
    poll = {"name": "get_job_status", "arguments": {"jobId": handle}, "_meta": run.META}
    return [run.request_file(work, "submit", method, params, name=name),
            run.request_file(work, "poll", "tools/call", poll, name="get_job_status")]

# The floor answers anything with its canned body; it is sent the workload's request, or for
# jobs the echo call.
floor_files = files(None) if not jobs else [run.request_file(work, "floor", *requests["echo"][:2], name="echo")]
servers = {"floor": floor_bin, **builds}
results = {k: [] for k in servers}
order = list(servers.items())
for round_number in range(rounds):
    shift = round_number % len(order)
    for label, binary in order[shift:] + order[:shift]:
        port = run.free_port(); process = run.spawn(binary, port, {} if label == "floor" else env); run.wait_ready(port, probe)
        sent = floor_files if label == "floor" else files(port)
        results[label].append(run.measure(process, port, sent, connections, os.environ.get("PERF_BATCH") == "1")); process.kill(); process.wait()
        if jobs and label != "floor":
            # Every build starts from an empty store: the tens of thousands of records one run
            # leaves would otherwise slow the next one's writes.
            run.forget_redis_keys(env["MCP_REDIS_PREFIX"])
for label, rows in results.items():
    print(f"{label:7}", " ".join(f"{x['rps']:.0f} req/s {x['cpu_us']:.1f} µs p99 {x['p99_us']:.0f}" for x in rows))
ratio = lambda key, a, b: [x[key] / y[key] for x, y in zip(results[a], results[b])]
first, *others = builds
for key in ("rps", "cpu_us"):
    for label in others:
        print(f"{key}: {label}/{first}", " ".join(f"{r:.2f}" for r in ratio(key, label, first)),
              f"| median {statistics.median(ratio(key, label, first)):.2f}")
    for label in builds:
        print(f"{key}: {label}/floor", " ".join(f"{r:.2f}" for r in ratio(key, label, "floor")))
