#!/usr/bin/env python3
"""End-to-end smoke test of one deployment of this server (or of the local run).

    scripts/smoke.sh URL [--bypass SECRET] [--token TOKEN] [--origin ORIGIN] [--no-conformance]

URL is the MCP endpoint, e.g. https://<deployment>.vercel.app/api/mcp. Every request carries
`x-vercel-protection-bypass: SECRET` with --bypass (Deployment Protection's automation bypass) and
`Authorization: Bearer TOKEN` with --token. Checks, in order:

  - server/discover, tools/list and an echo call over 2026-07-28;
  - a job through whatever queue the deployment runs (submit_job, get_job_status until done,
    get_job_result), so the consumer and the store are exercised, not only /api/mcp;
  - the RFC 9728 metadata at both well-known paths, naming this endpoint as the resource;
  - a `subscriptions/listen` stream: SSE, its first event the acknowledgement (read, then closed);
  - with --token: the 401 challenge for a request without it, pointing at that metadata;
  - with --origin: the CORS preflight from that origin;
  - the official conformance suite's server scenarios that hold for any deployment of this
    server (not the fixture-only ones), run against URL through a loopback proxy that adds the
    headers above. Needs the suite installed (`npm ci` in conformance/, which the script runs).

Only the standard library; prints one line per check and `smoke: N passed, N failed`.
"""

from __future__ import annotations

import argparse
import http.client
import http.server
import json
import os
import secrets
import socketserver
import subprocess
import sys
import threading
import time
import urllib.parse

PROTOCOL = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": PROTOCOL,
    "io.modelcontextprotocol/clientCapabilities": {},
    "io.modelcontextprotocol/clientInfo": {"name": "smoke", "version": "1"},
}
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Server scenarios that hold for any deployment of this server: they need no fixture tool.
# (scenario, spec version); dns-rebinding-protection only runs against a loopback URL.
CONFORMANCE = [
    ("server-initialize", "2025-11-25"),
    ("server-session-lifecycle", "2025-11-25"),
    ("tools-list", "2025-11-25"),
    ("tools-list", "2026-07-28"),
    ("http-header-validation", "2026-07-28"),
]


class Response:
    def __init__(self, status: int, headers: http.client.HTTPMessage, body: bytes):
        self.status, self.headers, self.body = status, headers, body

    def json(self):
        text = self.body.decode("utf-8", "replace")
        if self.headers.get("content-type", "").startswith("text/event-stream"):
            # The last `data:` line of an SSE answer is the response.
            data = [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]
            text = data[-1] if data else ""
        return json.loads(text)


class Endpoint:
    """The MCP endpoint and the headers every request carries."""

    def __init__(self, url: str, headers: dict[str, str], timeout: float):
        self.url = urllib.parse.urlsplit(url)
        if self.url.scheme not in ("http", "https") or not self.url.hostname:
            raise SystemExit(f"smoke: {url!r} is not an http(s) URL")
        self.headers = headers
        self.timeout = timeout
        self.next_id = 0

    def origin(self) -> str:
        return f"{self.url.scheme}://{self.url.netloc}"

    def request(self, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None,
                auth: bool = True) -> Response:
        connection_type = http.client.HTTPSConnection if self.url.scheme == "https" else http.client.HTTPConnection
        connection = connection_type(self.url.hostname, self.url.port, timeout=self.timeout)
        merged = {k: v for k, v in self.headers.items() if auth or k.lower() != "authorization"}
        merged.update(headers or {})
        try:
            connection.request(method, path, body=body, headers=merged)
            reply = connection.getresponse()
            return Response(reply.status, reply.headers, reply.read())
        finally:
            connection.close()

    def rpc(self, method: str, params: dict | None = None, name: str | None = None, auth: bool = True) -> Response:
        self.next_id += 1
        params = dict(params or {})
        params["_meta"] = META
        body = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}).encode()
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": PROTOCOL,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        return self.request("POST", self.url.path or "/", body, headers, auth)

    def call_tool(self, name: str, arguments: dict) -> dict:
        reply = self.rpc("tools/call", {"name": name, "arguments": arguments}, name=name)
        expect(reply.status == 200, f"tools/call {name}: HTTP {reply.status}: {reply.body[:300]!r}")
        message = reply.json()
        expect("result" in message, f"tools/call {name}: {message.get('error')}")
        result = message["result"]
        expect(not result.get("isError"), f"tools/call {name} failed: {text_of(result)}")
        return result


class CheckFailed(Exception):
    pass


def expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def text_of(result: dict) -> str:
    return "".join(c.get("text", "") for c in result.get("content", []) if c.get("type") == "text")


def payload_of(result: dict) -> dict:
    if isinstance(result.get("structuredContent"), dict):
        return result["structuredContent"]
    return json.loads(text_of(result))


# --- the checks -----------------------------------------------------------------------------


def check_discover(endpoint: Endpoint, _: argparse.Namespace) -> str:
    reply = endpoint.rpc("server/discover")
    expect(reply.status == 200, f"HTTP {reply.status}: {reply.body[:300]!r}")
    result = reply.json().get("result", {})
    expect("capabilities" in result, f"no capabilities in {result}")
    expect(PROTOCOL in result.get("supportedVersions", []), f"{PROTOCOL} not in supportedVersions: {result}")
    expect(reply.headers.get("x-mcp-request-id"), "no x-mcp-request-id header")
    return f"tools={'tools' in result['capabilities']}"


def check_tools(endpoint: Endpoint, _: argparse.Namespace) -> str:
    names: list[str] = []
    cursor = None
    for _page in range(20):
        reply = endpoint.rpc("tools/list", {"cursor": cursor} if cursor else {})
        expect(reply.status == 200, f"HTTP {reply.status}: {reply.body[:300]!r}")
        result = reply.json()["result"]
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if not cursor:
            break
    for needed in ("echo", "submit_job", "get_job_status", "get_job_result"):
        expect(needed in names, f"{needed} is not listed (listed: {', '.join(names) or 'nothing'})")
    return f"{len(names)} tools"


def check_echo(endpoint: Endpoint, _: argparse.Namespace) -> str:
    message = f"smoke {secrets.token_hex(4)}"
    result = endpoint.call_tool("echo", {"message": message})
    expect(message in text_of(result), f"echo answered {text_of(result)!r}")
    return "echoed"


def check_job(endpoint: Endpoint, args: argparse.Namespace) -> str:
    steps = 3
    submitted = payload_of(endpoint.call_tool("submit_job", {"steps": steps}))
    handle = submitted.get("jobId")
    expect(isinstance(handle, str) and handle, f"no jobId in {submitted}")
    started = time.monotonic()
    while True:
        status = payload_of(endpoint.call_tool("get_job_status", {"jobId": handle}))
        if status.get("state") == "done":
            break
        expect(status.get("state") in ("pending", "running"), f"the job ended {status.get('state')}: {status}")
        expect(time.monotonic() - started < args.job_timeout,
               f"not done after {args.job_timeout:.0f} s ({status.get('completedSteps')}/{steps} steps): "
               "is the queue consumer wired and REDIS_URL set?")
        time.sleep(0.5)
    result = payload_of(endpoint.call_tool("get_job_result", {"jobId": handle}))
    expect(result.get("result") == {"sum": 3, "stepsRun": steps}, f"unexpected result {result}")
    return f"done in {time.monotonic() - started:.1f} s"


def check_listen(endpoint: Endpoint, _: argparse.Namespace) -> str:
    """subscriptions/listen opens an SSE stream whose first event acknowledges the subscription;
    the stream stays open, so only that event is read before closing it."""
    endpoint.next_id += 1
    body = json.dumps({"jsonrpc": "2.0", "id": endpoint.next_id, "method": "subscriptions/listen",
                       "params": {"notifications": {"toolsListChanged": True}, "_meta": META}}).encode()
    headers = {**endpoint.headers, "Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": PROTOCOL, "Mcp-Method": "subscriptions/listen"}
    connection_type = http.client.HTTPSConnection if endpoint.url.scheme == "https" else http.client.HTTPConnection
    connection = connection_type(endpoint.url.hostname, endpoint.url.port, timeout=endpoint.timeout)
    try:
        connection.request("POST", endpoint.url.path or "/", body=body, headers=headers)
        reply = connection.getresponse()
        if reply.status != 200:  # (read only then: the message is built before `expect` sees it)
            raise CheckFailed(f"HTTP {reply.status}: {reply.read(300)!r}")
        kind = reply.headers.get("content-type", "")
        expect(kind.startswith("text/event-stream"), f"content-type {kind!r}")
        received = b""
        while b"\n\n" not in received:  # the first event ends at a blank line
            more = reply.read1(65536)  # what has arrived, the chunked encoding undone
            expect(more != b"", f"the stream ended before its first event: {received!r}")
            received += more
        lines = received.split(b"\n\n", 1)[0].decode().splitlines()
        data = [line[5:].strip() for line in lines if line.startswith("data:")]
        expect(len(data) == 1, f"one data line in {lines}")
        message = json.loads(data[0])
        expect(message.get("method") == "notifications/subscriptions/acknowledged", f"first event {message}")
        return "acknowledged over SSE"
    finally:
        connection.close()


def check_metadata(endpoint: Endpoint, args: argparse.Namespace) -> str:
    resource = None
    for path in ("/.well-known/oauth-protected-resource", "/.well-known/oauth-protected-resource" + endpoint.url.path):
        reply = endpoint.request("GET", path, auth=False)
        expect(reply.status == 200, f"{path}: HTTP {reply.status}")
        document = json.loads(reply.body)
        resource = document.get("resource")
        expect(isinstance(resource, str) and resource.endswith(endpoint.url.path),
               f"{path}: resource {resource!r} does not name {endpoint.url.path}")
        # Where the configured resource is known, nothing the request carried may change it.
        expect(args.resource is None or resource == args.resource,
               f"{path}: resource {resource!r}, not the configured {args.resource!r}")
    return f"resource {resource}"


def check_challenge(endpoint: Endpoint, _: argparse.Namespace) -> str:
    reply = endpoint.rpc("tools/list", auth=False)
    expect(reply.status == 401, f"a request without a token got HTTP {reply.status}, not 401")
    challenge = reply.headers.get("www-authenticate", "")
    expect(challenge.startswith("Bearer "), f"WWW-Authenticate is {challenge!r}")
    expect("resource_metadata=" in challenge, f"no resource_metadata in {challenge!r}")
    return "401 with a Bearer challenge"


def check_cors(endpoint: Endpoint, args: argparse.Namespace) -> str:
    reply = endpoint.request("OPTIONS", endpoint.url.path, headers={
        "Origin": args.origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "content-type, authorization, mcp-protocol-version, mcp-method",
    }, auth=False)
    expect(reply.status == 204, f"preflight got HTTP {reply.status}")
    expect(reply.headers.get("access-control-allow-origin") == args.origin,
           f"Access-Control-Allow-Origin is {reply.headers.get('access-control-allow-origin')!r}")
    allowed = reply.headers.get("access-control-allow-headers", "").lower()
    expect("authorization" in allowed and "mcp-method" in allowed, f"Allow-Headers is {allowed!r}")
    return f"preflight from {args.origin} allowed"


# --- the conformance suite, through a header-adding proxy --------------------------------------


class Proxy(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True


def relay(handler: http.server.BaseHTTPRequestHandler, upstream: http.client.HTTPConnection, path: str,
          body: bytes | None, headers: dict[str, str], extra: dict[str, str] | None = None) -> None:
    """Sends the handler's request to `upstream` and streams the answer back chunk by chunk (so SSE
    events arrive as they are written), adding `extra` headers; the connection closes after."""
    try:
        upstream.request(handler.command, path, body=body, headers=headers)
        reply = upstream.getresponse()
        handler.send_response(reply.status)
        for key, value in reply.getheaders():
            if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                handler.send_header(key, value)
        for key, value in (extra or {}).items():
            handler.send_header(key, value)
        handler.send_header("Transfer-Encoding", "chunked")
        handler.send_header("Connection", "close")
        handler.end_headers()
        while chunk := reply.read1(65536):
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError, http.client.IncompleteRead):
        # One side hung up mid-stream (a client that read the first event of a listen stream, a
        # server stopped at the end of a run): the relay ends with it. What either side made of
        # it is checked by the side that asserts, not here.
        pass
    finally:
        upstream.close()
        handler.close_connection = True


def start_proxy(endpoint: Endpoint) -> tuple[Proxy, str]:
    """A loopback forward proxy to the endpoint's origin that adds the smoke headers (the suite
    has no header option). Streams SSE answers through as they come."""

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *_):
            pass

        def forward(self):
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else None
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection", "content-length")}
            headers.update(endpoint.headers)
            cls = http.client.HTTPSConnection if endpoint.url.scheme == "https" else http.client.HTTPConnection
            upstream = cls(endpoint.url.hostname, endpoint.url.port, timeout=endpoint.timeout)
            relay(self, upstream, self.path, body, headers)

        do_GET = do_POST = do_DELETE = do_OPTIONS = forward

    proxy = Proxy(("127.0.0.1", 0), Handler)
    threading.Thread(target=proxy.serve_forever, daemon=True).start()
    return proxy, f"http://127.0.0.1:{proxy.server_address[1]}{endpoint.url.path}"


def run_conformance(endpoint: Endpoint, report) -> None:
    suite_dir = os.path.join(ROOT, "conformance")
    node = os.path.join(suite_dir, "node_modules", ".bin", "node")
    suite = os.path.join(suite_dir, "node_modules", "@modelcontextprotocol", "conformance", "dist", "index.js")
    if not (os.path.exists(node) and os.path.exists(suite)):
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--loglevel=error"], cwd=suite_dir, check=True)
    loopback = endpoint.url.hostname in ("127.0.0.1", "localhost", "::1")
    proxy = None
    url = endpoint.url.geturl()
    scenarios = list(CONFORMANCE)
    if endpoint.headers:
        proxy, url = start_proxy(endpoint)
    elif loopback:
        # Only a direct loopback run can show the DNS-rebinding defence (the suite sends a
        # localhost Origin, which a deployment allows only when configured to).
        scenarios.append(("dns-rebinding-protection", "2026-07-28"))
    try:
        for scenario, version in scenarios:
            name = f"conformance {scenario} ({version})"
            started = time.monotonic()
            run = subprocess.run(
                [node, suite, "server", "--url", url, "--scenario", scenario, "--spec-version", version],
                cwd=ROOT, capture_output=True, text=True, timeout=180, env={**os.environ, "NO_COLOR": "1"},
            )
            summary = [line for line in run.stdout.splitlines() if line.startswith("Passed:")]
            failures = [line.strip() for line in run.stdout.splitlines() if "FAILURE" in line]
            ok = run.returncode == 0 and summary and " 0 failed" in summary[-1]
            detail = summary[-1] if summary else (run.stderr.strip().splitlines() or ["no summary"])[-1]
            report(name, ok, detail if ok else "; ".join(failures[:3]) or detail, time.monotonic() - started)
    finally:
        if proxy:
            proxy.shutdown()


# --- main --------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="the MCP endpoint, e.g. https://<deployment>/api/mcp")
    parser.add_argument("--bypass", help="Deployment Protection's automation bypass secret")
    parser.add_argument("--token", help="an access token for the endpoint (checks the 401 challenge too)")
    parser.add_argument("--origin", help="a browser origin the deployment allows (checks the CORS preflight)")
    parser.add_argument("--no-conformance", action="store_true", help="skip the conformance scenarios")
    parser.add_argument("--job-timeout", type=float, default=90.0, help="seconds a 3-step job may take")
    parser.add_argument("--timeout", type=float, default=30.0, help="seconds per HTTP request")
    parser.add_argument("--resource", help="the resource the metadata must name exactly (MCP_RESOURCE_URL)")
    args = parser.parse_args(argv)

    headers = {}
    if args.bypass:
        headers["x-vercel-protection-bypass"] = args.bypass
    if args.token:
        headers["Authorization"] = f"Bearer {args.token}"
    endpoint = Endpoint(args.url, headers, args.timeout)

    counts = {"passed": 0, "failed": 0}

    def report(name: str, ok: bool, detail: str, seconds: float) -> None:
        counts["passed" if ok else "failed"] += 1
        print(f"{'ok  ' if ok else 'FAIL'} {name} ({seconds:.1f} s): {detail}", flush=True)

    checks = [("server/discover", check_discover), ("tools/list", check_tools), ("echo", check_echo),
              ("job through the queue", check_job), ("protected-resource metadata", check_metadata),
              ("listen stream over SSE", check_listen)]
    if args.token:
        checks.append(("401 challenge without the token", check_challenge))
    if args.origin:
        checks.append(("CORS preflight", check_cors))
    print(f"smoke: {endpoint.origin()}{endpoint.url.path}", flush=True)
    for name, check in checks:
        started = time.monotonic()
        try:
            detail, ok = check(endpoint, args), True
        except CheckFailed as failure:
            detail, ok = str(failure), False
        except (OSError, http.client.HTTPException, ValueError, KeyError, TypeError) as error:
            detail, ok = f"{type(error).__name__}: {error}", False
        report(name, ok, detail, time.monotonic() - started)
    if not args.no_conformance:
        run_conformance(endpoint, report)
    print(f"smoke: {counts['passed']} passed, {counts['failed']} failed", flush=True)
    return 1 if counts["failed"] else 0


if __name__ == "__main__":
    sys.exit(main())
