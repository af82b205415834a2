// Interop: the official TypeScript requester (@modelcontextprotocol/ext-tasks with
// @modelcontextprotocol/client, on protocol 2026-07-28) through the gateway at MCP_URL in
// front of @modelcontextprotocol/server-everything (2025-11-25). Its
// `simulate-research-query` runs only as a task upstream and, for an ambiguous topic,
// asks a clarification while its task is `input_required`: the requester sees a
// 2026-07-28 task, answers the question through its input handler, and settles the task
// with the report. Another principal asking for the task gets "task not found"; a
// cancelled research ends `cancelled`. Run by scripts/interop-gateway.sh.
import assert from "node:assert/strict";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const URL_ = process.env.MCP_URL;
assert.ok(URL_, "MCP_URL must name the gateway's endpoint");
const PROTOCOL = "2026-07-28";
const EXTENSION = "io.modelcontextprotocol/tasks";
const CLIENT_INFO = { name: "mcp-tasks-interop-research", version: "1.0.0" };
// Elicitation declared: the upstream asks its question only of a client that can answer.
const CAPABILITIES = { extensions: { [EXTENSION]: {} }, elicitation: { form: {} } };
const ALICE = { authorization: "Bearer alice" };
const BOB = { authorization: "Bearer bob" };

/** The one JSON-RPC response in an SSE body (or the JSON body itself). */
function responseIn(text, contentType) {
  if (!contentType.startsWith("text/event-stream")) return JSON.parse(text);
  for (const event of text.split(/\r?\n\r?\n/)) {
    const data = event
      .split(/\r?\n/)
      .filter((line) => line.startsWith("data:"))
      .map((line) => line.slice(5).trimStart())
      .join("\n");
    if (!data) continue;
    const message = JSON.parse(data);
    if ("result" in message || "error" in message) return message;
  }
  throw new Error(`no JSON-RPC response in the event stream: ${text}`);
}

/** The headers of a modern request for `message`, as `auth`. */
function headersFor(message, auth, extra = {}) {
  const name = message.method === "tools/call" ? message.params?.name : message.params?.taskId;
  return {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": message.method,
    ...(name === undefined ? {} : { "mcp-name": String(name) }),
    ...auth,
    ...Object.fromEntries(Object.entries(extra).map(([k, v]) => [k.toLowerCase(), v])),
  };
}

let nextId = 1;

/** Sends one request as `auth`; its JSON-RPC response. */
async function post(request, auth, options = {}) {
  const message = { jsonrpc: "2.0", id: `research-${nextId++}`, ...request };
  const response = await fetch(URL_, {
    method: "POST",
    headers: headersFor(message, auth, options.context?.headers),
    body: JSON.stringify(message),
    signal: options.signal,
  });
  return responseIn(await response.text(), response.headers.get("content-type") ?? "");
}

/** The host's raw request path for the extension's wire shapes, as alice. */
async function rawDispatch(request, options = {}) {
  const reply = await post(request, ALICE, options);
  return "error" in reply
    ? { kind: "error", error: reply.error }
    : { kind: "result", result: reply.result };
}

/** A connected SDK client and a task session over it. */
async function connect(endpointId, onInputRequest) {
  const client = new Client(CLIENT_INFO, {
    capabilities: { elicitation: { form: {} } },
    versionNegotiation: { mode: { pin: PROTOCOL } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(URL_), {
    requestInit: { headers: ALICE },
  });
  await client.connect(transport);
  const session = createTaskSessionFromClient(client, {
    endpointId,
    rawDispatch,
    v2RequestFraming: {
      protocolVersion: PROTOCOL,
      clientInfo: CLIENT_INFO,
      clientCapabilities: CAPABILITIES,
    },
    ...(onInputRequest === undefined ? {} : { onInputRequest }),
  });
  return { client, session };
}

const text = (result) => result.content.map((block) => block.text).join("\n");

/** `tasks/get` of `taskId` as bob. */
async function getAsBob(taskId) {
  return post(
    {
      method: "tasks/get",
      params: {
        taskId,
        _meta: {
          "io.modelcontextprotocol/protocolVersion": PROTOCOL,
          "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
          "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
        },
      },
    },
    BOB,
  );
}

async function research() {
  const asked = [];
  const { client, session } = await connect("interop-research", async (request) => {
    asked.push(request);
    return { action: "accept", content: { interpretation: "snake" } };
  });
  try {
    const execution = await session.callTool("simulate-research-query", {
      topic: "python",
      ambiguous: true,
    });
    assert.equal(execution.kind, "task");
    const taskId = execution.handle.taskId;
    assert.match(taskId, /^up\./, "a handle of the gateway");

    const foreign = await getAsBob(taskId);
    assert.equal(foreign.error?.code, -32602, JSON.stringify(foreign));
    assert.match(foreign.error.message, /Task not found/);

    const statuses = [];
    const { outcome } = await execution.settle({
      onEvent: (event) => {
        if (event.type === "task") statuses.push(event.task.status);
      },
    });
    assert.equal(outcome.status, "completed", JSON.stringify(outcome));
    const report = text(resultFromTaskOutcome(outcome));
    assert.equal(asked.length, 1, JSON.stringify(asked));
    assert.equal(asked[0].kind, "elicitation");
    assert.match(asked[0].params.message, /python/);
    assert.match(report, /# Research Report: python \(snake\)/);
    assert.ok(statuses.includes("input_required"), JSON.stringify(statuses));
    console.log(
      `research: asked ${JSON.stringify(asked[0].params.message)}; statuses ${[...new Set(statuses)]}; ` +
        `bob got ${JSON.stringify(foreign.error.message)}`,
    );
  } finally {
    await session.close();
    await client.close();
  }
}

async function cancel() {
  const { client, session } = await connect("interop-research-cancel");
  try {
    const execution = await session.callTool("simulate-research-query", { topic: "rust" });
    assert.equal(execution.kind, "task");
    await execution.cancel();
    const { outcome } = await execution.settle();
    assert.equal(outcome.status, "cancelled", JSON.stringify(outcome));
    console.log("cancel: cancelled");
  } finally {
    await session.close();
    await client.close();
  }
}

for (const [name, scenario] of [
  ["research", research],
  ["cancel", cancel],
]) {
  const started = Date.now();
  await scenario();
  console.log(`ok ${name} (${Date.now() - started} ms)`);
}
