#!/usr/bin/env python3
"""The performance harness: every figure as a ratio to a canned-response floor measured in the
same run. Builds release binaries, then for the floor, the local run and the vercel_runtime edge
(one server at a time): idle and peak RSS, and per workload
requests/s, p50/p99 latency and server CPU microseconds per request, using wrk on loopback
(2 connections, 1 s warm-up, then PERF_SECONDS); then cold starts, the three taking turns
(median of 9 each). Writes docs/performance.md's latest-run
section and appends a history row."""

import datetime, glob, json, os, re, shutil, socket, statistics, subprocess, sys, tempfile, threading, time, urllib.parse, urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SECONDS = int(os.environ.get("PERF_SECONDS", "5"))
CONNECTIONS = int(os.environ.get("PERF_CONNECTIONS", "2"))
REDIS_URL = os.environ.get("PERF_REDIS_URL", "redis://127.0.0.1:6379")
TICK_US = 1_000_000 / os.sysconf("SC_CLK_TCK")
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}}}
ISSUER, RESOURCE = "https://auth.example.com", "http://localhost:3000/api/mcp"

def sh(*cmd, **kw):
    return subprocess.run(cmd, check=True, cwd=ROOT, **kw)

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close(); return port

def server_env(redis_prefix, use_redis):
    """The settings every server under measurement runs with (this harness, `ab.py` and
    `pgo_train.py` alike, so that they measure and train the same code paths)."""
    env = {"MCP_STATE_SECRET": "perf=0123456789abcdef0123456789abcdef",
           # No simulated work per job step, and job caps no run reaches.
           "MCP_JOB_STEP_MS": "0", "MCP_JOB_CAP_ANONYMOUS": "1000000", "MCP_JOB_CAP_VERIFIED": "1000000",
           "MCP_MAX_JOBS_TOTAL": "10000000", "MCP_JOB_SHARE": "10000000", "MCP_JOBS_PER_MINUTE": "1000000",
           # Likewise for tasks.
           "MCP_TASKS_MAX_PER_PRINCIPAL": "10000", "MCP_TASKS_MAX_TOTAL": "1000000", "MCP_TASK_SHARE": "10000000",
           "MCP_TASKS_PER_MINUTE": "1000000", "MCP_TASKS_HELD_TOTAL": "10000000",
           # Each run's records under its own prefix, forgotten between servers.
           "MCP_REDIS_PREFIX": redis_prefix,
           # wrk sends the `mrtr` retry with the same `requestState` every time: with states
           # single use (the default), every retry after the first would measure the refusal
           # of a used state. Nothing but a retry reads it.
           "MCP_REQUEST_STATE_SINGLE_USE": "off"}
    if use_redis:
        env["REDIS_URL"] = REDIS_URL
    return env

def redis_up():
    url = urllib.parse.urlsplit(REDIS_URL)
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), timeout=0.5) as s:
            s.sendall(b"PING\r\n"); return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False

def forget_redis_keys(prefix):
    """Deletes the keys a run wrote under `prefix` in the Redis of REDIS_URL (they would expire, but
    a harness run leaves tens of thousands of job records). A failure is reported, not raised: the
    run's measurements matter more. Returns how many keys went, or None."""
    url = urllib.parse.urlsplit(REDIS_URL)
    script = ("local cursor, n = '0', 0 repeat local r = redis.call('SCAN', cursor, 'MATCH', ARGV[1], 'COUNT', 1000) "
              "cursor = r[1] for _, k in ipairs(r[2]) do redis.call('UNLINK', k) n = n + 1 end until cursor == '0' return n")
    commands = []
    if url.password: commands.append([b"AUTH"] + ([url.username.encode()] if url.username else []) + [url.password.encode()])
    if url.path.strip("/"): commands.append([b"SELECT", url.path.strip("/").encode()])
    commands.append([b"EVAL", script.encode(), b"0", f"{prefix}:*".encode()])
    try:
        with socket.create_connection((url.hostname or "127.0.0.1", url.port or 6379), timeout=30) as s:
            replies = s.makefile("rb")
            for args in commands:
                s.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
                reply = replies.readline()
                if reply.startswith(b"-"):
                    raise OSError(reply.decode(errors="replace").strip())
        return int(reply[1:])
    except (OSError, ValueError) as problem:
        print(f"warning: the Redis keys under {prefix}: were not deleted ({problem})", file=sys.stderr)
        return None

def post(port, method, params, extra=None, name=None, raw=False):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name: headers["Mcp-Name"] = name
    headers.update(extra or {})
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/mcp", data=body, headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    if raw: return text
    lines = [l[5:].strip() for l in text.splitlines() if l.startswith("data:")] or [text]
    return json.loads(lines[-1])

def request_file(directory, label, method, params, extra=None, name=None):
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method}
    if name: headers["Mcp-Name"] = name
    headers.update(extra or {})
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
    path = os.path.join(directory, f"{label}.http")
    with open(path, "w") as f:
        f.write("".join(f"{k}: {v}\n" for k, v in headers.items()) + "\n" + body)
    return path

def replay(port, path):
    """Sends the request a file holds, as wrk does, and returns the JSON-RPC message it answered
    (the last `data:` event of a stream)."""
    with open(path) as f:
        head, body = f.read().split("\n\n", 1)
    headers = dict(line.split(": ", 1) for line in head.splitlines())
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/mcp", data=body.encode(), headers=headers, method="POST")
    with urllib.request.urlopen(request, timeout=10) as response:
        text = response.read().decode()
    lines = [l[5:].strip() for l in text.splitlines() if l.startswith("data:")] or [text]
    return json.loads(lines[-1])

def check_answers(port, files):
    """wrk counts any 2xx as served, and a JSON-RPC error or a tool error comes back as 200: after
    each run every request of the workload is sent once more, and the run stops if one of them is
    answered with an error (a workload that only measured its own refusal would look fast)."""
    for path in files:
        answer = replay(port, path)
        result = answer.get("result")
        if "error" in answer or not isinstance(result, dict) or result.get("isError"):
            raise SystemExit(f"{os.path.basename(path)} was answered with an error, so its figures measure that:\n{answer}")

class OtlpSink(BaseHTTPRequestHandler):
    """An OTLP/HTTP endpoint that accepts every export and keeps nothing (the echo+otel workload
    measures what tracing costs the server, not a backend)."""
    exports = 0
    def do_POST(self):
        self.rfile.read(int(self.headers.get("content-length", "0")))
        OtlpSink.exports += 1
        self.send_response(200); self.send_header("content-length", "0"); self.end_headers()
    def log_message(self, *args):
        pass

# The platform's end of `VERCEL_IPC_PATH`, as a stand-in: it takes every message `vercel_runtime`
# sends (NUL-terminated JSON: its start, each log line, each request's end) and keeps nothing.
IPC_READER = """
import socket, sys, threading
server = socket.socket(socket.AF_UNIX)
server.bind(sys.argv[1])
server.listen(4)
print("ready", flush=True)
def drain(connection):
    while connection.recv(1 << 16):
        pass
while True:
    connection, _ = server.accept()
    threading.Thread(target=drain, args=(connection,), daemon=True).start()
"""

def ipc_sink(directory):
    """Starts the IPC stand-in on a fresh socket path, and returns (process, path) once it listens
    (a runtime that cannot connect goes on without the socket, and says nothing). A process of its
    own, so that reading does not compete with the harness for Python's lock."""
    path = os.path.join(directory, f"ipc-{time.monotonic_ns()}.sock")
    reader = subprocess.Popen([sys.executable, "-c", IPC_READER, path], stdout=subprocess.PIPE, text=True)
    if reader.stdout.readline().strip() != "ready":
        reader.kill(); reader.wait()
        raise SystemExit("the IPC stand-in did not start")
    return reader, path

def ipc_connected(path):
    """Whether a process is connected to the Unix socket at `path` (`ss` lists the listening socket,
    and one more entry per connection)."""
    listing = subprocess.run(["ss", "-x", "-a"], capture_output=True, text=True).stdout
    return listing.count(path) > 1

def spawn(binary, port, env, started=None):
    """Starts a server with its stdout and stderr on one pipe that a `cat` reads and discards:
    where a platform collects logs, they are a pipe (Vercel's, a container's, systemd's), and a
    write to a pipe costs more than one to /dev/null, and wakes its reader. (`cat`, not a thread
    here, so that reading does not compete with the harness for Python's lock.)"""
    # The caller's own settings would change our server and not the floor: every server starts from
    # the environment without them, plus what the harness sets.
    full = {k: v for k, v in os.environ.items() if not k.startswith(("MCP_", "OTEL_", "VERCEL", "REDIS_", "DATABASE_URL", "LP_", "CRON_"))}
    full.update(env); full["PORT"] = str(port); full["VERCEL_DEV_PORT"] = str(port)
    reader = subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL)
    if started is not None:
        started.append(time.perf_counter())  # a cold start counts from here, the reader running
    process = subprocess.Popen([binary], env=full, stdout=reader.stdin, stderr=subprocess.STDOUT)
    reader.stdin.close()  # the server holds the pipe's only write end: `cat` ends with it
    process.log_reader = reader  # its CPU is the price of the server's log lines, reported apart
    return process

def wait_ready(port, probe, deadline=10.0):
    start = time.perf_counter()
    while time.perf_counter() - start < deadline:
        try:
            probe(port); return time.perf_counter() - start
        except Exception:
            pass
    raise SystemExit(f"server on {port} did not become ready")

def raw_echo(port):
    """One echo call on a raw socket: cheap enough to poll in a tight loop."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "echo", "arguments": {"message": "hello"}, "_meta": META}}).encode()
    head = (f"POST /api/mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\n"
            f"Mcp-Method: tools/call\r\nMcp-Name: echo\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(head + body)
        if not s.recv(16).startswith(b"HTTP/1.1 200"):
            raise ConnectionError("not ready")

def spawn_to_answer_ms(binary, env):
    """One cold start: process spawn to the first successful tools/call."""
    port = free_port(); started = []
    process = spawn(binary, port, env, started)
    try:
        wait_ready(port, raw_echo); return (time.perf_counter() - started[0]) * 1000
    finally:
        process.kill(); process.wait()

def cold_starts(servers, rounds=9):
    """Median cold start per server, the servers taking turns within each round so that all of
    them meet the same moments of the machine (measured one after another, a server that follows
    a heavy workload starts slower for reasons of its own)."""
    times = {name: [] for name in servers}
    for _ in range(rounds):
        for name, (binary, env) in servers.items():
            times[name].append(spawn_to_answer_ms(binary, env))
    return {name: statistics.median(values) for name, values in times.items()}

def cpu_pressure_us():
    """Microseconds, since boot, in which some runnable task waited for a CPU (Linux PSI), or
    None. Over a run it says how much the machine's other load got in the way."""
    try:
        with open("/proc/pressure/cpu") as f:
            return int(f.readline().split("total=")[1])
    except (OSError, IndexError, ValueError):
        return None

def rss_breakdown(pid):
    """(file-backed, anonymous) KiB: mapped code versus heap and stacks."""
    values = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(("RssFile:", "RssAnon:")):
                values[line.split(":")[0]] = int(line.split()[1])
    return values.get("RssFile", 0), values.get("RssAnon", 0)

def rss_kib(pid, field):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(field): return int(line.split()[1])
    return 0

def cpu_ticks(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])

def preemptions(pid):
    """How often the server's threads were switched out while runnable (summed over threads)."""
    total = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            with open(status) as f:
                total += sum(int(line.split()[1]) for line in f if line.startswith("nonvoluntary_ctxt_switches"))
        except OSError:
            pass  # a thread that ended meanwhile (its switches leave the count with it)
    return total

def wrk(port, files, seconds, connections=None, batch=False):
    """batch: wrk runs under SCHED_BATCH, so that its threads, woken by a response, wait for the
    scheduler's tick instead of preempting the server that sent it (see performance.md)."""
    env = dict(os.environ); env["PERF_REQUESTS"] = ",".join(files)
    connections = connections or CONNECTIONS
    threads = 1 if connections <= 2 else 2
    cmd = (["chrt", "--batch", "0"] if batch else []) + ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", os.path.join(ROOT, "scripts/perf/requests.lua"), f"http://127.0.0.1:{port}/api/mcp"]
    out = subprocess.run(cmd, env=env, check=True, capture_output=True, text=True).stdout
    if "Non-2xx" in out: raise SystemExit("non-2xx responses:\n" + out)
    # A request that failed or timed out is left out of wrk's counts and latencies: none may.
    if "Socket errors" in out: raise SystemExit("socket errors:\n" + out)
    total = int(re.search(r"(\d+) requests in", out).group(1))
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    def pct(p):
        m = re.search(rf"\s{p}%\s+([\d.]+)(us|ms|s)", out)
        value, unit = float(m.group(1)), m.group(2)
        return value * {"us": 1, "ms": 1000, "s": 1_000_000}[unit]
    p999 = re.search(r"p999_us (\d+)", out)
    return total, rps, pct(50), pct(99), float(p999.group(1)) if p999 else float("nan")

def measure(process, port, files, connections=None, batch=False, companion=None):
    """companion: another process the server's requests keep busy (the IPC stand-in); its CPU per
    request is reported apart, as `companion_cpu_us`, since it shares the cores with the server."""
    wrk(port, files, 1, connections, batch)  # warm-up
    before, switched = cpu_ticks(process.pid), preemptions(process.pid)
    companion_before = cpu_ticks(companion.pid) if companion is not None else 0
    reader_before = cpu_ticks(process.log_reader.pid)
    total, rps, p50, p99, p999 = wrk(port, files, SECONDS, connections, batch)
    cpu_us = (cpu_ticks(process.pid) - before) * TICK_US / max(total, 1)
    preempted = max(preemptions(process.pid) - switched, 0) / max(total, 1)
    row = {"rps": rps, "p50_us": p50, "p99_us": p99, "p999_us": p999, "cpu_us": cpu_us, "requests": total,
           "preempted": preempted, "log_reader_cpu_us": (cpu_ticks(process.log_reader.pid) - reader_before) * TICK_US / max(total, 1)}
    if companion is not None:
        row["companion_cpu_us"] = (cpu_ticks(companion.pid) - companion_before) * TICK_US / max(total, 1)
    check_answers(port, files)
    return row

def best_of(first, second):
    """Each figure of two measurements of one floor at its best: the higher throughput, the lower
    CPU and latencies. Taken figure by figure, so that no ratio of the run is flattered by a floor
    that read low on that figure alone."""
    faster = max(first, second, key=lambda row: row["rps"])
    best = dict(first)
    for key in first:
        if key in ("rps", "requests"):
            best[key] = faster[key]
        elif key.endswith("_us") or key == "preempted":
            best[key] = min(first[key], second[key])
    return best

CONCURRENCY = (16, 64)

def concurrency(floor_bin, perf_bin, base_env, auth_env, token, work, echo, echo_probe):
    """echo at 16 and 64 connections (wrk -t2), and at 64 an authenticated tools/list and a mix
    (echo and a listing, alternating), each edge against the floor at the same concurrency."""
    rows = {}

    def floor_rows():
        measured = {}
        for conns in CONCURRENCY:
            port = free_port(); floor = spawn(floor_bin, port, {}); wait_ready(port, echo_probe)
            measured[f"floor {conns} echo"] = measure(floor, port, [echo], conns)
            if conns == 64:
                measured["floor 64 echo-batch"] = measure(floor, port, [echo], conns, batch=True)
            floor.kill(); floor.wait()
        return measured

    # As at 2 connections, the floor is measured before the servers and again after them, and the
    # better of the two counts: one low reading (a noisy moment on the machine) would otherwise
    # flatter every ratio of the run (it has read below `floor_typed`, which does strictly more).
    first_floor = floor_rows()
    for conns in CONCURRENCY:
        # The least a JSON-RPC server does (examples/floor_json.rs): what reading and writing JSON
        # alone costs at this concurrency, with none of MCP's work.
        # The same with typed messages (examples/floor_typed.rs): the least any parsing server costs.
        for kind in ["json", "typed"]:
            port = free_port(); lean = spawn(f"{floor_bin}_{kind}", port, {}); wait_ready(port, echo_probe)
            rows[f"{kind} {conns} echo"] = measure(lean, port, [echo], conns)
            lean.kill(); lean.wait()
    listing = request_file(work, "c-list", "tools/list", {"_meta": META})
    authlist = request_file(work, "c-authlist", "tools/list", {"_meta": META}, extra={"Authorization": f"Bearer {token}"})
    for edge in ["local", "vercel"]:
        port = free_port(); server = spawn(perf_bin, port, dict(base_env, PERF_EDGE=edge)); wait_ready(port, echo_probe)
        for conns in CONCURRENCY:
            rows[f"{edge} {conns} echo"] = measure(server, port, [echo], conns)
        rows[f"{edge} 64 echo-batch"] = measure(server, port, [echo], 64, batch=True)
        rows[f"{edge} 64 mixed"] = measure(server, port, [echo, listing, echo, listing], 64)
        server.kill(); server.wait()
        # The same server writing request lines for failures only (MCP_REQUEST_LOG=failures), in a
        # process of its own: what a line per request costs at this concurrency. For `vercel`, which
        # has no IPC socket here, lines go to standard error one write each (on Vercel, one message
        # each on that socket); `local` writes its busy workers' lines together, as always.
        port = free_port(); quiet = spawn(perf_bin, port, dict(base_env, PERF_EDGE=edge, MCP_REQUEST_LOG="failures"))
        wait_ready(port, echo_probe)
        rows[f"{edge} 64 echo-failures"] = measure(quiet, port, [echo], 64)
        quiet.kill(); quiet.wait()
        port = free_port(); authed = spawn(perf_bin, port, dict(auth_env, PERF_EDGE=edge))
        wait_ready(port, lambda p: post(p, "tools/list", {"_meta": META}, extra={"Authorization": f"Bearer {token}"}))
        rows[f"{edge} 64 list50+jwt"] = measure(authed, port, [authlist], 64)
        authed.kill(); authed.wait()
    # The edge as it runs on Vercel: with an IPC socket and requests tagged with their invocation,
    # each request's log line and its end are messages on that socket (each a write under the
    # runtime's lock), not lines on standard error.
    invocation = {"x-vercel-internal-invocation-id": "perf-invocation", "x-vercel-internal-request-id": "1"}
    echo_ipc = request_file(work, "c-echo-ipc", "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": META},
                            extra=invocation, name="echo")
    for lines, name in [("all", "echo"), ("failures", "echo-failures")]:
        sink, path = ipc_sink(work)
        server = None
        try:
            port = free_port()
            # The platform's socket makes the posture deployed, where authentication must be chosen.
            server = spawn(perf_bin, port, dict(base_env, PERF_EDGE="vercel", VERCEL_IPC_PATH=path, MCP_REQUEST_LOG=lines,
                                                MCP_AUTH_MODE="off", VERCEL_ENV="preview"))
            wait_ready(port, echo_probe)
            if not ipc_connected(path):
                raise SystemExit("the edge did not connect to the IPC stand-in")
            rows[f"vercel-ipc 64 {name}"] = measure(server, port, [echo_ipc], 64, companion=sink)
        finally:
            if server is not None:
                server.kill(); server.wait()
            sink.kill(); sink.wait()
            if os.path.exists(path):
                os.unlink(path)
    for key, second in floor_rows().items():
        rows[key] = best_of(first_floor[key], second)
    return rows

def main():
    if not shutil.which("wrk"):
        raise SystemExit("wrk is required: apt-get install -y wrk")
    sh("cargo", "build", "--release", "--quiet", "--example", "floor", "--example", "floor_json", "--example", "floor_typed", "--example", "floor_redis", "--example", "perf_server",
       "--example", "mint_token")
    pressure_start, wall_start = cpu_pressure_us(), time.monotonic()
    bins = os.path.join(ROOT, "target/release/examples")
    floor_bin, perf_bin = os.path.join(bins, "floor"), os.path.join(bins, "perf_server")
    use_redis = redis_up()
    base_env = server_env(f"perf:{os.getpid()}", use_redis)
    with open(os.path.join(ROOT, "tests/fixtures/jwks.json")) as f:
        jwks = f.read()
    auth_env = dict(base_env, MCP_AUTH_MODE="required", MCP_JWKS=jwks, MCP_AUTH_ISSUER=ISSUER, MCP_RESOURCE_URL=RESOURCE)
    token = subprocess.run([os.path.join(bins, "mint_token"), os.path.join(ROOT, "tests/fixtures/rsa_private.pem"), "test-rsa-1",
                            ISSUER, RESOURCE, "perf-user", "mcp:read mcp:write", "3600"], check=True, capture_output=True, text=True).stdout.strip()
    echo_probe = lambda port: post(port, "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": META}, name="echo")
    results, work = {}, tempfile.mkdtemp()

    echo = request_file(work, "echo", "tools/call", {"name": "echo", "arguments": {"message": "hello"}, "_meta": META}, name="echo")

    def run_floor():
        port = free_port(); floor = spawn(floor_bin, port, {}); wait_ready(port, echo_probe)
        row = {"idle_kib": rss_kib(floor.pid, "VmRSS:"), "echo": measure(floor, port, [echo]), "size": os.path.getsize(floor_bin)}
        row["peak_kib"] = rss_kib(floor.pid, "VmHWM:"); row["peak_split"] = rss_breakdown(floor.pid); floor.kill(); floor.wait()
        return row

    # The floor is measured before and after the servers; the better of the two counts, so a noisy
    # moment on the machine does not flatter the ratios.
    sink = ThreadingHTTPServer(("127.0.0.1", 0), OtlpSink)
    threading.Thread(target=sink.serve_forever, daemon=True).start()
    first_floor = run_floor()

    for edge in ["local", "vercel"]:
        env = dict(base_env, PERF_EDGE=edge)
        port = free_port(); server = spawn(perf_bin, port, env); wait_ready(port, echo_probe)
        row = {"idle_kib": rss_kib(server.pid, "VmRSS:"), "size": os.path.getsize(perf_bin)}
        listed = post(port, "tools/list", {"_meta": META})["result"]["tools"]
        assert len(listed) == 50, len(listed)
        first = post(port, "tools/call", {"name": "confirm", "arguments": {}, "_meta": META}, name="confirm")["result"]
        retry = {"name": "confirm", "arguments": {}, "_meta": META, "inputResponses": {"ok": {"action": "accept", "content": {"ok": True}}}, "requestState": first["requestState"]}
        assert post(port, "tools/call", retry, name="confirm")["result"]["content"][0]["text"] == "confirmed"
        progress = {"name": "progress10", "arguments": {}, "_meta": dict(META, progressToken="p")}
        assert post(port, "tools/call", progress, name="progress10", raw=True).count("notifications/progress") == 10
        workloads = {
            "echo": [echo],
            "list50": [request_file(work, "list", "tools/list", {"_meta": META})],
            "progress10": [request_file(work, "progress", "tools/call", progress, name="progress10")],
            "mrtr": [request_file(work, "mrtr1", "tools/call", {"name": "confirm", "arguments": {}, "_meta": META}, name="confirm"),
                     request_file(work, "mrtr2", "tools/call", retry, name="confirm")],
        }
        if use_redis:
            submitted = post(port, "tools/call", {"name": "submit_job", "arguments": {"steps": 1}, "_meta": META}, name="submit_job")
            handle = json.loads(submitted["result"]["content"][0]["text"])["jobId"]
            workloads["submit+poll"] = [
                request_file(work, "submit", "tools/call", {"name": "submit_job", "arguments": {"steps": 1}, "_meta": META}, name="submit_job"),
                request_file(work, "poll", "tools/call", {"name": "get_job_status", "arguments": {"jobId": handle}, "_meta": META}, name="get_job_status")]
        for name, files in workloads.items():
            row[name] = measure(server, port, files)
        row["peak_kib"] = rss_kib(server.pid, "VmHWM:"); row["peak_split"] = rss_breakdown(server.pid); server.kill(); server.wait()
        if use_redis:
            # The next edge's jobs start from an empty store, as this one's did.
            forget_redis_keys(base_env["MCP_REDIS_PREFIX"])
        # tools/list with authentication: a separate instance with JWT verification on.
        port = free_port(); authed = spawn(perf_bin, port, dict(auth_env, PERF_EDGE=edge))
        bearer = {"Authorization": f"Bearer {token}"}
        wait_ready(port, lambda p: post(p, "tools/list", {"_meta": META}, extra=bearer))
        row["list50+jwt"] = measure(authed, port, [request_file(work, "authlist", "tools/list", {"_meta": META}, extra=bearer)])
        authed.kill(); authed.wait()
        # echo with tracing on: every request sampled, spans exported over OTLP/HTTP to a sink.
        port = free_port(); traced = spawn(perf_bin, port, dict(base_env, PERF_EDGE=edge, OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.server_port}"))
        wait_ready(port, echo_probe)
        row["echo+otel"] = measure(traced, port, [echo])
        traced.kill(); traced.wait()
        results[edge] = row
    second_floor = run_floor()
    if use_redis:
        forget_redis_keys(base_env["MCP_REDIS_PREFIX"])
        # The floor of a request with one Redis round trip: what submit+poll could reach with
        # no work of ours around its round trips.
        port = free_port(); floor_redis = spawn(os.path.join(bins, "floor_redis"), port, {"FLOOR_REDIS": REDIS_URL})
        wait_ready(port, echo_probe)
        results["floor_redis"] = measure(floor_redis, port, [echo]); floor_redis.kill(); floor_redis.wait()
    results["floor"] = dict(first_floor, echo=best_of(first_floor["echo"], second_floor["echo"]))
    # Memory figures come together from the run with the smaller peak, so idle, peak and its split
    # describe one process.
    smaller = min(first_floor, second_floor, key=lambda r: r["peak_kib"])
    for key in ["idle_kib", "peak_kib", "peak_split"]:
        results["floor"][key] = smaller[key]
    results["concurrency"] = concurrency(floor_bin, perf_bin, base_env, auth_env, token, work, echo, echo_probe)
    traced_env = dict(base_env, PERF_EDGE="local", OTEL_EXPORTER_OTLP_ENDPOINT=f"http://127.0.0.1:{sink.server_port}")
    cold = cold_starts({"floor": (floor_bin, {}), "local": (perf_bin, dict(base_env, PERF_EDGE="local")),
                        "vercel": (perf_bin, dict(base_env, PERF_EDGE="vercel")), "local+otel": (perf_bin, traced_env)})
    results["cold_otel_ms"] = cold.pop("local+otel")
    for name, ms in cold.items():
        results[name]["cold_ms"] = ms
    pressure_end = cpu_pressure_us()
    if pressure_start is not None and pressure_end is not None:
        results["cpu_pressure_pct"] = (pressure_end - pressure_start) / ((time.monotonic() - wall_start) * 1e6) * 100
    report(results, use_redis)

def report(results, use_redis):
    floor = results["floor"]; f = floor["echo"]
    machine = f"{os.cpu_count()} cores, {round(os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES') / 2**30, 1)} GiB, {os.uname().sysname} {os.uname().release}"
    date = datetime.date.today().isoformat()
    pressure = results.get("cpu_pressure_pct")
    lines = [f"Run {date} on {machine}; `scripts/perf.sh` (wrk -t{1 if CONNECTIONS <= 2 else 2} -c{CONNECTIONS}, 1 s warm-up, {SECONDS} s per workload;"
             " each workload's requests sent once more after it and checked to be answered without an error)."
             + ("" if use_redis else " Redis was not reachable: no job workload.")
             + (f" CPU pressure over the run (PSI \"some\"): {pressure:.1f}% of the time a runnable task waited for a CPU"
                " (wrk and the server share two cores, so it is never zero; a run well above the others had other load)." if pressure is not None else ""), "",
             f"Floor (canned hyper server): {f['rps']:.0f} req/s, p50 {f['p50_us']:.0f} µs, p99 {f['p99_us']:.0f} µs, "
             f"{f['cpu_us']:.1f} µs CPU/request, cold start {floor['cold_ms']:.1f} ms, idle {floor['idle_kib']} KiB, peak {floor['peak_kib']} KiB.", "",
             "| edge | workload | req/s | × floor | p50 µs | p99 µs | CPU µs/req | × floor CPU |", "|---|---|---|---|---|---|---|---|"]
    for edge in ["local", "vercel"]:
        row = results[edge]
        for name in ["echo", "list50", "progress10", "mrtr", "submit+poll", "list50+jwt", "echo+otel"]:
            if name not in row: continue
            w = row[name]
            lines.append(f"| {edge} | {name} | {w['rps']:.0f} | {w['rps']/f['rps']:.2f} | {w['p50_us']:.0f} | {w['p99_us']:.0f} | {w['cpu_us']:.1f} | {w['cpu_us']/f['cpu_us']:.2f} |")
    if "floor_redis" in results:
        fr = results["floor_redis"]
        jobs = ", ".join(f"{edge} {results[edge]['submit+poll']['rps'] / fr['rps']:.2f}×" for edge in ["local", "vercel"]
                         if "submit+poll" in results[edge])
        lines.append("")
        lines.append(f"One Redis round trip a request (`examples/floor_redis.rs`: the floor plus one `GET`): {fr['rps']:.0f} req/s, "
                     f"{fr['rps'] / f['rps']:.2f}× the floor, {fr['cpu_us']:.1f} µs CPU/request; submit+poll against it: {jobs}.")
    lines.append("")
    lines.append("| edge | cold start ms | × floor | idle KiB | anonymous KiB after load (RssAnon) | × floor RssAnon | peak RSS KiB (file-backed / anonymous) | binary bytes | JWT CPU µs/req (list50+jwt − list50) |")
    lines.append("|---|---|---|---|---|---|---|---|---|")
    for edge in ["floor", "local", "vercel"]:
        row = results[edge]
        jwt = row["list50+jwt"]["cpu_us"] - row["list50"]["cpu_us"] if "list50+jwt" in row else float("nan")
        split = row.get("peak_split", (0, 0))
        anon_ratio = split[1] / floor["peak_split"][1] if floor["peak_split"][1] else float("nan")
        lines.append(f"| {edge} | {row['cold_ms']:.1f} | {row['cold_ms']/floor['cold_ms']:.2f} | {row['idle_kib']} | {split[1]} | {anon_ratio:.2f} | {row['peak_kib']} ({split[0]} / {split[1]}) | {row['size']} | {jwt:.1f} |")
    lines.append("")
    tracing = [f"{edge} {results[edge]['echo+otel']['cpu_us'] / results[edge]['echo']['cpu_us'] - 1:+.0%}"
               for edge in ["local", "vercel"] if "echo+otel" in results[edge]]
    lines.append(f"Tracing on (every request sampled, exported to the sink): echo CPU per request {', '.join(tracing)} against tracing off; "
                 f"cold start {results['cold_otel_ms']:.1f} ms ({results['cold_otel_ms'] / floor['cold_ms']:.2f}× floor, "
                 f"{results['cold_otel_ms'] / results['local']['cold_ms']:.2f}× the local run without tracing).")
    rows = results.get("concurrency", {})
    if rows:
        lines.append("")
        lines.append("At 16 and 64 connections (wrk -t2), against the floor at the same concurrency (the better of two "
                     "measurements, before the servers and after them); `echo-batch` is echo "
                     "with wrk under SCHED_BATCH (against the floor measured so), and *preempted* counts the server's "
                     "involuntary context switches per request. `json` is `examples/floor_json.rs`, the floor plus "
                     "reading the body as a JSON `Value` and writing a JSON answer, and nothing else; `typed` "
                     "(`examples/floor_typed.rs`) does the same through borrowed structs. `echo-failures` "
                     "is echo from a server started with `MCP_REQUEST_LOG=failures` (no line for a request that "
                     "succeeded). `vercel-ipc` is the edge as it runs on Vercel: an IPC socket (a stand-in that reads "
                     "and drops every message) and requests tagged with their invocation, so each request's line "
                     "and its end are messages on that socket:")
        lines.append("")
        lines.append("| edge | workload | connections | req/s | × floor | p50 µs | p99 µs | p999 µs | × floor p99 | CPU µs/req | × floor CPU | preempted /req |")
        lines.append("|---|---|---|---|---|---|---|---|---|---|---|---|")
        # echo-batch: wrk under SCHED_BATCH, compared with the floor measured the same way.
        for conns, name in [(16, "echo"), (64, "echo"), (64, "echo-batch")]:
            fl = rows[f"floor {conns} {name}"]
            lines.append(f"| floor | {name} | {conns} | {fl['rps']:.0f} | 1.00 | {fl['p50_us']:.0f} | {fl['p99_us']:.0f} | {fl['p999_us']:.0f} | 1.00 | {fl['cpu_us']:.1f} | 1.00 | {fl['preempted']:.3f} |")
        for kind, conns in [(kind, conns) for kind in ["json", "typed"] for conns in CONCURRENCY]:
            w, fl = rows[f"{kind} {conns} echo"], rows[f"floor {conns} echo"]
            lines.append(f"| {kind} | echo | {conns} | {w['rps']:.0f} | {w['rps']/fl['rps']:.2f} | {w['p50_us']:.0f} | {w['p99_us']:.0f} | {w['p999_us']:.0f} | {w['p99_us']/fl['p99_us']:.2f} | {w['cpu_us']:.1f} | {w['cpu_us']/fl['cpu_us']:.2f} | {w['preempted']:.3f} |")
        for edge in ["local", "vercel"]:
            for conns, name in [(16, "echo"), (64, "echo"), (64, "echo-failures"), (64, "echo-batch"), (64, "mixed"),
                                (64, "list50+jwt")]:
                w, fl = rows[f"{edge} {conns} {name}"], rows[f"floor {conns} {'echo-batch' if name == 'echo-batch' else 'echo'}"]
                lines.append(f"| {edge} | {name} | {conns} | {w['rps']:.0f} | {w['rps']/fl['rps']:.2f} | {w['p50_us']:.0f} | {w['p99_us']:.0f} | {w['p999_us']:.0f} | {w['p99_us']/fl['p99_us']:.2f} | {w['cpu_us']:.1f} | {w['cpu_us']/fl['cpu_us']:.2f} | {w['preempted']:.3f} |")
        for name in ["echo", "echo-failures"]:
            w, fl = rows[f"vercel-ipc 64 {name}"], rows["floor 64 echo"]
            lines.append(f"| vercel-ipc | {name} | 64 | {w['rps']:.0f} | {w['rps']/fl['rps']:.2f} | {w['p50_us']:.0f} | {w['p99_us']:.0f} | {w['p999_us']:.0f} | {w['p99_us']/fl['p99_us']:.2f} | {w['cpu_us']:.1f} | {w['cpu_us']/fl['cpu_us']:.2f} | {w['preempted']:.3f} |")
        stand_in = ", ".join(f"{rows[f'vercel-ipc 64 {name}']['companion_cpu_us']:.1f} µs with `{name}`" for name in ["echo", "echo-failures"])
        lines.append("")
        lines.append(f"The IPC stand-in's own CPU a request while wrk ran (not in the rows above, which are the server's; it shares the machine's cores with the server and wrk): {stand_in}.")
        readers = ", ".join(f"{edge} {rows[f'{edge} 64 echo']['log_reader_cpu_us']:.1f} µs ({rows[f'{edge} 64 echo-failures']['log_reader_cpu_us']:.1f} µs with `echo-failures`)"
                            for edge in ["local", "vercel"])
        lines.append("")
        lines.append(f"The reader of the servers' log pipe (a `cat`, standing in for the platform's log collector; not in the rows above), its CPU a request at 64 connections: {readers}; the floor writes no lines.")
    section = "\n".join(lines)
    print(section)
    path = os.path.join(ROOT, "docs/performance.md")
    text = open(path).read()
    start, end = "<!-- harness:start -->", "<!-- harness:end -->"
    if start in text:
        text = text[:text.index(start) + len(start)] + "\n" + section + "\n" + text[text.index(end):]
    local = results["local"]
    label = os.environ.get("PERF_LABEL", "harness run")
    label += f" (CPU pressure {pressure:.0f}%)" if pressure is not None else ""
    history = (f"| {date} | {label} | {local['echo']['rps']/f['rps']:.2f}× floor echo, {local['list50']['rps']/f['rps']:.2f}× list50 "
               f"| CPU {local['echo']['cpu_us']/f['cpu_us']:.2f}× floor | cold {local['cold_ms']/floor['cold_ms']:.2f}×, "
               f"RssAnon {local['peak_split'][1]} KiB ({local['peak_split'][1]/max(floor['peak_split'][1], 1):.1f}× floor)"
               + (f"; echo at 64 connections {rows['local 64 echo']['rps']/rows['floor 64 echo']['rps']:.2f}× floor, CPU {rows['local 64 echo']['cpu_us']/rows['floor 64 echo']['cpu_us']:.2f}×"
                  f" (json {rows['json 64 echo']['rps']/rows['floor 64 echo']['rps']:.2f}×,"
                  f" typed {rows['typed 64 echo']['rps']/rows['floor 64 echo']['rps']:.2f}×)" if rows else "")
               + " |")
    text = text.rstrip("\n") + "\n" + history + "\n"
    open(path, "w").write(text)
    json.dump(results, open(os.path.join(ROOT, "target/perf-results.json"), "w"), indent=1)

if __name__ == "__main__":
    main()
