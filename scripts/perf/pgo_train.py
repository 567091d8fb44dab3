"""The training run of a profile-guided build (scripts/pgo.sh): requests shaped like the harness's
workloads, sent to profiling builds of the shipped executables, `mcp` (`api/mcp.rs`, under
`vercel_runtime`) and `local` (the local run), so that the profile counts what production traffic
runs in the very code a deploy builds. (A profile taken from an example does not fit: building
an example turns on dev-dependency features, and a dependency built with other features is
another crate to the profile.) Each server is stopped with SIGTERM and exits normally, which is
when it writes its counts (LLVM_PROFILE_FILE); a server that wrote none fails the run.
    python3 scripts/perf/pgo_train.py BINARIES_DIR PROFILE_DIR
BINARIES_DIR holds the profiling `mcp` and `local`; PROFILE_DIR receives one .profraw per server.
The workloads: echo, tools/list, tools/list with a bearer token (RS256, signed here with openssl
from the test fixture key), and submit_job with get_job_status when Redis answers at
PERF_REDIS_URL (redis://127.0.0.1:6379; its keys are deleted afterwards)."""
import base64, glob, json, os, subprocess, sys, tempfile, time, importlib.util
here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)
if len(sys.argv) != 3:
    sys.exit(__doc__)
bins, profiles = sys.argv[1], sys.argv[2]
SECONDS, CONNECTIONS = 3, 16
META = run.META
work = tempfile.mkdtemp()
use_redis = run.redis_up()
prefix = f"perf-pgo:{os.getpid()}"
base_env = run.server_env(prefix, use_redis)
with open(os.path.join(run.ROOT, "tests/fixtures/jwks.json")) as f:
    jwks = f.read()
auth_env = dict(base_env, MCP_AUTH_MODE="required", MCP_JWKS=jwks, MCP_AUTH_ISSUER=run.ISSUER, MCP_RESOURCE_URL=run.RESOURCE)
echo_params = {"name": "echo", "arguments": {"message": "hello"}, "_meta": META}
echo_probe = lambda port: run.post(port, "tools/call", echo_params, name="echo")

def b64(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

def token():
    """An RS256 token the fixture JWKS verifies (key `test-rsa-1`), valid for an hour."""
    now = int(time.time())
    header = b64(json.dumps({"alg": "RS256", "typ": "JWT", "kid": "test-rsa-1"}).encode())
    claims = b64(json.dumps({"iss": run.ISSUER, "aud": run.RESOURCE, "sub": "pgo-user", "scope": "mcp:read mcp:write",
                             "iat": now, "exp": now + 3600}).encode())
    signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", os.path.join(run.ROOT, "tests/fixtures/rsa_private.pem")],
                               input=f"{header}.{claims}".encode(), check=True, capture_output=True).stdout
    return f"{header}.{claims}.{b64(signature)}"

def serve(binary, env, probe, workloads):
    """Starts a profiling server, sends it each workload (a function of its port returning request
    files), stops it with SIGTERM, and checks that it exited normally and wrote its profile."""
    before = set(glob.glob(os.path.join(profiles, "*.profraw")))
    env = dict(env, LLVM_PROFILE_FILE=os.path.join(profiles, f"{os.path.basename(binary)}-%p-%m.profraw"))
    port = run.free_port(); server = run.spawn(binary, port, env); run.wait_ready(port, probe)
    try:
        for name, files in workloads:
            run.wrk(port, files(port), SECONDS, CONNECTIONS)
            print(f"  {os.path.basename(binary)} {name}", flush=True)
    finally:
        server.terminate()
        code = server.wait(timeout=60)
    written = set(glob.glob(os.path.join(profiles, "*.profraw"))) - before
    if code != 0 or not written:
        sys.exit(f"{binary} exited with {code} and wrote {len(written)} profiles")

def submit_poll(port):
    submit = {"name": "submit_job", "arguments": {"steps": 1}, "_meta": META}
    handle = json.loads(run.post(port, "tools/call", submit, name="submit_job")["result"]["content"][0]["text"])["jobId"]
    poll = {"name": "get_job_status", "arguments": {"jobId": handle}, "_meta": META}
    return [run.request_file(work, "submit", "tools/call", submit, name="submit_job"),
            run.request_file(work, "poll", "tools/call", poll, name="get_job_status")]

bearer = {"Authorization": f"Bearer {token()}"}
workloads = [
    ("echo", lambda port: [run.request_file(work, "echo", "tools/call", echo_params, name="echo")]),
    ("tools/list", lambda port: [run.request_file(work, "list", "tools/list", {"_meta": META})]),
] + ([("submit+poll", submit_poll)] if use_redis else [])
authed = [("tools/list with a token", lambda port: [run.request_file(work, "authlist", "tools/list", {"_meta": META}, extra=bearer)])]
try:
    for binary in ["mcp", "local"]:
        path = os.path.join(bins, binary)
        serve(path, base_env, echo_probe, workloads)
        serve(path, auth_env, lambda p: run.post(p, "tools/list", {"_meta": META}, extra=bearer), authed)
finally:
    if use_redis:
        run.forget_redis_keys(prefix)
if not use_redis:
    print("Redis was not reachable: the job path is not in the profile", file=sys.stderr)
