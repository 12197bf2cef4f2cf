// An agent built on the Claude Agent SDK for TypeScript, pointed at tether
// (`pathToClaudeCodeExecutable`): the scenarios of `agent.py`, in the same output (one JSON line
// per result it saw, then `done`).
//
// Usage: node agent.mjs SDK_DIR SCENARIO TETHER [ARG]
//   multi, permissions, interrupt, hooks, mcp, oneshot, agents, approver, resume SESSION (see agent.py)

import { pathToFileURL } from "node:url";
import { join } from "node:path";

const [sdkDir, scenario, tether, arg] = process.argv.slice(2);
const { query, tool, createSdkMcpServer } = await import(
  pathToFileURL(join(sdkDir, "node_modules/@anthropic-ai/claude-agent-sdk/sdk.mjs")).href
);
const { z } = await import(pathToFileURL(join(sdkDir, "node_modules/zod/index.js")).href);

const say = (fields) => console.log(JSON.stringify(fields));

function result(m) {
  say({
    kind: "result",
    subtype: m.subtype,
    is_error: m.is_error,
    result: m.result ?? null,
    session_id: m.session_id,
    num_turns: m.num_turns,
    cost: m.total_cost_usd,
    denials: m.permission_denials,
    model_usage: m.modelUsage,
  });
}

const user = (text) => ({
  type: "user",
  message: { role: "user", content: text },
  parent_tool_use_id: null,
  session_id: "",
});

/// Prompts given one at a time, each once the previous one's result came.
function conversation(texts) {
  let next = null;
  const results = { wait: () => new Promise((r) => (next = r)), done: () => next && next() };
  async function* prompts() {
    for (const text of texts) {
      yield user(text);
      await results.wait();
    }
  }
  return { prompts: prompts(), results };
}

async function drive(q, results, onTool) {
  for await (const m of q) {
    if (m.type === "system" && (m.subtype === "hook_started" || m.subtype === "hook_response")) {
      say({ kind: "hook_event", subtype: m.subtype, event: m.hook_event, id: m.hook_id, name: m.hook_name,
            outcome: m.outcome ?? null, output: m.output ?? null });
    }
    if (m.type === "system" && m.subtype === "init") {
      say({ kind: "init", version: m.claude_code_version, session_id: m.session_id, tools: m.tools.length });
    }
    if (m.type === "assistant") {
      const text = m.message.content.filter((b) => b.type === "text").map((b) => b.text).join("");
      say({ kind: "assistant", parent: m.parent_tool_use_id ?? null, text });
      for (const block of m.message.content) {
        if (block.type === "tool_use") {
          say({ kind: "tool_use", name: block.name });
          if (onTool) await onTool(block);
        }
      }
    }
    if (m.type === "result") {
      result(m);
      if (results) results.done();
    }
  }
}

const base = { pathToClaudeCodeExecutable: tether, cwd: process.cwd(), env: process.env };

const scenarios = {
  async multi() {
    const { prompts, results } = conversation(["first question", "second question"]);
    await drive(query({ prompt: prompts, options: base }), results);
  },
  async permissions() {
    let n = 0;
    const canUseTool = async (tool, input, { toolUseID }) => {
      n += 1;
      say({ kind: "asked", tool, input, tool_use_id: toolUseID });
      return n === 1
        ? { behavior: "allow", updatedInput: input }
        : { behavior: "deny", message: "not that one" };
    };
    const { prompts, results } = conversation(["write both files"]);
    await drive(
      query({ prompt: prompts, options: { ...base, canUseTool, permissionMode: "default" } }),
      results,
    );
  },
  async interrupt() {
    const { prompts, results } = conversation(["run the long one", "are you still there?"]);
    const q = query({ prompt: prompts, options: { ...base, permissionMode: "bypassPermissions" } });
    await drive(q, results, async () => {
      await new Promise((r) => setTimeout(r, 1000));
      await q.interrupt();
      say({ kind: "interrupted" });
    });
  },
  async hooks() {
    const guard = async (input, toolUseID) => {
      const command = input.tool_input.command ?? "";
      say({ kind: "hook", event: input.hook_event_name, tool: input.tool_name, command, tool_use_id: toolUseID });
      if (command.startsWith("rm ")) {
        return {
          hookSpecificOutput: {
            hookEventName: "PreToolUse",
            permissionDecision: "deny",
            permissionDecisionReason: "no removing",
          },
        };
      }
      return {};
    };
    const context = async (input) => {
      say({ kind: "hook", event: input.hook_event_name, prompt: input.prompt });
      return {
        hookSpecificOutput: {
          hookEventName: "UserPromptSubmit",
          additionalContext: "the user prefers short answers",
        },
      };
    };
    const { prompts, results } = conversation(["make a file, then clean up"]);
    const options = {
      ...base,
      permissionMode: "bypassPermissions",
      includeHookEvents: true,
      hooks: {
        PreToolUse: [{ matcher: "Bash", hooks: [guard] }],
        UserPromptSubmit: [{ hooks: [context] }],
      },
    };
    await drive(query({ prompt: prompts, options }), results);
  },
  async approver() {
    const allow = async (input) => {
      say({ kind: "hook", event: input.hook_event_name, tool: input.tool_name });
      return { hookSpecificOutput: { hookEventName: "PermissionRequest", decision: { behavior: "allow" } } };
    };
    const told = async (input) => {
      say({ kind: "hook", event: input.hook_event_name, message: input.message });
      return {};
    };
    const { prompts, results } = conversation(["write it"]);
    const options = {
      ...base,
      permissionMode: "default",
      hooks: {
        PermissionRequest: [{ matcher: "Write", hooks: [allow] }],
        Notification: [{ hooks: [told] }],
      },
    };
    await drive(query({ prompt: prompts, options }), results);
  },
  async agents() {
    const { prompts, results } = conversation(["count them"]);
    const agents = { counter: { description: "Counts things", prompt: "You count." } };
    await drive(query({ prompt: prompts, options: { ...base, agents } }), results);
  },
  async mcp() {
    const add = tool("add", "Adds two numbers", { a: z.number(), b: z.number() }, async (args) => {
      say({ kind: "tool_ran", args });
      return { content: [{ type: "text", text: String(args.a + args.b) }] };
    });
    const calc = createSdkMcpServer({ name: "calc", version: "1.0.0", tools: [add] });
    const { prompts, results } = conversation(["add 2 and 3"]);
    const options = { ...base, mcpServers: { calc }, allowedTools: ["mcp__calc__add"] };
    await drive(query({ prompt: prompts, options }), results);
  },
  async oneshot() {
    await drive(query({ prompt: "just once", options: base }));
  },
  async resume() {
    await drive(query({ prompt: "and again", options: { ...base, resume: arg } }));
  },
};

await scenarios[scenario]();
say({ kind: "done" });
