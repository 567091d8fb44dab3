#!/usr/bin/env python3
"""Checks what `vercel build` produced (.vercel/output, Build Output API v3), then runs it.

    python3 scripts/vercel_output.py check     # the output matches vercel.json and public/
    python3 scripts/vercel_output.py smoke     # the built executables, behind a router, pass the smoke test

`check` asserts: exactly the functions vercel.json names, each with its maxDuration, response
streaming, and an executable (from `filePathMap`) that exists and is an ELF executable; the queue
trigger on the consumer only; the crons; every rewrite and header of vercel.json as routes
(resolved through the same router `smoke` uses); a static output equal to public/ and nothing else.

`smoke` starts each function's executable as Vercel's dev server does (`VERCEL_DEV_PORT`), puts a
loopback router in front that follows the output's routes (a subset of the Build Output API's
routing: the phases before and after `filesystem`, `headers`, `continue`, `dest`, `check`,
`status`), and runs scripts/smoke.py against it with authentication on (an HS256 token; the
shared-secret mode the local posture allows) and jobs in Redis. A function with a queue trigger
gets no public route, as on Vercel; it is called on its own port. Prints `N passed, N failed`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
import http.server
import json
import os
import re
import secrets
import socket
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUTPUT = os.path.join(ROOT, ".vercel", "output")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import smoke  # noqa: E402


class Results:
    def __init__(self):
        self.passed = 0
        self.failed = 0

    def check(self, name: str, condition: bool, detail: str = "") -> None:
        if condition:
            self.passed += 1
            print(f"ok   {name}", flush=True)
        else:
            self.failed += 1
            print(f"FAIL {name}: {detail}", flush=True)


def load(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


# --- routing -----------------------------------------------------------------------------------


class Router:
    """The output's routes: which function or static file serves a path, with which headers."""

    def __init__(self, output: str):
        self.output = output
        self.config = load(os.path.join(output, "config.json"))
        self.functions = {}
        functions_dir = os.path.join(output, "functions")
        for directory, dirs, _ in os.walk(functions_dir):
            for d in list(dirs):
                if d.endswith(".func"):
                    route = "/" + os.path.relpath(os.path.join(directory, d), functions_dir)[: -len(".func")]
                    self.functions[route] = load(os.path.join(directory, d, ".vc-config.json"))
                    dirs.remove(d)

    def public_function(self, path: str):
        config = self.functions.get(path)
        # A queue-triggered function has no public URL on Vercel: only the queue invokes it.
        return config if config is not None and not config.get("experimentalTriggers") else None

    def static_file(self, path: str):
        relative = "index.html" if path == "/" else path.lstrip("/")
        candidate = os.path.normpath(os.path.join(self.output, "static", relative))
        inside = candidate.startswith(os.path.join(self.output, "static") + os.sep)
        return candidate if inside and os.path.isfile(candidate) else None

    def hit(self, path: str):
        if self.public_function(path) is not None:
            return ("function", path)
        if self.static_file(path):
            return ("static", path)
        return None

    def resolve(self, target: str):
        """(kind, path, query, status, headers): kind is function, static or status."""
        parts = urllib.parse.urlsplit(target)
        path, query = parts.path, parts.query
        headers: dict[str, str] = {}
        routes = self.config.get("routes", [])
        phase = None
        for route in routes:
            if "handle" in route:
                phase = route["handle"]
                if phase == "filesystem":
                    found = self.hit(path)
                    if found:
                        return (*found, query, 200, headers)
                if phase in ("error", "miss"):
                    break
                continue
            match = re.match(route["src"], path)
            if not match:
                continue
            headers.update(route.get("headers", {}))
            if "dest" in route:
                dest = re.sub(r"\$(\d+)", lambda m: match.group(int(m.group(1))) or "", route["dest"])
                dest_parts = urllib.parse.urlsplit(dest)
                path = dest_parts.path
                query = "&".join(q for q in (dest_parts.query, query) if q)
                if route.get("check") or phase is not None:
                    found = self.hit(path)
                    if found:
                        return (*found, query, 200, headers)
            if "status" in route and "dest" not in route:
                return ("status", path, query, route["status"], headers)
            if not route.get("continue") and phase is None and "dest" in route:
                break
        found = self.hit(path)
        if found:
            return (*found, query, 200, headers)
        return ("status", path, query, 404, headers)


# --- check -------------------------------------------------------------------------------------


def check(results: Results) -> None:
    vercel_json = load(os.path.join(ROOT, "vercel.json"))
    router = Router(OUTPUT)
    results.check("config.json is Build Output API v3", router.config.get("version") == 3, str(router.config.get("version")))

    expected = {"/" + name[: -len(".rs")]: settings for name, settings in vercel_json["functions"].items()}
    results.check("exactly the functions vercel.json names", sorted(router.functions) == sorted(expected),
                  f"built {sorted(router.functions)}, vercel.json {sorted(expected)}")
    for route, settings in expected.items():
        config = router.functions.get(route, {})
        results.check(f"{route}: maxDuration {settings['maxDuration']}", config.get("maxDuration") == settings["maxDuration"],
                      str(config.get("maxDuration")))
        results.check(f"{route}: streams responses", config.get("supportsResponseStreaming") is True)
        results.check(f"{route}: an executable runtime", config.get("runtime") == "executable"
                      and config.get("handler") in config.get("filePathMap", {}), json.dumps(config)[:200])
        executable = os.path.join(ROOT, config.get("filePathMap", {}).get(config.get("handler", ""), "missing"))
        with open(executable, "rb") if os.path.isfile(executable) else open(os.devnull, "rb") as f:
            elf = f.read(4) == b"\x7fELF"
        results.check(f"{route}: {os.path.relpath(executable, ROOT)} is an ELF executable",
                      elf and os.access(executable, os.X_OK), executable)
        triggers = [{k: t[k] for k in ("type", "topic")} for t in config.get("experimentalTriggers", [])]
        results.check(f"{route}: queue triggers as in vercel.json", triggers == settings.get("experimentalTriggers", []),
                      f"built {triggers}")
    consumers = [route for route, config in router.functions.items() if config.get("experimentalTriggers")]
    results.check("the queue trigger is on the consumer only", consumers == ["/api/queues/process-job"], str(consumers))
    results.check("the crons of vercel.json", router.config.get("crons") == vercel_json.get("crons"),
                  f"built {router.config.get('crons')}")

    # Rewrites and headers, by where a request actually lands.
    cases = [
        ("/.well-known/oauth-protected-resource", "function", "/api/oauth-protected-resource", ""),
        ("/.well-known/oauth-protected-resource/api/mcp", "function", "/api/oauth-protected-resource", ""),
        ("/api/examples/minimal", "function", "/api/examples", "example=minimal"),
        ("/api/mcp", "function", "/api/mcp", ""),
        ("/", "static", "/", ""),
    ]
    for source, kind, path, query in cases:
        got = router.resolve(source)
        results.check(f"route {source} -> {kind} {path}{'?' + query if query else ''}",
                      got[0] == kind and got[1] == path and query in got[2], str(got[:3]))
    for rewrite in vercel_json.get("rewrites", []):
        source = rewrite["source"].replace(":name", "minimal")
        path, _, query = rewrite["destination"].replace(":name", "minimal").partition("?")
        got = router.resolve(source)
        results.check(f"rewrite {rewrite['source']} lands on {rewrite['destination']}",
                      got[0] == "function" and got[1] == path and query in got[2], str(got[:3]))
    for rule in vercel_json.get("headers", []):
        wanted = {h["key"]: h["value"] for h in rule["headers"]}
        got = router.resolve(rule["source"])[4]
        results.check(f"headers of {rule['source']}", all(got.get(k) == v for k, v in wanted.items()), str(got))
    for private in ("/api/queues/process-job", "/src/lib.rs", "/tests/fixtures/rsa_private.pem", "/Cargo.lock",
                    "/.ci/run", "/api/mcp.rs", "/vercel.json"):
        got = router.resolve(private)
        results.check(f"{private} is not served", got[0] == "status" and got[3] == 404, str(got[:4]))

    static_root = os.path.join(OUTPUT, "static")
    public_root = os.path.join(ROOT, "public")

    def tree(base):
        found = {}
        for directory, _, files in os.walk(base):
            for name in files:
                path = os.path.join(directory, name)
                with open(path, "rb") as f:
                    found[os.path.relpath(path, base)] = hashlib.sha256(f.read()).hexdigest()
        return found

    static, public = tree(static_root), tree(public_root)
    results.check("the static output is public/, nothing more", static == public,
                  f"extra {sorted(set(static) - set(public))[:10]}, missing {sorted(set(public) - set(static))[:10]}")

    # What `vercel deploy` uploads, as the pinned CLI decides it (.vercelignore applied).
    def upload(mode: str) -> list[str]:
        listing = subprocess.run(["node", os.path.join(ROOT, "scripts", "vercel", "upload-files.mjs"), ROOT, mode],
                                 capture_output=True, text=True, check=True)
        return [line for line in listing.stdout.splitlines() if os.path.isfile(os.path.join(ROOT, line))]

    executables = sorted(config["filePathMap"][config["handler"]] for config in router.functions.values())
    source = upload("source")
    allowed = ("api/", "src/", "public/")
    stray = [f for f in source if not f.startswith(allowed) and f not in ("Cargo.toml", "Cargo.lock",
                                                                           "vercel.json") and f not in executables]
    results.check("a source deploy uploads only what the build needs", not stray, f"also uploads {stray[:10]}")
    for needed in ("Cargo.toml", "Cargo.lock", "vercel.json", "api/mcp.rs", "src/lib.rs", "public/index.html"):
        results.check(f"a source deploy uploads {needed}", needed in source)
    prebuilt = upload("prebuilt")
    outside = [f for f in prebuilt if not f.startswith(".vercel/output/") and f not in executables]
    results.check("a prebuilt deploy uploads .vercel/output and the five executables, nothing else",
                  not outside and all(e in prebuilt for e in executables),
                  f"extra {outside[:10]}, missing {[e for e in executables if e not in prebuilt]}")


# --- smoke -------------------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def hs256_token(secret: str, claims: dict) -> str:
    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    tag = hmac.new(secret.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(tag)}"


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def start_router(router: Router, ports: dict[str, int], port: int) -> Server:
    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def route(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            kind, path, query, status, extra = router.resolve(self.path)
            self.close_connection = True
            if kind == "status":
                self.send_response(status)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            if kind == "static":
                with open(router.static_file(path), "rb") as f:
                    data = f.read()
                self.send_response(200)
                self.send_header("Content-Type", "text/html; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)
                return
            upstream = http.client.HTTPConnection("127.0.0.1", ports[path], timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("connection", "content-length")}
            smoke.relay(self, upstream, path + ("?" + query if query else ""), body, headers, extra)

        do_GET = do_POST = do_DELETE = do_OPTIONS = do_HEAD = route

    server = Server(("127.0.0.1", port), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def start_function(route: str, executable: str, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    port = free_port()
    process = subprocess.Popen([executable], env={**env, "VERCEL_DEV_PORT": str(port)}, cwd=ROOT,
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 30
    lines = []
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        lines.append(line)
        if re.search(r"Dev server listening:\s*(\d+)", line):
            # Keep draining its output so a chatty function never blocks on a full pipe.
            threading.Thread(target=lambda: [None for _ in process.stdout], daemon=True).start()
            return process, port
    process.kill()
    raise SystemExit(f"vercel_output: {route} did not start:\n{''.join(lines)}")


def run_smoke(results: Results) -> None:
    router = Router(OUTPUT)
    server_port = free_port()
    resource = f"http://127.0.0.1:{server_port}/api/mcp"
    hs_secret = secrets.token_hex(32)
    cron_secret = secrets.token_hex(16)
    prefix = f"smoke-{os.getpid()}-{secrets.token_hex(3)}"
    env = {
        "PATH": os.environ.get("PATH", ""),
        "MCP_STATE_SECRET": f"smoke={secrets.token_hex(32)}",
        "REDIS_URL": os.environ.get("REDIS_URL", "redis://127.0.0.1:6379"),
        "MCP_REDIS_PREFIX": prefix,
        "CRON_SECRET": cron_secret,
        "MCP_AUTH_HS256_SECRET": hs_secret,
        "MCP_AUTH_ISSUER": "https://issuer.smoke.test",
        "MCP_RESOURCE_URL": resource,
        "MCP_JOB_STEP_MS": "10",
    }
    processes, ports = [], {}
    try:
        for route, config in router.functions.items():
            executable = os.path.join(ROOT, config["filePathMap"][config["handler"]])
            process, port = start_function(route, executable, env)
            processes.append(process)
            ports[route] = port
        print(f"started {len(processes)} functions", flush=True)
        # The router listens where MCP_RESOURCE_URL says, so the audience and metadata agree.
        start_router(router, ports, server_port)

        now = int(time.time())
        token = hs256_token(hs_secret, {"iss": "https://issuer.smoke.test", "aud": resource, "sub": "smoke-user",
                                        "iat": now, "nbf": now, "exp": now + 600, "scope": "mcp:read mcp:write"})
        code = smoke.main([resource, "--token", token, "--origin", "http://localhost:5173", "--job-timeout", "60",
                           "--resource", resource])
        results.check("scripts/smoke.py against the built functions", code == 0, f"exit {code}")

        endpoint = smoke.Endpoint(resource, {}, 30)
        sweep = endpoint.request("GET", "/api/cron/sweep-jobs")
        results.check("cron sweep without CRON_SECRET: 401", sweep.status == 401, str(sweep.status))
        sweep = endpoint.request("GET", "/api/cron/sweep-jobs", headers={"Authorization": f"Bearer {cron_secret}"})
        results.check("cron sweep with CRON_SECRET: 200 and a report", sweep.status == 200
                      and "failedStuck" in json.loads(sweep.body or b"{}"), f"{sweep.status} {sweep.body[:200]!r}")
        # Decided by the build's own routes: none may lead to the consumer (the router above
        # hides functions with a trigger, so a request through it would prove nothing).
        to_consumer = [route for route in router.config.get("routes", [])
                       if "queues" in str(route.get("src", "")) + str(route.get("dest", ""))]
        results.check("the queue consumer has no public route", not to_consumer, json.dumps(to_consumer)[:200])
        consumer = http.client.HTTPConnection("127.0.0.1", ports["/api/queues/process-job"], timeout=30)
        consumer.request("POST", "/api/queues/process-job", body=b"{}", headers={"Content-Type": "application/json"})
        refused = consumer.getresponse()
        refused.read()
        results.check("the consumer runs and refuses an invalid delivery (400)", refused.status == 400,
                      str(refused.status))
        landing = endpoint.request("GET", "/")
        results.check("the landing page is served", landing.status == 200 and b"/api/mcp" in landing.body,
                      str(landing.status))
        # Each example route is its own protected resource: its token names its own URL.
        example_url = resource.replace("/api/mcp", "/api/examples/minimal")
        example_token = hs256_token(hs_secret, {"iss": "https://issuer.smoke.test", "aud": example_url,
                                                "sub": "smoke-user", "iat": now, "nbf": now, "exp": now + 600})
        refused = smoke.Endpoint(example_url, {"Authorization": f"Bearer {token}"}, 30).rpc("tools/list")
        results.check("an example route refuses a token for /api/mcp", refused.status == 401, str(refused.status))
        example = smoke.Endpoint(example_url, {"Authorization": f"Bearer {example_token}"}, 30).rpc("tools/list")
        listed = [tool["name"] for tool in example.json().get("result", {}).get("tools", [])] if example.status == 200 else []
        results.check("an example route through its rewrite", listed == ["echo"], f"{example.status} {listed}")
        document = endpoint.request("GET", "/.well-known/oauth-protected-resource/api/examples/minimal")
        named = json.loads(document.body or b"{}").get("resource") if document.status == 200 else None
        results.check("an example's own metadata through its rewrite", named == example_url, f"{document.status} {named}")
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
        subprocess.run(["redis-cli", "-u", env["REDIS_URL"], "--no-auth-warning", "EVAL",
                        "for _, k in ipairs(redis.call('KEYS', ARGV[1])) do redis.call('DEL', k) end", "0",
                        prefix + ":*"], capture_output=True)


def main() -> int:
    if len(sys.argv) != 2 or sys.argv[1] not in ("check", "smoke"):
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    if not os.path.isdir(OUTPUT):
        print(f"vercel_output: {OUTPUT} is missing: run scripts/vercel-build.sh first", file=sys.stderr)
        return 1
    results = Results()
    (check if sys.argv[1] == "check" else run_smoke)(results)
    print(f"vercel output {sys.argv[1]}: {results.passed} passed, {results.failed} failed", flush=True)
    return 1 if results.failed else 0


if __name__ == "__main__":
    sys.exit(main())
