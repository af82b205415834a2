// Interop: the official TypeScript requester (@modelcontextprotocol/ext-tasks with
// @modelcontextprotocol/client) against the quickstart example at MCP_URL. It calls a
// task tool and follows it by listen and by polling, answers a question, cancels a
// task, and resumes one from a serialized reference. Run by scripts/interop.sh.
import assert from "node:assert/strict";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import {
  createTaskSessionFromClient,
  resultFromTaskOutcome,
} from "@modelcontextprotocol/ext-tasks/client";

const URL_ = process.env.MCP_URL;
assert.ok(URL_, "MCP_URL must name the quickstart's endpoint");
const PROTOCOL = "2026-07-28";
const EXTENSION = "io.modelcontextprotocol/tasks";
const CLIENT_INFO = { name: "mcp-tasks-interop", version: "1.0.0" };
const CAPABILITIES = { extensions: { [EXTENSION]: {} } };
const AUTH = { authorization: "Bearer alice" };

/** Counts of what went over the raw request path, by method. */
const sent = new Map();

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

/** The headers of a modern request for `message`. */
function headersFor(message, extra = {}) {
  const name = message.method === "tools/call" ? message.params?.name : message.params?.taskId;
  return {
    "content-type": "application/json",
    accept: "application/json, text/event-stream",
    "mcp-protocol-version": PROTOCOL,
    "mcp-method": message.method,
    ...(name === undefined ? {} : { "mcp-name": String(name) }),
    ...AUTH,
    // The library names follow-up headers itself (`Mcp-Name`): one header, its value.
    ...Object.fromEntries(Object.entries(extra).map(([k, v]) => [k.toLowerCase(), v])),
  };
}

let nextId = 1;

/** The host's raw request path for the extension's wire shapes. */
async function rawDispatch(request, options = {}) {
  const message = { jsonrpc: "2.0", id: `interop-${nextId++}`, ...request };
  sent.set(message.method, (sent.get(message.method) ?? 0) + 1);
  const response = await fetch(URL_, {
    method: "POST",
    headers: headersFor(message, options.context?.headers),
    body: JSON.stringify(message),
    signal: options.signal,
  });
  const reply = responseIn(await response.text(), response.headers.get("content-type") ?? "");
  return "error" in reply
    ? { kind: "error", error: reply.error }
    : { kind: "result", result: reply.result };
}

/** Opens `subscriptions/listen` for `taskIds` and hands each notification to `deliver`. */
async function listen(taskIds, deliver) {
  const message = {
    jsonrpc: "2.0",
    id: `listen-${nextId++}`,
    method: "subscriptions/listen",
    params: {
      notifications: { taskIds },
      _meta: {
        "io.modelcontextprotocol/protocolVersion": PROTOCOL,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
      },
    },
  };
  const stop = new AbortController();
  const response = await fetch(URL_, {
    method: "POST",
    headers: headersFor(message),
    body: JSON.stringify(message),
    signal: stop.signal,
  });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type"), /^text\/event-stream/);
  const reading = (async () => {
    const decoder = new TextDecoder();
    let buffer = "";
    try {
      for await (const chunk of response.body) {
        buffer += decoder.decode(chunk, { stream: true });
        let end;
        while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const event = buffer.slice(0, end);
          buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
          const data = event
            .split(/\r?\n/)
            .filter((line) => line.startsWith("data:"))
            .map((line) => line.slice(5).trimStart())
            .join("\n");
          if (data) deliver(JSON.parse(data));
        }
      }
    } catch (error) {
      if (error.name !== "AbortError") throw error;
    }
  })();
  return {
    close: async () => {
      stop.abort();
      await reading;
    },
  };
}

/** A connected SDK client and a task session over it. */
async function connect(endpointId, onInputRequest) {
  const client = new Client(CLIENT_INFO, {
    capabilities: {},
    versionNegotiation: { mode: { pin: PROTOCOL } },
  });
  const transport = new StreamableHTTPClientTransport(new URL(URL_), {
    requestInit: { headers: AUTH },
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

async function followByListen() {
  const { client, session } = await connect("interop-listen");
  try {
    const execution = await session.callTool("build", { seconds: 2 });
    assert.equal(execution.kind, "task");
    const notes = [];
    const stream = await listen([execution.handle.taskId], (message) => {
      if (message.method === "notifications/tasks") {
        notes.push(message.params);
        client.fallbackNotificationHandler?.(message);
      }
    });
    const statuses = [];
    const { outcome } = await execution.settle({
      onEvent: (event) => {
        if (event.type === "task") statuses.push(event.task.status);
      },
    });
    await stream.close();
    assert.equal(text(resultFromTaskOutcome(outcome)), "Build finished after 2s");
    assert.ok(notes.some((n) => n.status === "working"), JSON.stringify(notes));
    assert.ok(notes.some((n) => n.status === "completed"), JSON.stringify(notes));
    assert.ok(statuses.includes("working"), JSON.stringify(statuses));
    console.log(`listen: completed; ${notes.length} notifications/tasks, statuses ${statuses}`);
  } finally {
    await session.close();
    await client.close();
  }
}

async function followByPolling() {
  const { client, session } = await connect("interop-poll");
  try {
    const before = sent.get("tasks/get") ?? 0;
    const execution = await session.callTool("build", { seconds: 2 });
    assert.equal(execution.kind, "task");
    const { outcome } = await execution.settle();
    assert.equal(text(resultFromTaskOutcome(outcome)), "Build finished after 2s");
    const polls = (sent.get("tasks/get") ?? 0) - before;
    assert.ok(polls >= 2, `followed with ${polls} tasks/get`);
    console.log(`polling: completed after ${polls} tasks/get`);
  } finally {
    await session.close();
    await client.close();
  }
}

async function answerAQuestion() {
  const asked = [];
  const { client, session } = await connect("interop-input", async (request) => {
    asked.push(request);
    return { action: "accept", content: { confirm: true } };
  });
  try {
    const execution = await session.callTool("deploy", { target: "staging" });
    assert.equal(execution.kind, "task");
    const { outcome } = await execution.settle();
    const result = text(resultFromTaskOutcome(outcome));
    assert.equal(asked.length, 1, JSON.stringify(asked));
    assert.equal(asked[0].kind, "elicitation");
    assert.match(result, /staging/);
    console.log(`input: asked ${JSON.stringify(asked[0].params.message)}, result ${JSON.stringify(result)}`);
  } finally {
    await session.close();
    await client.close();
  }
}

async function cancel() {
  const { client, session } = await connect("interop-cancel");
  try {
    const execution = await session.callTool("build", { seconds: 600 });
    assert.equal(execution.kind, "task");
    await execution.cancel();
    const { outcome } = await execution.settle();
    assert.equal(outcome.status, "cancelled");
    const task = await session.task(execution.handle.taskId).snapshot();
    assert.equal(task.status, "cancelled");
    console.log("cancel: cancelled");
  } finally {
    await session.close();
    await client.close();
  }
}

async function resume() {
  let reference;
  {
    const { client, session } = await connect("interop-resume");
    const execution = await session.callTool("build", { seconds: 2 });
    assert.equal(execution.kind, "task");
    await execution.handoff((serialized) => {
      reference = JSON.stringify(serialized);
    });
    // The session forgets a handed-off execution only once its local outcome has
    // settled; closing the session before that would cancel the task.
    await execution.result().catch(() => {});
    await session.close();
    await client.close();
  }
  // A new process would read the reference back from disk; a new client and session here.
  const { client, session } = await connect("interop-resume");
  try {
    const execution = await session.resumeTask(JSON.parse(reference));
    const { outcome } = await execution.settle();
    assert.equal(text(resultFromTaskOutcome(outcome)), "Build finished after 2s");
    console.log(`resume: completed from ${reference}`);
  } finally {
    await session.close();
    await client.close();
  }
}

for (const [name, scenario] of [
  ["listen", followByListen],
  ["polling", followByPolling],
  ["input", answerAQuestion],
  ["cancel", cancel],
  ["resume", resume],
]) {
  const started = Date.now();
  await scenario();
  console.log(`ok ${name} (${Date.now() - started} ms)`);
}
