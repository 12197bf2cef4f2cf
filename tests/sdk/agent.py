"""An agent built on the Claude Agent SDK for Python, pointed at tether (`cli_path`): the
scenarios the SDK suite runs. Each prints one JSON line per result it saw, then `done`.

Usage: agent.py SCENARIO TETHER [ARG]
  multi       two turns through one ClaudeSDKClient
  permissions can_use_tool allows the first call and denies the second
  interrupt   interrupts a long Bash call, then asks again
  hooks       a PreToolUse hook callback on Bash refuses `rm`; a UserPromptSubmit one adds
              context; every hook's start and end is reported (include_hook_events)
  mcp         an in-process SDK MCP server's tool adds two numbers
  resume      one query() resuming the session ARG
  oneshot     one query() with nothing to answer (the SDK closes stdin at once)
  agents      a sub-agent the program defines runs; its messages name the call that ran it
  approver    a PermissionRequest hook callback allows a Write; a Notification one is told
"""

import asyncio
import json
import sys

from claude_agent_sdk import (
    AgentDefinition,
    AssistantMessage,
    ClaudeAgentOptions,
    HookEventMessage,
    ClaudeSDKClient,
    HookMatcher,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    SystemMessage,
    TextBlock,
    ToolUseBlock,
    create_sdk_mcp_server,
    query,
    tool,
)


def say(**fields):
    print(json.dumps(fields), flush=True)


def result(message: ResultMessage):
    say(
        kind="result",
        subtype=message.subtype,
        is_error=message.is_error,
        result=message.result,
        session_id=message.session_id,
        num_turns=message.num_turns,
        cost=message.total_cost_usd,
        denials=message.permission_denials,
        model_usage=message.model_usage,
    )


async def turns(client: ClaudeSDKClient, prompt: str, on_tool=None):
    await client.query(prompt)
    async for message in client.receive_response():
        if isinstance(message, HookEventMessage):
            say(kind="hook_event", subtype=message.subtype, event=message.hook_event_name,
                id=message.data.get("hook_id"), name=message.data.get("hook_name"),
                outcome=message.data.get("outcome"), output=message.data.get("output"))
        if isinstance(message, SystemMessage) and message.subtype == "init":
            say(kind="init", version=message.data.get("claude_code_version"),
                session_id=message.data.get("session_id"), tools=len(message.data.get("tools", [])))
        if isinstance(message, AssistantMessage):
            say(kind="assistant", parent=message.parent_tool_use_id,
                text="".join(b.text for b in message.content if isinstance(b, TextBlock)))
            for block in message.content:
                if isinstance(block, ToolUseBlock):
                    say(kind="tool_use", name=block.name)
                    if on_tool:
                        await on_tool(block)
        if isinstance(message, ResultMessage):
            result(message)


async def multi(tether: str):
    options = ClaudeAgentOptions(cli_path=tether)
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "first question")
        await turns(client, "second question")


async def permissions(tether: str):
    seen = []

    async def can_use_tool(tool, tool_input, context):
        seen.append(tool)
        say(kind="asked", tool=tool, input=tool_input, tool_use_id=context.tool_use_id)
        if len(seen) == 1:
            return PermissionResultAllow(updated_input=tool_input)
        return PermissionResultDeny(message="not that one")

    options = ClaudeAgentOptions(cli_path=tether, can_use_tool=can_use_tool,
                                 permission_mode="default")
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "write both files")


async def interrupt(tether: str):
    options = ClaudeAgentOptions(cli_path=tether, permission_mode="bypassPermissions")
    async with ClaudeSDKClient(options=options) as client:
        async def stop(block):
            await asyncio.sleep(1)
            await client.interrupt()
            say(kind="interrupted")

        await turns(client, "run the long one", on_tool=stop)
        await turns(client, "are you still there?")


async def hooks(tether: str):
    async def guard(hook_input, tool_use_id, context):
        command = hook_input["tool_input"].get("command", "")
        say(kind="hook", event=hook_input["hook_event_name"], tool=hook_input["tool_name"],
            command=command, tool_use_id=tool_use_id)
        if command.startswith("rm "):
            return {"hookSpecificOutput": {"hookEventName": "PreToolUse",
                                           "permissionDecision": "deny",
                                           "permissionDecisionReason": "no removing"}}
        return {}

    async def context(hook_input, tool_use_id, context):
        say(kind="hook", event=hook_input["hook_event_name"], prompt=hook_input["prompt"])
        return {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
                                       "additionalContext": "the user prefers short answers"}}

    options = ClaudeAgentOptions(cli_path=tether, permission_mode="bypassPermissions",
                                 include_hook_events=True,
                                 hooks={"PreToolUse": [HookMatcher(matcher="Bash", hooks=[guard])],
                                        "UserPromptSubmit": [HookMatcher(hooks=[context])]})
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "make a file, then clean up")


async def mcp(tether: str):
    @tool("add", "Adds two numbers", {"a": float, "b": float})
    async def add(args):
        say(kind="tool_ran", args=args)
        return {"content": [{"type": "text", "text": f"{args['a'] + args['b']:g}"}]}

    calc = create_sdk_mcp_server(name="calc", version="1.0.0", tools=[add])
    options = ClaudeAgentOptions(cli_path=tether, mcp_servers={"calc": calc},
                                 allowed_tools=["mcp__calc__add"])
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "add 2 and 3")


async def agents(tether: str):
    options = ClaudeAgentOptions(
        cli_path=tether,
        agents={"counter": AgentDefinition(description="Counts things", prompt="You count.")})
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "count them")


async def approver(tether: str):
    async def allow(hook_input, tool_use_id, context):
        say(kind="hook", event=hook_input["hook_event_name"], tool=hook_input["tool_name"])
        return {"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                       "decision": {"behavior": "allow"}}}

    async def told(hook_input, tool_use_id, context):
        say(kind="hook", event=hook_input["hook_event_name"], message=hook_input["message"])
        return {}

    options = ClaudeAgentOptions(cli_path=tether, permission_mode="default",
                                 hooks={"PermissionRequest": [HookMatcher(matcher="Write",
                                                                          hooks=[allow])],
                                        "Notification": [HookMatcher(hooks=[told])]})
    async with ClaudeSDKClient(options=options) as client:
        await turns(client, "write it")


async def resume(tether: str, session: str):
    options = ClaudeAgentOptions(cli_path=tether, resume=session)
    async for message in query(prompt="and again", options=options):
        if isinstance(message, ResultMessage):
            result(message)


async def oneshot(tether: str):
    options = ClaudeAgentOptions(cli_path=tether)
    async for message in query(prompt="just once", options=options):
        if isinstance(message, ResultMessage):
            result(message)


async def main():
    scenario, tether = sys.argv[1], sys.argv[2]
    if scenario == "resume":
        await resume(tether, sys.argv[3])
    else:
        await {"multi": multi, "permissions": permissions, "interrupt": interrupt,
               "hooks": hooks, "mcp": mcp, "oneshot": oneshot, "agents": agents,
               "approver": approver}[scenario](tether)
    say(kind="done")


asyncio.run(main())
