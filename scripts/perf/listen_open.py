#!/usr/bin/env python3
"""How long a listen stream naming many tasks takes to send their states, with Redis a network
hop away rather than on loopback.

    python3 scripts/perf/listen_open.py label=<server binary> [label=<binary> ...]

Each binary must serve the conformance fixture's `slow_compute` tool with the tasks extension
(`cargo build --release --example conformance`). Between it and Redis (127.0.0.1:6379, or
PERF_REDIS_URL's host and port) sits a proxy that delays every chunk LINK_DELAY_MS (0.5 ms) each
way: a round trip of about 1 ms, as to a managed Redis in the same region, and pipelined requests
stay pipelined. Each server gets TASKS (256, the most a stream may name) completed tasks, then
ROUNDS (5) streams naming all of them are timed from the request to the last task's state.
"""
import asyncio, http.client, json, os, statistics, sys, threading, time, urllib.parse, importlib.util

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("run", os.path.join(here, "run.py")); run = importlib.util.module_from_spec(spec); spec.loader.exec_module(run)

DELAY = float(os.environ.get("LINK_DELAY_MS", "0.5")) / 1000
TASKS = int(os.environ.get("TASKS", "256"))
ROUNDS = int(os.environ.get("ROUNDS", "5"))
META = dict(run.META, **{"io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}}})


def slow_link(listen_port):
    """A TCP proxy to Redis on `listen_port` that delays each chunk, in order, by DELAY."""
    target = urllib.parse.urlparse(run.REDIS_URL)
    loop = asyncio.new_event_loop()

    async def pipe(reader, writer):
        while data := await reader.read(65536):
            loop.call_later(DELAY, writer.write, data)
        loop.call_later(DELAY, writer.close)

    async def accepted(client_reader, client_writer):
        redis_reader, redis_writer = await asyncio.open_connection(target.hostname, target.port or 6379)
        await asyncio.gather(pipe(client_reader, redis_writer), pipe(redis_reader, client_writer))

    async def serve():
        server = await asyncio.start_server(accepted, "127.0.0.1", listen_port)
        async with server:
            await server.serve_forever()

    threading.Thread(target=lambda: loop.run_until_complete(serve()), daemon=True).start()


def listen_ms(port, task_ids):
    """Milliseconds from sending a listen request naming `task_ids` to its last task's state."""
    body = json.dumps({"jsonrpc": "2.0", "id": "L", "method": "subscriptions/listen",
                       "params": {"notifications": {"taskIds": task_ids}, "_meta": META}})
    headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
               "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "subscriptions/listen"}
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    started = time.perf_counter()
    connection.request("POST", "/api/mcp", body, headers)
    response = connection.getresponse()
    assert response.status == 200, f"listen: HTTP {response.status}"
    states, statuses = set(), set()
    deadline = started + 20
    while len(states) < len(task_ids):
        assert time.perf_counter() < deadline, f"after 20 s, {len(states)} of {len(task_ids)} tasks: {sorted(statuses)}"
        line = response.readline()
        assert line, f"the stream ended after {len(states)} of {len(task_ids)} tasks"
        if line.startswith(b"data:"):
            message = json.loads(line[5:])
            if message.get("method") == "notifications/tasks":
                states.add(message["params"]["taskId"])
                statuses.add(message["params"]["status"])
    elapsed = (time.perf_counter() - started) * 1000
    assert statuses == {"completed"}, f"the tasks were not all completed: {sorted(statuses)}"
    connection.close()
    return elapsed


def main():
    if not sys.argv[1:] or not all("=" in arg for arg in sys.argv[1:]) or not run.redis_up():
        sys.exit(__doc__ + "\n(and Redis must be up)")
    builds = dict(arg.split("=", 1) for arg in sys.argv[1:])
    proxy_port = run.free_port()
    slow_link(proxy_port)
    # The same URL (scheme, credentials, database) with the proxy's address.
    target = urllib.parse.urlsplit(run.REDIS_URL)
    credentials = target.netloc.rpartition("@")[0]
    redis_url = target._replace(netloc=(credentials + "@" if credentials else "") + f"127.0.0.1:{proxy_port}").geturl()
    for label, binary in builds.items():
        prefix = f"perf-listen:{os.getpid()}:{label}"
        env = dict(run.server_env(prefix, True), REDIS_URL=redis_url)
        port = run.free_port()
        server = run.spawn(binary, port, env)
        try:
            call = {"name": "slow_compute", "arguments": {"seconds": 0, "label": "x"}, "_meta": META}
            run.wait_ready(port, lambda p: run.post(p, "tools/list", {"_meta": META}))
            task_ids = [run.post(port, "tools/call", call, name="slow_compute")["result"]["taskId"] for _ in range(TASKS)]
            times = [listen_ms(port, task_ids) for _ in range(ROUNDS)]
            print(f"{label}: {TASKS} tasks, link {DELAY * 2000:.1f} ms a round trip: "
                  + " ".join(f"{t:.1f}" for t in times) + f" ms | median {statistics.median(times):.1f} ms")
        finally:
            server.kill(); server.wait()
            run.forget_redis_keys(prefix)


if __name__ == "__main__":
    main()
