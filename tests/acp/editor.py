"""An editor for the ACP suite, built on the ACP Python SDK: it spawns the agent command given
on its command line, takes commands as JSON lines on stdin and reports what it sees as JSON
lines on stdout.

Commands: {"op": "initialize"}, {"op": "new", "cwd", "mcpServers"?, "additionalDirectories"?}, {"op": "load",
"sessionId", "cwd"}, {"op": "resume", "sessionId", "cwd"}, {"op": "list", "cwd"?},
{"op": "prompt", "sessionId", "prompt": [content blocks], "tag"}, {"op": "cancel",
"sessionId"}, {"op": "mode", "sessionId", "modeId"}, {"op": "option", "sessionId",
"configId", "value"}, {"op": "answer", "toolCallId", "optionId" (null: cancelled)},
{"op": "raw", "line"} (written to the agent as is), {"op": "quit"}.

Reports: {"op": "<command>", "result" | "error"} for each request (prompts report as
"prompt" with their tag, when they end), {"op": "update", "sessionId", "update"} for each
session/update, {"op": "permission", "sessionId", "toolCall", "options"} for each permission
request (answered by a later "answer" command).
"""

import asyncio
import json
import logging
import os
import sys

import acp
from acp import schema


class QuietCancelRequests(logging.Filter):
    """The SDK has no handler for `$/cancel_request` (the agent withdrawing a request) and logs
    each one as an error; the suite reads them from the agent's trace instead."""

    def filter(self, record):
        return "$/cancel_request" not in record.getMessage()


logging.getLogger().addFilter(QuietCancelRequests())


def emit(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def dump(model):
    if model is None:
        return None
    return model.model_dump(mode="json", by_alias=True, exclude_none=True)


class Editor:
    def __init__(self):
        self.answers = {}

    def on_connect(self, conn):
        pass

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        call = dump(tool_call)
        future = asyncio.get_running_loop().create_future()
        self.answers[call["toolCallId"]] = future
        emit({"op": "permission", "sessionId": session_id, "toolCall": call,
              "options": [dump(o) for o in options]})
        option = await future
        if option is None:
            return schema.RequestPermissionResponse(outcome=schema.DeniedOutcome(outcome="cancelled"))
        return schema.RequestPermissionResponse(
            outcome=schema.AllowedOutcome(outcome="selected", option_id=option))

    async def session_update(self, session_id, update, **kwargs):
        emit({"op": "update", "sessionId": session_id, "update": dump(update)})

    async def ext_method(self, method, params):
        return {}

    async def ext_notification(self, method, params):
        pass


async def run_request(op, call):
    try:
        result = await call
        emit({"op": op, "result": dump(result) if result is not None else None})
    except acp.RequestError as e:
        emit({"op": op, "error": {"code": e.code, "message": str(e), "data": e.data}})
    except Exception as e:  # noqa: BLE001 - every failure is reported to the test
        emit({"op": op, "error": {"message": repr(e)}})


async def main():
    editor = Editor()
    command = sys.argv[1:]
    async with acp.spawn_agent_process(editor, command[0], *command[1:], env=dict(os.environ)) as (conn, process):
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        tasks = set()

        def later(coro):
            task = asyncio.ensure_future(coro)
            tasks.add(task)
            task.add_done_callback(tasks.discard)

        while True:
            line = await reader.readline()
            if not line:
                break
            cmd = json.loads(line)
            op = cmd["op"]
            if op == "quit":
                break
            if op == "initialize":
                await (run_request(op, conn.initialize(
                    protocol_version=1,
                    client_capabilities=schema.ClientCapabilities(),
                    client_info=schema.Implementation(name="acp-suite", version="1"))))
            elif op == "new":
                await (run_request(op, conn.new_session(
                    cwd=cmd["cwd"], mcp_servers=cmd.get("mcpServers", []),
                    additional_directories=cmd.get("additionalDirectories"))))
            elif op == "load":
                await (run_request(op, conn.load_session(
                    cwd=cmd["cwd"], session_id=cmd["sessionId"], mcp_servers=[])))
            elif op == "resume":
                await (run_request(op, conn.resume_session(
                    cwd=cmd["cwd"], session_id=cmd["sessionId"], mcp_servers=[])))
            elif op == "list":
                await (run_request(op, conn.list_sessions(cwd=cmd.get("cwd"))))
            elif op == "prompt":
                blocks = [schema.TextContentBlock(type="text", text=b["text"]) if b["type"] == "text"
                          else schema.ResourceContentBlock(**b) for b in cmd["prompt"]]
                tag = cmd.get("tag", "prompt")

                async def prompt(blocks=blocks, tag=tag, session=cmd["sessionId"]):
                    try:
                        result = await conn.prompt(session_id=session, prompt=blocks)
                        emit({"op": "prompt", "tag": tag, "result": dump(result)})
                    except acp.RequestError as e:
                        emit({"op": "prompt", "tag": tag,
                              "error": {"code": e.code, "message": str(e), "data": e.data}})
                later(prompt())
            elif op == "cancel":
                await conn.cancel(session_id=cmd["sessionId"])
            elif op == "mode":
                await (run_request(op, conn.set_session_mode(
                    session_id=cmd["sessionId"], mode_id=cmd["modeId"])))
            elif op == "option":
                await (run_request(op, conn.set_config_option(
                    session_id=cmd["sessionId"], config_id=cmd["configId"], value=cmd["value"])))
            elif op == "answer":
                future = editor.answers.pop(cmd["toolCallId"], None)
                if future is not None and not future.done():
                    future.set_result(cmd.get("optionId"))
            elif op == "raw":
                process.stdin.write((cmd["line"] + "\n").encode())
                await process.stdin.drain()
        for task in tasks:
            task.cancel()


if __name__ == "__main__":
    asyncio.run(main())
