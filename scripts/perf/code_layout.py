#!/usr/bin/env python3
"""Regenerates link/hot-text.ld, the linker script that lays the code serving a request out in one
contiguous block (build.rs passes it to release links on Linux).

Why: the kernel maps 64 KiB of the executable around every page fault (fault-around), so a few
hundred functions scattered over 2.9 MiB of code keep nearly all of it resident. Grouped, the code
that a request runs fits in about a megabyte and the rest stays on disk.

How: builds the shipped release perf_server without the layout and with a linker map, runs it
under callgrind on both edges (the local run and the vercel_runtime edge), with and without
authentication, through start-up and a spread of traffic (2026-07-28 and legacy calls, listings,
MRTR, progress streams, jobs against Redis, JWT checks, and the usual errors), and maps every
instruction address that ran to the input section (the function) it came from. Profiling the
stripped release binary itself matters: symbol hashes and even which of two identical functions
LLVM keeps depend on the cargo profile, so a build with symbols is a different program. Sections
are written as patterns with the parts that vary between builds wildcarded: the legacy mangling's
hash and v0 crate disambiguators. A pattern that matches nothing in some build is harmless; a
function missing from the list still works, it only lives among the cold code.

    python3 scripts/perf/code_layout.py    (needs valgrind, Redis at 127.0.0.1:6379)
"""

import bisect, concurrent.futures, json, os, re, shutil, signal, subprocess, sys, tempfile, urllib.error, urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import run  # the harness: its request helpers and environment

ROOT = run.ROOT
OUTPUT = os.path.join(ROOT, "link/hot-text.ld")
META = run.META
LEGACY = {"MCP-Protocol-Version": "2025-11-25"}


def build(link_map):
    """The shipped release profile, laid out in the linker's default order, with a map."""
    cargo = ["cargo", "build", "--release", "--quiet", "--example"]
    subprocess.run(cargo + ["mint_token"], check=True, cwd=ROOT)
    subprocess.run(cargo + ["perf_server"], check=True, cwd=ROOT,
                   env=dict(os.environ, MCP_CODE_LAYOUT="off", MCP_LINK_MAP=link_map))
    return os.path.join(ROOT, "target/release/examples")


def attempt(call):
    """Error paths are part of the traffic: a refused request is as welcome as an answer."""
    try:
        return call()
    except Exception:
        return None


def call(port, name, arguments, extra=None, meta=META, raw=False):
    params = {"name": name, "arguments": arguments, "_meta": meta}
    return run.post(port, "tools/call", params, extra=extra, name=name, raw=raw)


def traffic(port):
    post = lambda *a, **kw: attempt(lambda: run.post(port, *a, **kw))
    # Legacy clients: initialize, then a listing and a call with the negotiated version.
    legacy_init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "layout", "version": "1"}}
    attempt(lambda: raw_post(port, jsonrpc("initialize", legacy_init), {}))
    attempt(lambda: raw_post(port, jsonrpc("tools/list", {}), LEGACY))
    attempt(lambda: raw_post(port, jsonrpc("tools/call", {"name": "echo", "arguments": {"message": "legacy"}}), LEGACY))
    for _ in range(3):
        post("server/discover", {"_meta": META})
        post("tools/list", {"_meta": META})
        post("resources/list", {"_meta": META})
        post("prompts/list", {"_meta": META})
        call(port, "echo", {"message": "hello"})  # must answer: a profile of refusals alone is no profile
        first = attempt(lambda: call(port, "confirm", {}))
        if first:
            sealed = first["result"]["requestState"]
            for state in [sealed, sealed[:-4] + "AAAA"]:  # the retry, then a tampered one
                retry = {"name": "confirm", "arguments": {}, "_meta": META, "requestState": state,
                         "inputResponses": {"ok": {"action": "accept", "content": {"ok": True}}}}
                attempt(lambda: run.post(port, "tools/call", retry, name="confirm"))
        attempt(lambda: call(port, "progress10", {}, meta=dict(META, progressToken="p"), raw=True))
        submitted = attempt(lambda: call(port, "submit_job", {"steps": 1}))
        if submitted and "result" in submitted:
            handle = json.loads(submitted["result"]["content"][0]["text"])["jobId"]
            attempt(lambda: call(port, "get_job_status", {"jobId": handle}))
        # The usual refusals: unknown tool, bad arguments, a header that disagrees with the body,
        # a missing _meta, an unknown method, a body that is not JSON.
        attempt(lambda: call(port, "no_such_tool", {}))
        attempt(lambda: call(port, "echo", {"message": 42}))
        attempt(lambda: run.post(port, "tools/call", {"name": "echo", "arguments": {"message": "x"}, "_meta": META}, name="other"))
        post("tools/list", {})
        post("no/such/method", {"_meta": META})
        attempt(lambda: raw_post(port, b"{not json"))
    # Concurrent requests: contended locks and wake-ups take paths that one request at a time never does.
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda _: attempt(lambda: call(port, "echo", {"message": "hello"})), range(64)))


def jsonrpc(method, params):
    return json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()


def raw_post(port, body, version=None):
    """A POST without the 2026-07-28 routing headers, as a legacy client or a broken one sends it."""
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
    headers.update({"MCP-Protocol-Version": "2026-07-28"} if version is None else version)
    request = urllib.request.Request(f"http://127.0.0.1:{port}/api/mcp", data=body, method="POST", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return response.read()


def authed_traffic(port, token):
    bearer = {"Authorization": f"Bearer {token}"}
    for _ in range(3):
        run.post(port, "tools/list", {"_meta": META}, extra=bearer)  # must answer, as above
        attempt(lambda: call(port, "echo", {"message": "hello"}, extra=bearer))
    attempt(lambda: run.post(port, "tools/list", {"_meta": META}))
    attempt(lambda: run.post(port, "tools/list", {"_meta": META}, extra={"Authorization": "Bearer " + token[:-6] + "AAAAAA"}))


def answers(port):
    """Ready once the server answers at all: the authenticated instance refuses anonymous calls."""
    try:
        run.post(port, "server/discover", {"_meta": META})
    except urllib.error.HTTPError:
        pass


def profile(binary, env, drive, out):
    port = run.free_port()
    full = dict(os.environ, **env, PORT=str(port), VERCEL_DEV_PORT=str(port))
    full.pop("VERCEL", None)
    server = subprocess.Popen(["valgrind", "--tool=callgrind", "--dump-instr=yes", "--compress-strings=no", "--compress-pos=no",
                               f"--callgrind-out-file={out}", binary], env=full, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run.wait_ready(port, answers, deadline=120)
        drive(port)
        subprocess.run(["callgrind_control", "-d", str(server.pid)], check=True, capture_output=True)
    finally:
        server.send_signal(signal.SIGKILL); server.wait()


def executed_addresses(paths, binary_name):
    """Every instruction address of the executable that ran (callgrind reports them relative to the
    object, as the ELF file numbers them)."""
    addresses, current_object = set(), None
    for path in paths:
        with open(path, errors="replace") as f:
            for line in f:
                if line.startswith("ob="):
                    current_object = os.path.basename(line[3:].strip())
                elif line.startswith("0x") and current_object == binary_name:
                    addresses.add(int(line.split()[0], 16))
    return addresses


MAP_LINE = re.compile(r"^\s*([0-9a-f]+)\s+[0-9a-f]+\s+([0-9a-f]+)\s+\d+\s+(.*):\((\.text[^)]*)\)$")


def executed_sections(link_map, addresses):
    """(file, section) of each input code section holding an address that ran."""
    sections = []
    with open(link_map) as f:
        for line in f:
            m = MAP_LINE.match(line)
            if m and int(m.group(2), 16) > 0:
                sections.append((int(m.group(1), 16), int(m.group(2), 16), m.group(3), m.group(4)))
    sections.sort()
    starts = [s[0] for s in sections]
    found = set()
    for address in addresses:
        i = bisect.bisect_right(starts, address) - 1
        if i >= 0 and address < sections[i][0] + sections[i][1]:
            found.add(sections[i][2:])
    return found


def section_pattern(file, section):
    """A pattern for one input section: a function's own section by name; a whole object's .text
    (assembly has no function sections) by archive and member, their build hashes wildcarded.
    LLVM puts functions it believes cold (#[cold], reached only by panics) under .text.unlikely;
    those that ran anyway belong with the rest, so both prefixes are matched."""
    function = re.match(r"^\.text\.(?:unlikely\.)?(.+)$", section)
    if function:
        symbol = pattern(function.group(1))
        return symbol and f"*(.text.{symbol} .text.unlikely.{symbol})"
    m = re.match(r"^.*/(lib[\w]+)-[0-9a-f]+\.rlib\((?:[0-9a-f]+-)?(.+)\)$", file) or re.match(r"^.*/([^/]+\.a)\((.+)\)$", file)
    if not m:
        return None  # the C runtime's start files: a few bytes, linked first anyway
    archive = m.group(1) + ("-*.rlib" if ".rlib" in file else "")
    return f"*{archive}:*{m.group(2)}({section})"


def pattern(name):
    """An input-section pattern for one function that survives rebuilds: wildcards for the legacy
    mangling's hash and v0 crate disambiguators, the fixture's crate standing for any binary's,
    and any numeric suffix (a clone's, or one that makes a local symbol unique)."""
    suffixed = re.search(r"\.\d+$", name)
    name = name[: suffixed.start()] if suffixed else name
    name = re.sub(r"17h[0-9a-f]{16}E$", "17h*E", name)
    name = re.sub(r"Cs[0-9A-Za-z]+_", "Cs*_", name)
    name = re.sub(r"^_ZN11perf_server", "_ZN*", name)
    if re.search(r"[\s\[\]?\\()]", name):
        return None  # not expressible as a glob; rare, and such a function stays cold
    return name + ("*" if suffixed else "")


def profile_all(work, redis_prefix):
    """Builds, profiles both edges with and without authentication, and returns the sections that ran."""
    link_map = os.path.join(work, "perf_server.map")
    bins = build(link_map)
    binary = os.path.join(bins, "perf_server")
    base = {"MCP_STATE_SECRET": "perf=0123456789abcdef0123456789abcdef", "MCP_JOB_STEP_MS": "0", "REDIS_URL": run.REDIS_URL,
            "MCP_REDIS_PREFIX": redis_prefix}
    with open(os.path.join(ROOT, "tests/fixtures/jwks.json")) as f:
        jwks = f.read()
    auth = dict(base, MCP_AUTH_MODE="required", MCP_JWKS=jwks, MCP_AUTH_ISSUER=run.ISSUER, MCP_RESOURCE_URL=run.RESOURCE)
    token = subprocess.run([os.path.join(bins, "mint_token"), os.path.join(ROOT, "tests/fixtures/rsa_private.pem"), "test-rsa-1",
                            run.ISSUER, run.RESOURCE, "layout-user", "mcp:read mcp:write", "3600"],
                           check=True, capture_output=True, text=True).stdout.strip()
    outputs = []
    for edge in ["local", "vercel"]:
        for label, env, drive in [("open", base, traffic), ("auth", auth, lambda p: authed_traffic(p, token))]:
            out = os.path.join(work, f"{edge}-{label}.cg")
            profile(binary, dict(env, PERF_EDGE=edge), drive, out)
            outputs += [os.path.join(work, f) for f in os.listdir(work) if f.startswith(f"{edge}-{label}.cg")]
            print(f"profiled {edge} ({label})", file=sys.stderr)
    return executed_sections(link_map, executed_addresses(outputs, "perf_server"))


def write_script(section_count, patterns):
    os.makedirs(os.path.dirname(OUTPUT), exist_ok=True)
    with open(OUTPUT, "w") as f:
        f.write("/* Generated by scripts/perf/code_layout.py; see docs/performance.md (\"Code layout\").\n"
                "   The functions that start-up and request handling ran under a profile, laid out first and\n"
                f"   together so that the code a request touches stays within few pages. {len(patterns)} patterns. */\n")
        f.write("SECTIONS {\n  .text.hot : {\n")
        for p in patterns:
            f.write(f"    {p}\n")
        f.write("  }\n} INSERT BEFORE .text;\n")
    print(f"{section_count} code sections ran; {len(patterns)} patterns written to {os.path.relpath(OUTPUT, ROOT)}", file=sys.stderr)


def main():
    for tool in ["valgrind", "callgrind_control"]:
        if not shutil.which(tool):
            raise SystemExit(f"{tool} is required (apt-get install -y valgrind)")
    if not run.redis_up():
        raise SystemExit("Redis at 127.0.0.1:6379 is required: the job path is part of the profile")
    prefix = f"layout:{os.getpid()}"
    try:
        with tempfile.TemporaryDirectory() as work:
            sections = profile_all(work, prefix)
    finally:
        run.forget_redis_keys(prefix)
    # The request path alone is well over a thousand functions: a handful means the map's format or
    # the profile broke, and writing it would silently undo the layout.
    if len(sections) < 500:
        raise SystemExit(f"only {len(sections)} code sections ran under the profile; {os.path.relpath(OUTPUT, ROOT)} left as it was")
    patterns = sorted({p for p in (section_pattern(*s) for s in sections) if p})
    write_script(len(sections), patterns)


if __name__ == "__main__":
    main()
