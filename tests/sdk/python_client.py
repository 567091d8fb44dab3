"""The official MCP Python SDK against a running server: it negotiates 2026-07-28, lists and
calls tools, gets a schema refusal as a tool error, and answers an elicitation through MRTR
(accepted, then declined). Exits non-zero on the first failed check.

    python tests/sdk/python_client.py http://127.0.0.1:3000
"""

import asyncio
import sys

import mcp_types as types
from mcp import Client

BASE = sys.argv[1].rstrip("/")


def check(condition, what):
    if not condition:
        raise SystemExit(f"python sdk: {what}")
    print(f"ok   {what}")


async def core():
    async with Client(f"{BASE}/api/mcp") as client:
        check(client.protocol_version == "2026-07-28", f"negotiates 2026-07-28 (got {client.protocol_version})")
        names = [tool.name for tool in (await client.list_tools()).tools]
        check("echo" in names and "submit_job" in names, f"lists the default tools ({names})")
        echoed = await client.call_tool("echo", {"message": "from the python sdk"})
        check(not echoed.is_error and echoed.content[0].text == "from the python sdk", "calls echo")
        refused = await client.call_tool("echo", {"message": 5})
        check(refused.is_error and "expected string" in refused.content[0].text, "a schema refusal is a tool error")


async def elicitation(answer, expected):
    async def on_elicit(context, params):
        return types.ElicitResult(action=answer, content={"approved": True} if answer == "accept" else None)

    async with Client(f"{BASE}/api/examples/elicitation", elicitation_callback=on_elicit) as client:
        result = await client.call_tool("book_meeting", {"topic": "Q3 roadmap"})
        text = result.content[0].text
        check(expected in text, f"an elicitation answered {answer!r} through MRTR ({text[:60]!r})")


async def main():
    await core()
    await elicitation("accept", "Booked")
    await elicitation("decline", "Not booked")


asyncio.run(main())
