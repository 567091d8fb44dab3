"""What tracing costs, measured so that the machine's drift cannot decide it: the floor, the
server with tracing off and the same binary with tracing on (every request sampled, every span
exported over OTLP/HTTP to a second floor process, which accepts every POST) take turns, five
rounds of 5 s of echo on two connections, the order moving by one each round. Prints CPU per request of each and on/off per round.
    python3 scripts/perf/tracing.py            (the local run; EDGE=vercel for api/mcp.rs's path)
Needs wrk and the release examples (scripts/perf.sh builds them)."""
import os, statistics, tempfile, importlib.util
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
bins = os.path.join(run.ROOT, "target/release/examples")
floor_bin, perf = os.path.join(bins, "floor"), os.path.join(bins, "perf_server")
run.SECONDS = 5
work = tempfile.mkdtemp()
echo = run.request_file(work, "echo", "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": run.META}, name="echo")
sink_port = run.free_port(); sink = run.spawn(floor_bin, sink_port, {})
base = {"MCP_STATE_SECRET": "perf=0123456789abcdef0123456789abcdef", "PERF_EDGE": os.environ.get("EDGE", "local")}
servers = {"floor": (floor_bin, {}), "off": (perf, base), "on": (perf, dict(base, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink_port}"))}
probe = lambda port: run.post(port, "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": run.META}, name="echo")
res = {k: [] for k in servers}
order = list(servers.items())
for r in range(5):
    for name, (b, env) in order[r % len(order):] + order[:r % len(order)]:
        port = run.free_port(); p = run.spawn(b, port, env); run.wait_ready(port, probe)
        res[name].append(run.measure(p, port, [echo])); p.kill(); p.wait()
sink.kill()
for name, rows in res.items():
    print(name, " ".join(f"{x['rps']:.0f}/{x['cpu_us']:.1f}" for x in rows))
print("on/off cpu", " ".join(f"{a['cpu_us']/b['cpu_us']-1:+.1%}" for a, b in zip(res["on"], res["off"])))
print("median of the rounds", f"{statistics.median(a['cpu_us']/b['cpu_us'] - 1 for a, b in zip(res['on'], res['off'])):+.1%}")
