"""Times one `query()` of the Claude Agent SDK for Python through the CLI at argv[1]: prints
`{"first": s, "total": s}`, the seconds from the call to the first streamed event (the reply's
first token) and to the result. The CLI's environment is this process's."""

import asyncio
import json
import sys
import time

from claude_agent_sdk import ClaudeAgentOptions, ResultMessage, query


async def main():
    started = time.monotonic()
    first = None
    options = ClaudeAgentOptions(cli_path=sys.argv[1], include_partial_messages=True)
    async for message in query(prompt="say hi", options=options):
        if first is None and type(message).__name__ in ("StreamEvent", "AssistantMessage"):
            first = time.monotonic() - started
        if isinstance(message, ResultMessage):
            if message.is_error:
                sys.exit(f"the run failed: {message.result}")
            print(json.dumps({"first": first, "total": time.monotonic() - started}))


asyncio.run(main())
