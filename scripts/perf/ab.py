"""Two builds of the server compared so that the machine's drift cannot decide it: the floor and
the two binaries take turns, ROUNDS rounds of PERF_SECONDS s of one workload at CONNECTIONS
connections (wrk -t2 above 2 connections). Prints each round's throughput and CPU per request,
and per round the second build's ratio to the first and both ratios to the floor.
    python3 scripts/perf/ab.py BEFORE AFTER [echo|list50|progress10]
BEFORE and AFTER are each build's `target/release/examples/perf_server`, copied aside (for echo
and list50 its `target/release/local` will do: progress10 is a perf_server tool); the floor is
`target/release/examples/floor` (scripts/perf.sh builds it). Environment: CONNECTIONS
(64), ROUNDS (3), PERF_SECONDS (4). Needs wrk."""
import os, statistics, sys, tempfile, importlib.util
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
if len(sys.argv) < 3:
    sys.exit(__doc__)
before, after = sys.argv[1], sys.argv[2]
workload = sys.argv[3] if len(sys.argv) > 3 else "echo"
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
method, params, name = requests[workload]
request = run.request_file(work, workload, method, params, name=name)
probe = lambda port: run.post(port, "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": run.META}, name="echo")
env = {"MCP_STATE_SECRET": "perf=0123456789abcdef0123456789abcdef"}
servers = {"floor": floor_bin, "before": before, "after": after}
results = {k: [] for k in servers}
for _ in range(rounds):
    for label, binary in servers.items():
        port = run.free_port(); process = run.spawn(binary, port, {} if label == "floor" else env); run.wait_ready(port, probe)
        results[label].append(run.measure(process, port, [request], connections)); process.kill(); process.wait()
for label, rows in results.items():
    print(f"{label:7}", " ".join(f"{x['rps']:.0f} req/s {x['cpu_us']:.1f} µs p99 {x['p99_us']:.0f}" for x in rows))
ratio = lambda key, a, b: [x[key] / y[key] for x, y in zip(results[a], results[b])]
for key in ("rps", "cpu_us"):
    print(f"{key}: after/before", " ".join(f"{r:.2f}" for r in ratio(key, "after", "before")),
          "| before/floor", " ".join(f"{r:.2f}" for r in ratio(key, "before", "floor")),
          "| after/floor", " ".join(f"{r:.2f}" for r in ratio(key, "after", "floor")),
          f"| median after/before {statistics.median(ratio(key, 'after', 'before')):.2f}")
