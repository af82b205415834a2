// Interop: the official TypeScript SDK v2 client (@modelcontextprotocol/client, pinned in
// package.json) on protocol 2026-07-28, through the gateway at MCP_URL. MCP_TARGET names
// what is behind the gateway:
//   everything   @modelcontextprotocol/server-everything on 2025-11-25 (the era bridge);
//   conformance  the conformance_server fixture served without a layer, on 2026-07-28
//                (passed through as it is).
// The client validates every result and notification against its own 2026-07-28
// schemas; each check below asserts on top of that, and prints one line. A last check
// reads every message the gateway sent back (a copy of each response body): each a
// JSON-RPC 2.0 message, no request among them (2026-07-28 puts questions in results),
// each result with its `resultType`, and nothing the client reported as an error.
// Run by scripts/interop-gateway.sh.
import assert from "node:assert/strict";

import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const URL_ = process.env.MCP_URL;
assert.ok(URL_, "MCP_URL must name the gateway's endpoint");
const TARGET = process.env.MCP_TARGET ?? "everything";
const PROTOCOL = "2026-07-28";
const CLIENT_INFO = { name: "mcp-tasks-interop-gateway", version: "1.0.0" };

/** What each upstream offers for the checks. */
const TARGETS = {
  everything: {
    tools: ["echo", "trigger-long-running-operation"],
    prompt: { name: "simple-prompt", text: /simple prompt/ },
    resource: (resources) => resources.find((r) => r.uri.startsWith("demo://resource/static/"))?.uri,
    progress: { name: "trigger-long-running-operation", arguments: { duration: 1, steps: 3 }, reports: 3 },
    elicitation: { name: "trigger-elicitation-request", arguments: {}, expect: /Name: Ada/ },
    sampling: {
      name: "trigger-sampling-request",
      arguments: { prompt: "What is the capital of France?", maxTokens: 20 },
      expect: /Paris, said interop-model/,
    },
  },
  conformance: {
    tools: ["test_simple_text", "test_tool_with_progress"],
    prompt: { name: "test_simple_prompt", text: /./ },
    resource: (resources) => resources.find((r) => r.uri === "test://static-text")?.uri,
    progress: { name: "test_tool_with_progress", arguments: {}, reports: 3 },
    elicitation: { name: "test_input_required_result_elicitation", arguments: {}, expect: /Hello, Ada!/ },
    sampling: {
      name: "test_input_required_result_sampling",
      arguments: {},
      expect: /The model said: Paris, said interop-model/,
    },
  },
};
const target = TARGETS[TARGET];
assert.ok(target, `MCP_TARGET must be one of ${Object.keys(TARGETS).join(", ")}`);

/** What the client was asked through its handlers. */
const asked = { elicitation: [], sampling: [] };

/** Every message the gateway sent back, and what the client reported as errors. */
const wire = { messages: [], reading: [], errors: [] };

/** The JSON-RPC messages of a response body: one JSON document, or SSE `data` events. */
function messagesIn(text, contentType) {
  if (!text.trim()) return [];
  if (!contentType.startsWith("text/event-stream")) return [JSON.parse(text)];
  return text
    .split(/\r?\n\r?\n/)
    .map((event) =>
      event
        .split(/\r?\n/)
        .filter((line) => line.startsWith("data:"))
        .map((line) => line.slice(5).trimStart())
        .join("\n"),
    )
    .filter((data) => data.trim())
    .map((data) => JSON.parse(data));
}

/** `fetch`, keeping a copy of every response body's messages in `wire`. */
async function recordingFetch(input, init) {
  const response = await fetch(input, init);
  const contentType = response.headers.get("content-type") ?? "";
  wire.reading.push(
    response
      .clone()
      .text()
      .then((text) => wire.messages.push(...messagesIn(text, contentType)))
      .catch((error) => {
        // A stream the client aborts (a cancelled request) ends its copy too.
        if (error?.name !== "AbortError") wire.errors.push(`reading a response: ${error}`);
      }),
  );
  return response;
}

/** A client pinned to 2026-07-28 that declares elicitation and sampling, with handlers. */
async function connect() {
  const client = new Client(CLIENT_INFO, {
    capabilities: { elicitation: { form: {} }, sampling: {} },
    versionNegotiation: { mode: { pin: PROTOCOL } },
  });
  client.setRequestHandler("elicitation/create", async (request) => {
    asked.elicitation.push(request.params);
    return { action: "accept", content: { name: "Ada", check: true } };
  });
  client.setRequestHandler("sampling/createMessage", async (request) => {
    asked.sampling.push(request.params);
    return {
      role: "assistant",
      content: { type: "text", text: "Paris, said interop-model" },
      model: "interop-model",
      stopReason: "endTurn",
    };
  });
  client.onerror = (error) => wire.errors.push(String(error?.message ?? error));
  await client.connect(new StreamableHTTPClientTransport(new URL(URL_), { fetch: recordingFetch }));
  return client;
}

const text = (result) =>
  (result.content ?? result.messages?.map((m) => m.content) ?? [])
    .map((block) => block.text ?? "")
    .join("\n");

const client = await connect();
const checks = [
  [
    "list-tools",
    async () => {
      const { tools } = await client.listTools();
      const names = tools.map((t) => t.name);
      for (const wanted of target.tools) assert.ok(names.includes(wanted), `${wanted} in ${names}`);
      // The upstream declares a tool only to a client that declared the capability.
      assert.ok(names.includes(target.sampling.name), `${target.sampling.name} in ${names}`);
      return `${tools.length} tools`;
    },
  ],
  [
    "list-resources",
    async () => {
      const { resources } = await client.listResources();
      assert.ok(target.resource(resources), JSON.stringify(resources.map((r) => r.uri)));
      return `${resources.length} resources`;
    },
  ],
  [
    "list-prompts",
    async () => {
      const { prompts } = await client.listPrompts();
      assert.ok(
        prompts.some((p) => p.name === target.prompt.name),
        JSON.stringify(prompts.map((p) => p.name)),
      );
      return `${prompts.length} prompts`;
    },
  ],
  [
    "read-resource",
    async () => {
      const uri = target.resource((await client.listResources()).resources);
      const { contents } = await client.readResource({ uri });
      assert.equal(contents.length, 1, JSON.stringify(contents));
      assert.equal(contents[0].uri, uri);
      const size = (contents[0].text ?? contents[0].blob).length;
      assert.ok(size > 0, "the resource has contents");
      return `${uri}: ${size} characters`;
    },
  ],
  [
    "get-prompt",
    async () => {
      const prompt = await client.getPrompt({ name: target.prompt.name });
      assert.ok(prompt.messages.length > 0, JSON.stringify(prompt));
      assert.match(text(prompt), target.prompt.text);
      return `${target.prompt.name}: ${prompt.messages.length} message(s)`;
    },
  ],
  [
    "progress",
    async () => {
      const reports = [];
      const { name, arguments: args, reports: expected } = target.progress;
      const result = await client.callTool(
        { name, arguments: args },
        { onprogress: (progress) => reports.push(progress.progress) },
      );
      assert.notEqual(result.isError, true, JSON.stringify(result));
      assert.equal(reports.length, expected, `progress reports ${JSON.stringify(reports)}`);
      return `${name}: progress ${reports.join(", ")}`;
    },
  ],
  [
    "elicitation",
    async () => {
      const { name, arguments: args, expect } = target.elicitation;
      const before = asked.elicitation.length;
      const result = await client.callTool({ name, arguments: args });
      assert.equal(asked.elicitation.length, before + 1, "the handler was asked once");
      assert.match(text(result), expect);
      return `${name}: asked ${JSON.stringify(asked.elicitation.at(-1).message)}, answered`;
    },
  ],
  [
    "sampling",
    async () => {
      const { name, arguments: args, expect } = target.sampling;
      const before = asked.sampling.length;
      const result = await client.callTool({ name, arguments: args });
      assert.equal(asked.sampling.length, before + 1, "the handler was asked once");
      assert.match(text(result), expect);
      const asking = asked.sampling.at(-1).messages.at(-1).content.text;
      return `${name}: sampled ${JSON.stringify(asking)}`;
    },
  ],
  [
    "wire",
    async () => {
      await Promise.all(wire.reading);
      assert.deepEqual(wire.errors, [], "the client reported no error");
      assert.ok(wire.messages.length > 0, "messages were recorded");
      for (const message of wire.messages) {
        const shown = JSON.stringify(message).slice(0, 200);
        assert.equal(message.jsonrpc, "2.0", shown);
        assert.ok(!("method" in message && "id" in message), `a request on a stream: ${shown}`);
        if ("result" in message) assert.equal(typeof message.result.resultType, "string", shown);
      }
      const results = wire.messages.filter((m) => "result" in m);
      const rounds = results.filter((m) => m.result.resultType === "input_required").length;
      const notes = wire.messages.filter((m) => "method" in m).length;
      return `${wire.messages.length} messages: ${results.length} results (${rounds} input_required), ${notes} notifications, no request, no client error`;
    },
  ],
];

let failed = 0;
try {
  for (const [name, check] of checks) {
    const started = Date.now();
    try {
      const said = await check();
      console.log(`ok ${name}: ${said} (${Date.now() - started} ms)`);
    } catch (error) {
      failed += 1;
      console.log(`FAILED ${name}: ${error?.message ?? error}`.split("\n")[0]);
      if (process.env.MCP_VERBOSE) console.error(error);
    }
  }
} finally {
  await client.close();
}
console.log(`${checks.length - failed} passed, ${failed} failed (${TARGET})`);
process.exit(failed === 0 ? 0 : 1);
