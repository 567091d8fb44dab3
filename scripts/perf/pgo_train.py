"""The training run of a profile-guided build (scripts/pgo.sh): the harness's workloads, sent to a
profiling build of perf_server on both edges, so that the profile counts what production traffic
runs. Each server is stopped with SIGTERM and exits normally, which is when it writes its counts
(LLVM_PROFILE_FILE); a server that wrote none fails the run.
    python3 scripts/perf/pgo_train.py BINARIES_DIR PROFILE_DIR
BINARIES_DIR holds the profiling perf_server and mint_token; PROFILE_DIR receives one .profraw per
server. submit+poll runs when Redis answers at PERF_REDIS_URL (redis://127.0.0.1:6379); its keys
are deleted afterwards."""
import glob, json, os, sys, tempfile, importlib.util
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
if len(sys.argv) != 3:
    sys.exit(__doc__)
bins, profiles = sys.argv[1], sys.argv[2]
perf_bin = os.path.join(bins, "perf_server")
SECONDS, CONNECTIONS = 3, 16
META = run.META
work = tempfile.mkdtemp()
use_redis = run.redis_up()
prefix = f"perf-pgo:{os.getpid()}"
# The harness's settings (scripts/perf/run.py), so that the same code paths run.
base_env = {"MCP_STATE_SECRET": "perf=0123456789abcdef0123456789abcdef", "MCP_JOB_STEP_MS": "0",
            "MCP_JOB_CAP_ANONYMOUS": "1000000", "MCP_JOB_CAP_VERIFIED": "1000000", "MCP_MAX_JOBS_TOTAL": "10000000",
            "MCP_JOB_SHARE": "10000000", "MCP_JOBS_PER_MINUTE": "1000000", "MCP_REDIS_PREFIX": prefix,
            "MCP_REQUEST_STATE_SINGLE_USE": "off",
            "LLVM_PROFILE_FILE": os.path.join(profiles, "perf_server-%p-%m.profraw")}
if use_redis:
    base_env["REDIS_URL"] = run.REDIS_URL
with open(os.path.join(run.ROOT, "tests/fixtures/jwks.json")) as f:
    jwks = f.read()
auth_env = dict(base_env, MCP_AUTH_MODE="required", MCP_JWKS=jwks, MCP_AUTH_ISSUER=run.ISSUER, MCP_RESOURCE_URL=run.RESOURCE)
echo_params = {"name": "echo", "arguments": {"message": "hello"}, "_meta": META}
echo_probe = lambda port: run.post(port, "tools/call", echo_params, name="echo")

def serve(env, probe, workloads):
    """Starts a profiling server, sends it each workload (a function of its port returning request
    files), stops it with SIGTERM, and checks that it wrote its profile."""
    before = set(glob.glob(os.path.join(profiles, "*.profraw")))
    port = run.free_port(); server = run.spawn(perf_bin, port, env); run.wait_ready(port, probe)
    try:
        for name, files in workloads:
            run.wrk(port, files(port), SECONDS, CONNECTIONS)
            print(f"  {env.get('PERF_EDGE')} {name}", flush=True)
    finally:
        server.terminate()
        code = server.wait(timeout=60)
    written = set(glob.glob(os.path.join(profiles, "*.profraw"))) - before
    if code != 0 or not written:
        sys.exit(f"the profiling server exited with {code} and wrote {len(written)} profiles")

def mrtr(port):
    first = run.post(port, "tools/call", {"name": "confirm", "arguments": {}, "_meta": META}, name="confirm")["result"]
    retry = {"name": "confirm", "arguments": {}, "_meta": META,
             "inputResponses": {"ok": {"action": "accept", "content": {"ok": True}}}, "requestState": first["requestState"]}
    return [run.request_file(work, "mrtr1", "tools/call", {"name": "confirm", "arguments": {}, "_meta": META}, name="confirm"),
            run.request_file(work, "mrtr2", "tools/call", retry, name="confirm")]

def submit_poll(port):
    submit = {"name": "submit_job", "arguments": {"steps": 1}, "_meta": META}
    handle = json.loads(run.post(port, "tools/call", submit, name="submit_job")["result"]["content"][0]["text"])["jobId"]
    poll = {"name": "get_job_status", "arguments": {"jobId": handle}, "_meta": META}
    return [run.request_file(work, "submit", "tools/call", submit, name="submit_job"),
            run.request_file(work, "poll", "tools/call", poll, name="get_job_status")]

token = run.subprocess.run([os.path.join(bins, "mint_token"), os.path.join(run.ROOT, "tests/fixtures/rsa_private.pem"), "test-rsa-1",
                            run.ISSUER, run.RESOURCE, "perf-user", "mcp:read mcp:write", "3600"],
                           check=True, capture_output=True, text=True).stdout.strip()
bearer = {"Authorization": f"Bearer {token}"}
progress = {"name": "progress10", "arguments": {}, "_meta": dict(META, progressToken="p")}
workloads = [
    ("echo", lambda port: [run.request_file(work, "echo", "tools/call", echo_params, name="echo")]),
    ("list50", lambda port: [run.request_file(work, "list", "tools/list", {"_meta": META})]),
    ("progress10", lambda port: [run.request_file(work, "progress", "tools/call", progress, name="progress10")]),
    ("mrtr", mrtr),
] + ([("submit+poll", submit_poll)] if use_redis else [])
try:
    for edge in ["local", "vercel"]:
        serve(dict(base_env, PERF_EDGE=edge), echo_probe, workloads)
        serve(dict(auth_env, PERF_EDGE=edge), lambda p: run.post(p, "tools/list", {"_meta": META}, extra=bearer),
              [("list50+jwt", lambda port: [run.request_file(work, "authlist", "tools/list", {"_meta": META}, extra=bearer)])])
finally:
    if use_redis:
        run.forget_redis_keys(prefix)
if not use_redis:
    print("Redis was not reachable: the job path is not in the profile", file=sys.stderr)
