"""The official MCP Python SDK as a 2025-11-25 server that polls over SSE: its `slow` tool
reports progress, closes the call's stream (`close_sse_stream`), and answers later, so a client
gets the answer only by resuming the stream with `Last-Event-ID`. It refuses the 2026-07-28
header with 400, as a server that predates that revision does, so a client falls back to
`initialize`. It listens on a free loopback port, which it prints ("listening on PORT"), and
writes each replay to stderr ("replayed after <id>").

    python tests/sdk/polling_server.py
"""

import socket
import sys

import anyio
import uvicorn
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.streamable_http import EventMessage, EventStore

class MemoryEvents(EventStore):
    """Every event of the process, in order; ids are their positions."""

    def __init__(self):
        self.events = []

    async def store_event(self, stream_id, message):
        self.events.append((stream_id, message))
        return str(len(self.events))

    async def replay_events_after(self, last_event_id, send_callback):
        if not last_event_id.isdigit() or not 0 < int(last_event_id) <= len(self.events):
            return None
        print(f"replayed after {last_event_id}", file=sys.stderr, flush=True)
        stream = self.events[int(last_event_id) - 1][0]
        for position, (owner, message) in enumerate(self.events[int(last_event_id) :], int(last_event_id) + 1):
            if owner == stream and message is not None:
                await send_callback(EventMessage(message, str(position)))
        return stream


server = MCPServer("polling")


@server.tool()
async def slow(ctx: Context) -> str:
    """Works for a moment, closing its stream halfway; answers "resumed"."""
    await ctx.report_progress(1, 2)
    await ctx.close_sse_stream()
    await anyio.sleep(0.5)
    await ctx.report_progress(2, 2)
    return "resumed"


app = server.streamable_http_app(event_store=MemoryEvents(), retry_interval=200)


async def only_2025(scope, receive, send):
    headers = dict(scope.get("headers") or []) if scope["type"] == "http" else {}
    if headers.get(b"mcp-protocol-version") == b"2026-07-28":
        await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"text/plain")]})
        await send({"type": "http.response.body", "body": b"Unsupported protocol version"})
        return
    await app(scope, receive, send)


listener = socket.socket()
listener.bind(("127.0.0.1", 0))
print(f"listening on {listener.getsockname()[1]}", flush=True)
uvicorn.Server(uvicorn.Config(only_2025, log_level="warning", lifespan="on")).run(sockets=[listener])
