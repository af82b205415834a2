// Interop on the 2025-11-25 Tasks wire: the official TypeScript SDK v1 client
// (@modelcontextprotocol/sdk, pinned in package.json; `Client`,
// `StreamableHTTPClientTransport`, `client.experimental.tasks`) drives a tasks server.
// Run by scripts/interop-v1.sh.
//
//   node scripts/interop/sdk-v1.mjs --target everything --url URL [--wire FILE]
//   node scripts/interop/sdk-v1.mjs --target quickstart --a URL [--b URL] [--wire FILE]
//   node scripts/interop/sdk-v1.mjs --target retrofit --url URL [--wire FILE]
//
// (env: MCP_URL, MCP_URL_A, MCP_URL_B, SDK_V1_WIRE). `everything` is
// @modelcontextprotocol/server-everything (its `simulate-research-query` tool, built on
// the SDK's own server side): it records what the reference implementation puts on the
// wire. `quickstart` is examples/quickstart.rs behind this crate's layer (tools `build`
// and `deploy`, `Authorization: Bearer <name>` names the task owner); with `--b`, a
// second node on the same store serves the follow-ups. `retrofit` is
// examples/retrofit.rs: a plain rmcp server whose tools are all `TaskMode::Auto`, so
// every task there is made by the layer around a handler that knows nothing of tasks.
//
// One line per passed check; the first failed expectation ends the run with a message
// and exit status 1. Every HTTP exchange (headers, JSON bodies, SSE events, in order,
// with the time since start) is written to the `--wire` file: scripts/interop/SDK-V1-WIRE.md
// was written from those transcripts.
import assert from "node:assert/strict";
import { appendFileSync, writeFileSync } from "node:fs";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import {
  CallToolResultSchema,
  CreateTaskResultSchema,
  ElicitRequestSchema,
  ErrorCode,
  LATEST_PROTOCOL_VERSION,
  McpError,
  TaskStatusNotificationSchema,
} from "@modelcontextprotocol/sdk/types.js";

const RELATED_TASK = "io.modelcontextprotocol/related-task";
const PROTOCOL = "2025-11-25";
const CLIENT_INFO = { name: "mcp-tasks-interop-v1", version: "1.0.0" };
// The client can be asked questions, also during a task (2025-11-25 client capabilities).
const CLIENT_CAPABILITIES = {
  elicitation: {},
  tasks: { requests: { elicitation: { create: {} } } },
};
/** The longest one check may take (a task of a few seconds, polled once a second). */
const STEP_MS = 45_000;
const ISO_8601 = /^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?(Z|[+-]\d{2}:\d{2})$/;

// ---------------------------------------------------------------------------------
// Arguments

function parseArgs(argv) {
  const options = {
    target: undefined,
    url: process.env.MCP_URL,
    a: process.env.MCP_URL_A,
    b: process.env.MCP_URL_B,
    wire: process.env.SDK_V1_WIRE,
  };
  for (let i = 0; i < argv.length; i++) {
    const flag = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) usage(`${flag} needs a value`);
      return v;
    };
    switch (flag) {
      case "--target": options.target = value(); break;
      case "--url": options.url = value(); break;
      case "--a": options.a = value(); break;
      case "--b": options.b = value(); break;
      case "--wire": options.wire = value(); break;
      default: usage(`unknown argument ${flag}`);
    }
  }
  if (options.target === "everything" && !options.url) usage("--target everything needs --url");
  if (options.target === "retrofit" && !options.url) usage("--target retrofit needs --url");
  if (options.target === "quickstart" && !options.a) usage("--target quickstart needs --a");
  if (!["everything", "quickstart", "retrofit"].includes(options.target)) {
    usage("--target must be everything, quickstart or retrofit");
  }
  return options;
}

function usage(problem) {
  console.error(`sdk-v1.mjs: ${problem}
usage: node scripts/interop/sdk-v1.mjs --target everything --url URL [--wire FILE]
       node scripts/interop/sdk-v1.mjs --target quickstart --a URL [--b URL] [--wire FILE]
       node scripts/interop/sdk-v1.mjs --target retrofit --url URL [--wire FILE]`);
  process.exit(2);
}

// ---------------------------------------------------------------------------------
// The wire: every HTTP exchange the SDK's transport makes, observed through its
// `fetch` option (the body is teed, so the SDK reads exactly what the server sent).

class Wire {
  constructor(path) {
    this.path = path;
    this.t0 = Date.now();
    this.exchanges = [];
    this.changed = Promise.withResolvers();
    if (path) writeFileSync(path, `# sdk-v1.mjs wire transcript, ${new Date().toISOString()}\n`);
  }

  line(text) {
    if (this.path) appendFileSync(this.path, `${text}\n`);
  }

  /** Wakes whoever waits in `until`: an exchange got its status, an event or its end. */
  touch() {
    this.changed.resolve();
    this.changed = Promise.withResolvers();
  }

  /**
   * Waits until `found()` gives something, or `ms` passed: the SDK reads its copy of a
   * body and this log reads the other, so the log may lag the SDK by a moment.
   */
  async until(found, ms = 5000) {
    const deadline = Date.now() + ms;
    for (;;) {
      const value = found();
      if (value || Date.now() >= deadline) return value;
      let timer;
      await Promise.race([
        this.changed.promise,
        new Promise((resolve) => {
          timer = setTimeout(resolve, deadline - Date.now());
        }),
      ]);
      clearTimeout(timer);
    }
  }

  note(text) {
    this.line(`\n## ${text}`);
  }

  stamp() {
    return `+${String(Date.now() - this.t0).padStart(6)}ms`;
  }

  /**
   * A `fetch` for one client, named `label` in the transcript. `route` may send a
   * request elsewhere (a load balancer's choice), given the URL and the JSON-RPC body.
   */
  fetchFor(label, route = (url) => url) {
    return async (url, init = {}) => {
      const httpMethod = init.method ?? "GET";
      const body = typeof init.body === "string" ? init.body : undefined;
      let rpc;
      if (body !== undefined) {
        try {
          rpc = JSON.parse(body);
        } catch {
          rpc = undefined;
        }
      }
      const target = route(String(url), rpc);
      const requestHeaders = Object.fromEntries(new Headers(init.headers ?? {}).entries());
      const ex = {
        n: this.exchanges.length + 1,
        label,
        url: target,
        httpMethod,
        requestHeaders,
        rpc,
        status: undefined,
        responseHeaders: {},
        contentType: "",
        json: undefined,
        text: "",
        events: [],
        ended: undefined,
      };
      this.exchanges.push(ex);
      const shown = Object.entries(requestHeaders)
        .filter(([k]) => k !== "content-length")
        .map(([k, v]) => `${k}: ${v}`)
        .join(" | ");
      this.line(`${this.stamp()} #${ex.n} [${label}] -> ${httpMethod} ${target}  {${shown}}`);
      if (body !== undefined) this.line(`           #${ex.n} body ${body}`);
      let response;
      try {
        response = await fetch(target, init);
      } catch (error) {
        ex.ended = `fetch failed: ${error.message}`;
        this.line(`${this.stamp()} #${ex.n} !! ${ex.ended}`);
        this.touch();
        throw error;
      }
      ex.status = response.status;
      ex.responseHeaders = Object.fromEntries(
        [...response.headers.entries()].filter(
          ([k]) => !["date", "connection", "keep-alive", "transfer-encoding"].includes(k),
        ),
      );
      ex.contentType = response.headers.get("content-type") ?? "";
      this.line(
        `${this.stamp()} #${ex.n} <- ${response.status} {${Object.entries(ex.responseHeaders)
          .map(([k, v]) => `${k}: ${v}`)
          .join(" | ")}}`,
      );
      this.touch();
      if (!response.body) {
        ex.ended = "no body";
        return response;
      }
      const [mine, theirs] = response.body.tee();
      this.read(ex, mine);
      return new Response(theirs, {
        status: response.status,
        statusText: response.statusText,
        headers: response.headers,
      });
    };
  }

  async read(ex, stream) {
    const decoder = new TextDecoder();
    const sse = ex.contentType.startsWith("text/event-stream");
    let buffer = "";
    try {
      for await (const chunk of stream) {
        const text = decoder.decode(chunk, { stream: true });
        if (!sse) {
          ex.text += text;
          continue;
        }
        buffer += text;
        let end;
        while ((end = buffer.search(/\r?\n\r?\n/)) >= 0) {
          const raw = buffer.slice(0, end);
          buffer = buffer.slice(end).replace(/^\r?\n\r?\n/, "");
          this.event(ex, raw);
        }
      }
      ex.ended = "end";
    } catch (error) {
      ex.ended = error.name === "AbortError" ? "aborted by the client" : `error: ${error.message}`;
    }
    if (!sse) {
      try {
        ex.json = ex.text ? JSON.parse(ex.text) : undefined;
      } catch {
        ex.json = undefined;
      }
      if (ex.text) this.line(`${this.stamp()} #${ex.n} <- body ${ex.text}`);
    }
    this.line(`${this.stamp()} #${ex.n} .. ${ex.ended}`);
    this.touch();
  }

  event(ex, raw) {
    const event = { at: Date.now() - this.t0, id: undefined, event: undefined, data: "", message: undefined, raw };
    const data = [];
    for (const line of raw.split(/\r?\n/)) {
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "data") data.push(value);
      else if (field === "id") event.id = value;
      else if (field === "event") event.event = value;
    }
    event.data = data.join("\n");
    if (event.data) {
      try {
        event.message = JSON.parse(event.data);
      } catch {
        event.message = undefined;
      }
    }
    ex.events.push(event);
    this.line(`${this.stamp()} #${ex.n} <= sse ${JSON.stringify(raw)}`);
    this.touch();
  }

  /** The exchanges that POSTed a request of `method`, optionally filtered. */
  requests(method, filter = () => true) {
    return this.exchanges.filter((ex) => ex.rpc?.method === method && "id" in ex.rpc && filter(ex));
  }

  /** Every server-to-client message so far, each with the exchange that carried it. */
  messages() {
    const out = [];
    for (const ex of this.exchanges) {
      const bodies = ex.json === undefined ? [] : Array.isArray(ex.json) ? ex.json : [ex.json];
      for (const message of bodies) out.push({ ex, message, event: undefined });
      for (const event of ex.events) {
        if (event.message !== undefined) out.push({ ex, message: event.message, event });
      }
    }
    return out;
  }

  /** The JSON-RPC response the server sent for the request POSTed in `ex`. */
  async responseIn(ex) {
    return this.until(
      () =>
        this.messages().find(
          ({ ex: carrier, message }) =>
            carrier === ex && message.id === ex.rpc.id && ("result" in message || "error" in message),
        )?.message,
    );
  }

  /**
   * The POSTs of the client that received the question on `carrier` which carried a
   * response with `id` (ids may repeat across sessions, so only later ones count).
   */
  answers(carrier, id) {
    return this.exchanges.filter(
      (ex) =>
        ex.n > carrier.n &&
        ex.label === carrier.label &&
        ex.httpMethod === "POST" &&
        ex.rpc &&
        !("method" in ex.rpc) &&
        ex.rpc.id === id,
    );
  }
}

// ---------------------------------------------------------------------------------
// Checks

let passed = 0;
let failing = "";

/** Runs one check: prints `ok N - name (detail)`, or ends the run on its failure. */
async function check(name, body) {
  failing = name;
  wire.note(name);
  let timer;
  const deadline = new Promise((_, reject) => {
    timer = setTimeout(() => reject(new Error(`no outcome within ${STEP_MS} ms`)), STEP_MS);
  });
  try {
    const detail = await Promise.race([body(), deadline]);
    passed += 1;
    console.log(`ok ${passed} - ${name}${detail ? ` (${detail})` : ""}`);
  } catch (error) {
    fail(name, error);
  } finally {
    clearTimeout(timer);
  }
}

function fail(name, error) {
  const message = error?.stack ?? String(error);
  console.error(`not ok ${passed + 1} - ${name}\n${message.replace(/^/gm, "    ")}`);
  if (wire.path) console.error(`    (wire transcript: ${wire.path})`);
  wire.line(`\nFAILED: ${name}\n${message}`);
  process.exit(1);
}

/** The JSON-RPC error `promise` must be refused with; fails on a result. */
async function refused(promise, code, what) {
  let result;
  try {
    result = await promise;
  } catch (error) {
    assert.ok(error instanceof McpError, `${what}: not a JSON-RPC error: ${error?.stack ?? error}`);
    assert.equal(error.code, code, `${what}: code ${error.code} (${error.message}), expected ${code}`);
    return error;
  }
  assert.fail(`${what}: expected the JSON-RPC error ${code}, got the result ${JSON.stringify(result)}`);
}

/** The raw error message of the last response to a `method` request with `params.taskId`. */
async function wireError(method, taskId) {
  const ex = wire.requests(method, (e) => e.rpc.params?.taskId === taskId).at(-1);
  assert.ok(ex, `no ${method} for ${taskId} on the wire`);
  const response = await wire.responseIn(ex);
  assert.ok(response?.error, `the ${method} response on the wire is no error: ${JSON.stringify(response)}`);
  return response.error;
}

const text = (result) =>
  result.content.filter((block) => block.type === "text").map((block) => block.text).join("\n");

/** Asserts the 2025-11-25 `Task` shape; `where` names it in messages. */
function assertTask(task, where) {
  assert.equal(typeof task.taskId, "string", `${where}: taskId`);
  assert.ok(
    ["working", "input_required", "completed", "failed", "cancelled"].includes(task.status),
    `${where}: status ${task.status}`,
  );
  assert.ok("ttl" in task, `${where}: no ttl (a number of ms, or null): ${JSON.stringify(task)}`);
  assert.ok(task.ttl === null || Number.isInteger(task.ttl), `${where}: ttl ${task.ttl}`);
  assert.match(task.createdAt, ISO_8601, `${where}: createdAt`);
  assert.match(task.lastUpdatedAt, ISO_8601, `${where}: lastUpdatedAt`);
  assert.ok(
    Date.parse(task.lastUpdatedAt) >= Date.parse(task.createdAt),
    `${where}: lastUpdatedAt ${task.lastUpdatedAt} before createdAt ${task.createdAt}`,
  );
  if ("pollInterval" in task) assert.ok(Number.isInteger(task.pollInterval), `${where}: pollInterval`);
}

// ---------------------------------------------------------------------------------
// Clients

/**
 * An initialized SDK client on `url`. `principal` is sent as `Authorization: Bearer`;
 * `route` may send some of its requests elsewhere (see Wire.fetchFor). Each question
 * the server asks is recorded in `client.asked` and answered by `client.answer`
 * (default: refused). It lists the tools once, which `callToolStream` needs to know
 * which tools take a task.
 */
async function connect(label, url, { principal, route } = {}) {
  const client = new Client(CLIENT_INFO, { capabilities: CLIENT_CAPABILITIES });
  client.label = label;
  client.asked = [];
  client.statusNotes = [];
  client.answer = async () => {
    throw new McpError(ErrorCode.InvalidRequest, `${label} expected no question`);
  };
  client.setRequestHandler(ElicitRequestSchema, async (request, extra) => {
    client.asked.push({ request, extra });
    return client.answer(request, extra);
  });
  client.setNotificationHandler(TaskStatusNotificationSchema, (notification) => {
    client.statusNotes.push(notification.params);
  });
  // What the SDK reports besides the calls' own outcomes (a GET stream refused, an
  // unknown response id, a reconnect): into the transcript.
  client.onerror = (error) => {
    const said = String(error?.message ?? error).replace(/\s+/g, " ").slice(0, 300);
    wire.line(`${wire.stamp()} !! [${label}] SDK onerror: ${said}`);
  };
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    fetch: wire.fetchFor(label, route),
    ...(principal === undefined
      ? {}
      : { requestInit: { headers: { Authorization: `Bearer ${principal}` } } }),
  });
  await client.connect(transport);
  await client.listTools();
  return client;
}

/**
 * Follows `callToolStream(name, args)` to its end: the SDK creates the task, polls
 * `tasks/get` every `pollInterval`, and calls `tasks/result` once the task is
 * completed or needs input. `onCreated(task)` runs before the first poll.
 */
async function follow(client, name, args, onCreated = async () => {}) {
  const messages = [];
  const stream = client.experimental.tasks.callToolStream({ name, arguments: args });
  for await (const message of stream) {
    messages.push(message);
    if (message.type === "taskCreated") await onCreated(message.task);
  }
  assert.equal(messages[0]?.type, "taskCreated", `first of ${JSON.stringify(messages)}`);
  const last = messages.at(-1);
  assert.ok(["result", "error"].includes(last.type), `last of ${JSON.stringify(messages)}`);
  return {
    task: messages[0].task,
    statuses: messages.filter((m) => m.type === "taskStatus").map((m) => m.task),
    result: last.type === "result" ? last.result : undefined,
    error: last.type === "error" ? last.error : undefined,
  };
}

/** Starts `name` as a task through `callToolStream` and stops following it once created. */
async function start(client, name, args) {
  for await (const message of client.experimental.tasks.callToolStream({ name, arguments: args })) {
    if (message.type === "taskCreated") return message.task;
    if (message.type === "error") throw message.error;
    assert.fail(`before taskCreated: ${JSON.stringify(message)}`);
  }
  assert.fail(`${name}: the stream ended without taskCreated`);
}

/** Polls `tasks/get` (at the task's pollInterval) until `until(task)`, within `ms`. */
async function pollTask(client, taskId, until, ms = 20_000) {
  const deadline = Date.now() + ms;
  for (;;) {
    const task = await client.experimental.tasks.getTask(taskId);
    if (until(task)) return task;
    assert.ok(Date.now() < deadline, `task ${taskId} still ${JSON.stringify(task)} after ${ms} ms`);
    await new Promise((resolve) => setTimeout(resolve, task.pollInterval ?? 500));
  }
}

/** Every task `tasks/list` shows `client`, following nextCursor; checks each page. */
async function listAll(client) {
  const tasks = [];
  const cursors = new Set();
  let cursor;
  for (let page = 0; ; page++) {
    assert.ok(page < 100, "more than 100 pages of tasks/list");
    const result = await client.experimental.tasks.listTasks(cursor);
    assert.ok(Array.isArray(result.tasks), `tasks/list: ${JSON.stringify(result)}`);
    result.tasks.forEach((task, i) => assertTask(task, `tasks/list page ${page} #${i}`));
    tasks.push(...result.tasks);
    if (result.nextCursor === undefined) break;
    assert.equal(typeof result.nextCursor, "string", "nextCursor");
    assert.ok(!cursors.has(result.nextCursor), `tasks/list repeated the cursor ${result.nextCursor}`);
    cursors.add(result.nextCursor);
    cursor = result.nextCursor;
  }
  const ids = tasks.map((task) => task.taskId);
  assert.equal(new Set(ids).size, ids.length, `tasks/list listed a task twice: ${ids}`);
  return { tasks, ids, pages: cursors.size + 1 };
}

/**
 * How the SDK followed `taskId` in callToolStream: every `tasks/get` and `tasks/result`
 * it sent carried the call's `task: {}` besides `taskId` (the server must ignore it).
 */
function assertPolledWithTaskParam(taskId) {
  const sent = [...wire.requests("tasks/get"), ...wire.requests("tasks/result")].filter(
    (ex) => ex.rpc.params?.taskId === taskId,
  );
  assert.ok(sent.length > 0, `no tasks/get or tasks/result for ${taskId}`);
  for (const ex of sent) {
    assert.deepEqual(ex.rpc.params, { taskId, task: {} }, `#${ex.n} ${ex.rpc.method} params`);
  }
  return sent.length;
}

/** The initialize exchange of `client` on the wire, and the negotiated version checks. */
async function assertInitialized(client) {
  const init = wire.requests("initialize", (ex) => ex.label === client.label).at(-1);
  assert.ok(init, "no initialize on the wire");
  assert.equal(init.rpc.params.protocolVersion, LATEST_PROTOCOL_VERSION);
  assert.deepEqual(init.rpc.params.capabilities, CLIENT_CAPABILITIES);
  const response = await wire.responseIn(init);
  assert.ok(response?.result, `initialize answered ${JSON.stringify(response)}`);
  assert.equal(response.result.protocolVersion, PROTOCOL);
  const later = wire.exchanges.filter((ex) => ex.label === client.label && ex.n > init.n);
  assert.ok(later.length > 0, "no request after initialize");
  for (const ex of later) {
    assert.equal(ex.requestHeaders["mcp-protocol-version"], PROTOCOL, `#${ex.n} mcp-protocol-version`);
  }
  return response.result;
}

/**
 * The question asked during a task, as it travelled: on the SSE stream of which
 * request, with which `_meta` and id, and the client's answer POST.
 */
async function assertQuestionOnWire(taskId, { answeredTo } = {}) {
  const questions = () =>
    wire.messages().filter(({ message }) => message.method === "elicitation/create");
  const isMine = ({ message }) => message.params?._meta?.[RELATED_TASK]?.taskId === taskId;
  await wire.until(() => questions().some(isMine));
  const asked = questions();
  const mine = asked.filter(isMine);
  assert.equal(
    mine.length,
    1,
    `elicitation/create with _meta["${RELATED_TASK}"].taskId ${taskId}: ${JSON.stringify(asked.map((a) => a.message))}`,
  );
  const { ex, message, event } = mine[0];
  assert.ok(event, `the question came in a JSON body, not an SSE event (#${ex.n})`);
  assert.equal(ex.rpc?.method, "tasks/result", `the question came on the stream of #${ex.n} ${ex.httpMethod} ${ex.rpc?.method ?? ""}`);
  assert.equal(ex.rpc.params.taskId, taskId, "the question came on another task's tasks/result");
  assert.deepEqual(message.params._meta[RELATED_TASK], { taskId }, "related-task _meta");
  const answers = wire.answers(ex, message.id);
  assert.equal(answers.length, 1, `answer POSTs for the request id ${JSON.stringify(message.id)}`);
  const answer = answers[0];
  await wire.until(() => answer.status !== undefined || answer.ended !== undefined);
  assert.equal(answer.status, 202, `the answer POST #${answer.n} got ${answer.status}`);
  assert.ok(answer.rpc.result, `the answer: ${JSON.stringify(answer.rpc)}`);
  if (answeredTo !== undefined) assert.equal(answer.url, answeredTo, "where the answer was POSTed");
  return { carrier: ex, message, answer };
}

// ---------------------------------------------------------------------------------
// server-everything: the SDK's own server side (simulate-research-query)

async function everything(url) {
  const RESEARCH = "simulate-research-query";
  let client;
  let created;
  let followed;

  await check("connect: initialize 2025-11-25 with tasks.requests.elicitation.create", async () => {
    client = await connect("v1", url);
    const result = await assertInitialized(client);
    assert.equal(result.serverInfo.name, "mcp-servers/everything");
    return `session ${client.transport.sessionId}`;
  });

  await check("server capabilities.tasks: list, cancel, requests.tools.call", async () => {
    const tasks = client.getServerCapabilities().tasks;
    assert.deepEqual(tasks, { list: {}, cancel: {}, requests: { tools: { call: {} } } });
    return JSON.stringify(tasks);
  });

  await check(`tools/list: ${RESEARCH} execution.taskSupport "required"`, async () => {
    const { tools } = await client.listTools();
    const research = tools.find((tool) => tool.name === RESEARCH);
    assert.ok(research, `no ${RESEARCH} in ${tools.map((t) => t.name)}`);
    assert.deepEqual(research.execution, { taskSupport: "required" });
    const echo = tools.find((tool) => tool.name === "echo");
    assert.deepEqual(echo?.execution, { taskSupport: "forbidden" });
    return `echo: ${JSON.stringify(echo.execution)}`;
  });

  await check("callTool on a required tool: the SDK refuses it before sending (-32600)", async () => {
    const before = wire.requests("tools/call").length;
    await refused(client.callTool({ name: RESEARCH, arguments: { topic: "x" } }), ErrorCode.InvalidRequest, "callTool");
    assert.equal(wire.requests("tools/call").length, before, "a tools/call went out");
  });

  await check("tools/call without task on a required tool: a CallToolResult with isError (not a JSON-RPC error)", async () => {
    const result = await client.request(
      { method: "tools/call", params: { name: RESEARCH, arguments: { topic: "x" } } },
      CallToolResultSchema,
    );
    assert.equal(result.isError, true);
    assert.match(text(result), /-32601/);
    return JSON.stringify(text(result));
  });

  await check("callToolStream: taskCreated, taskStatus working..completed, result", async () => {
    followed = await follow(client, RESEARCH, { topic: "durable tasks" });
    created = followed.task;
    assertTask(created, "taskCreated");
    assert.equal(created.status, "working");
    assert.equal(created.ttl, 300_000);
    assert.equal(created.pollInterval, 1000);
    const statuses = followed.statuses.map((task) => task.status);
    assert.equal(statuses.at(-1), "completed", `statuses ${statuses}`);
    assert.ok(statuses.slice(0, -1).every((s) => s === "working"), `statuses ${statuses}`);
    assert.equal(followed.error, undefined);
    assert.match(text(followed.result), /# Research Report: durable tasks/);
    // The CreateTaskResult as it travelled.
    const call = wire.requests("tools/call", (ex) => ex.rpc.params.task !== undefined).at(-1);
    assert.deepEqual(call.rpc.params.task, {}, "the SDK's task param");
    const response = await wire.responseIn(call);
    assert.deepEqual(Object.keys(response.result), ["task"], `CreateTaskResult ${JSON.stringify(response.result)}`);
    assert.deepEqual(response.result.task, created);
    assertPolledWithTaskParam(created.taskId);
    return `${statuses.length} tasks/get, statuses ${[...new Set(statuses)]}`;
  });

  await check("tasks/get: completed, ttl, pollInterval, ISO 8601 createdAt and lastUpdatedAt", async () => {
    const task = await client.experimental.tasks.getTask(created.taskId);
    assertTask(task, "tasks/get");
    assert.equal(task.taskId, created.taskId);
    assert.equal(task.status, "completed");
    assert.equal(task.createdAt, created.createdAt);
    const raw = await wire.responseIn(wire.requests("tasks/get", (ex) => ex.rpc.params.taskId === created.taskId).at(-1));
    assert.equal(raw.result._meta, undefined, "tasks/get carries no _meta");
    return JSON.stringify(raw.result);
  });

  await check("tasks/result: the CallToolResult, _meta related-task", async () => {
    const result = await client.experimental.tasks.getTaskResult(created.taskId, CallToolResultSchema);
    assert.deepEqual(result.content, followed.result.content);
    assert.deepEqual(result._meta?.[RELATED_TASK], { taskId: created.taskId });
    const raw = await wire.responseIn(wire.requests("tasks/result", (ex) => ex.rpc.params.taskId === created.taskId).at(-1));
    assert.deepEqual(raw.result._meta, { [RELATED_TASK]: { taskId: created.taskId } });
    return "_meta kept by the SDK";
  });

  await check("tasks/list: the task, the same as tasks/get shows it", async () => {
    const { tasks, ids } = await listAll(client);
    const listed = tasks.find((task) => task.taskId === created.taskId);
    assert.ok(listed, `${created.taskId} not in ${ids}`);
    assert.deepEqual(listed, await client.experimental.tasks.getTask(created.taskId));
    return `${ids.length} task(s)`;
  });

  await check("unknown task id: tasks/get, tasks/result, tasks/cancel refused with -32602", async () => {
    const unknown = "no-such-task";
    const get = await refused(client.experimental.tasks.getTask(unknown), ErrorCode.InvalidParams, "tasks/get");
    const result = await refused(client.experimental.tasks.getTaskResult(unknown, CallToolResultSchema), ErrorCode.InvalidParams, "tasks/result");
    const cancel = await refused(client.experimental.tasks.cancelTask(unknown), ErrorCode.InvalidParams, "tasks/cancel");
    // The SDK's server puts McpError's own message (code prefix included) on the wire.
    assert.deepEqual(await wireError("tasks/get", unknown), {
      code: -32602,
      message: "MCP error -32602: Failed to retrieve task: Task not found",
    });
    return [get, result, cancel].map((e) => JSON.stringify(e.message)).join("; ");
  });

  await check("tasks/list with a bad cursor: -32602", async () => {
    const error = await refused(client.experimental.tasks.listTasks("no-such-cursor"), ErrorCode.InvalidParams, "tasks/list");
    return JSON.stringify(error.message);
  });

  await check("another session: its tasks/get refused (-32602), its tasks/list without the task", async () => {
    const other = await connect("v1-other-session", url);
    try {
      assert.notEqual(other.transport.sessionId, client.transport.sessionId);
      await refused(other.experimental.tasks.getTask(created.taskId), ErrorCode.InvalidParams, "tasks/get");
      const { ids } = await listAll(other);
      assert.ok(!ids.includes(created.taskId), "listed to another session");
    } finally {
      await other.close();
    }
  });

  await check("tasks/cancel of a completed task: -32602", async () => {
    const error = await refused(client.experimental.tasks.cancelTask(created.taskId), ErrorCode.InvalidParams, "tasks/cancel");
    return JSON.stringify(error.message);
  });

  let cancelled;
  await check("tasks/cancel of a running task: cancelled; the stream ends in an error", async () => {
    let answer;
    const run = await follow(client, RESEARCH, { topic: "to be cancelled" }, async (task) => {
      answer = await client.experimental.tasks.cancelTask(task.taskId);
    });
    cancelled = run.task;
    assertTask(answer, "tasks/cancel");
    assert.equal(answer.taskId, cancelled.taskId);
    assert.equal(answer.status, "cancelled");
    assert.equal(run.result, undefined);
    assert.match(run.error.message, /was cancelled/);
    const task = await client.experimental.tasks.getTask(cancelled.taskId);
    assert.equal(task.status, "cancelled");
    return `statusMessage ${JSON.stringify(answer.statusMessage)}`;
  });

  await check("tasks/cancel again: -32602", async () => {
    const error = await refused(client.experimental.tasks.cancelTask(cancelled.taskId), ErrorCode.InvalidParams, "tasks/cancel");
    return JSON.stringify(error.message);
  });

  await check("tasks/result of a cancelled task: -32603 (no result stored)", async () => {
    const error = await refused(
      client.experimental.tasks.getTaskResult(cancelled.taskId, CallToolResultSchema),
      ErrorCode.InternalError,
      "tasks/result",
    );
    return JSON.stringify(error.message);
  });

  await check("tasks/list pages: 10 a page, oldest first, nextCursor until the last page", async () => {
    const more = [];
    for (let i = 0; i < 10; i++) {
      const { task } = await client.request(
        { method: "tools/call", params: { name: RESEARCH, arguments: { topic: `page ${i}` } } },
        CreateTaskResultSchema,
        { task: { ttl: 60_000 } },
      );
      more.push(task);
    }
    assert.equal(more[0].ttl, 300_000, "the server's ttl, not the requested one");
    const first = await client.experimental.tasks.listTasks();
    assert.equal(first.tasks.length, 10);
    assert.equal(first.nextCursor, first.tasks.at(-1).taskId, "nextCursor: the page's last taskId");
    const { ids, pages } = await listAll(client);
    const expected = [created.taskId, cancelled.taskId, ...more.map((task) => task.taskId)];
    assert.deepEqual(ids, expected, "every task, in creation order");
    return `${ids.length} tasks in ${pages} pages; requested ttl 60000, got ${more[0].ttl}`;
  });

  await check("a question during a task: input_required, elicitation/create on the tasks/result stream, answered", async () => {
    let whileAsked;
    client.answer = async (request) => {
      const taskId = request.params._meta?.[RELATED_TASK]?.taskId;
      whileAsked = await client.experimental.tasks.getTask(taskId);
      return { action: "accept", content: { interpretation: "snake" } };
    };
    const run = await follow(client, RESEARCH, { topic: "python", ambiguous: true });
    const id = run.task.taskId;
    assert.equal(client.asked.length, 1, "questions asked");
    const { request, extra } = client.asked[0];
    assert.equal(request.params.mode, undefined, "no mode: form by default");
    assert.ok(request.params.requestedSchema.properties.interpretation);
    assert.deepEqual(request.params._meta[RELATED_TASK], { taskId: id });
    assert.equal(whileAsked.status, "input_required", "tasks/get while the question waits");
    const statuses = run.statuses.map((task) => task.status);
    assert.equal(statuses.at(-1), "input_required", `the SDK calls tasks/result on input_required: ${statuses}`);
    assert.match(text(run.result), /# Research Report: python \(snake\)/);
    const { carrier, message, answer } = await assertQuestionOnWire(id, { answeredTo: url });
    assert.equal(typeof message.id, "number", "the server's request id");
    assert.equal(extra.requestId, message.id);
    const after = await client.experimental.tasks.getTask(id);
    assert.equal(after.status, "completed");
    return `question id ${message.id} on #${carrier.n} (tasks/result), answer #${answer.n} -> ${answer.status}`;
  });

  await check("notifications/tasks/status (optional): a full Task, on the GET stream only", async () => {
    const notes = wire.messages().filter(({ message }) => message.method === "notifications/tasks/status");
    assert.ok(notes.length > 0, "none arrived");
    for (const { ex, message } of notes) {
      assert.equal(ex.httpMethod, "GET", `one came on #${ex.n} ${ex.rpc?.method}`);
      assertTask(message.params, "notifications/tasks/status");
    }
    const mine = client.statusNotes.filter((note) => note.taskId === created.taskId);
    assert.ok(mine.some((note) => note.status === "completed"), JSON.stringify(mine));
    return `${client.statusNotes.length} handed to the client`;
  });

  await client.close();
}

// ---------------------------------------------------------------------------------
// The quickstart behind the layer (examples/quickstart.rs)

async function quickstart(urlA, urlB) {
  const clients = [];
  const open = async (...args) => {
    const client = await connect(...args);
    clients.push(client);
    return client;
  };
  let alice;
  let bob;
  let built;

  await check("connect alice to A: initialize 2025-11-25", async () => {
    alice = await open("alice@A", urlA, { principal: "alice" });
    const result = await assertInitialized(alice);
    return `server ${result.serverInfo.name} ${result.serverInfo.version}`;
  });

  await check("server capabilities.tasks: list, cancel, requests.tools.call", async () => {
    const tasks = alice.getServerCapabilities().tasks;
    assert.ok(tasks, "no capabilities.tasks");
    assert.deepEqual(tasks.list, {});
    assert.deepEqual(tasks.cancel, {});
    assert.deepEqual(tasks.requests?.tools?.call, {});
    return JSON.stringify(tasks);
  });

  await check('tools/list: build "optional", deploy "required"', async () => {
    const { tools } = await alice.listTools();
    const support = Object.fromEntries(tools.map((tool) => [tool.name, tool.execution?.taskSupport]));
    assert.equal(support.build, "optional", JSON.stringify(support));
    assert.equal(support.deploy, "required", JSON.stringify(support));
    return JSON.stringify(support);
  });

  await check("callToolStream build {seconds: 1}: taskCreated, completed, the result", async () => {
    const run = await follow(alice, "build", { seconds: 1 });
    built = run.task;
    assertTask(built, "taskCreated");
    assert.ok(["working", "completed"].includes(built.status), built.status);
    assert.equal(run.error, undefined, run.error?.message);
    assert.equal(text(run.result), "Build finished after 1s");
    assert.equal(run.statuses.at(-1)?.status, "completed");
    const call = wire.requests("tools/call", (ex) => ex.rpc.params.task !== undefined).at(-1);
    const response = await wire.responseIn(call);
    assert.ok(response?.result?.task, `CreateTaskResult ${JSON.stringify(response)}`);
    assert.equal(response.result.task.taskId, built.taskId);
    assertPolledWithTaskParam(built.taskId);
    return `CreateTaskResult ${JSON.stringify(response.result)}`;
  });

  await check("tasks/get: completed, ttl, createdAt", async () => {
    const task = await alice.experimental.tasks.getTask(built.taskId);
    assertTask(task, "tasks/get");
    assert.equal(task.status, "completed");
    assert.equal(task.createdAt, built.createdAt);
    return JSON.stringify(task);
  });

  await check("tasks/result: the CallToolResult, _meta related-task", async () => {
    const result = await alice.experimental.tasks.getTaskResult(built.taskId, CallToolResultSchema);
    assert.equal(text(result), "Build finished after 1s");
    const raw = await wire.responseIn(wire.requests("tasks/result", (ex) => ex.rpc.params.taskId === built.taskId).at(-1));
    assert.deepEqual(raw?.result?._meta?.[RELATED_TASK], { taskId: built.taskId }, `on the wire: ${JSON.stringify(raw)}`);
    assert.deepEqual(result._meta?.[RELATED_TASK], { taskId: built.taskId }, "through the SDK");
  });

  await check("plain callTool build {seconds: 1} (no task): answered with the result", async () => {
    const result = await alice.callTool({ name: "build", arguments: { seconds: 1 } });
    assert.equal(text(result), "Build finished after 1s");
    const call = wire.requests("tools/call", (ex) => ex.label === alice.label).at(-1);
    assert.equal(call.rpc.params.task, undefined);
    const response = await wire.responseIn(call);
    assert.ok(response?.result, `tools/call answered ${JSON.stringify(response)}`);
    assert.equal(response.result.task, undefined, "a task came back");
  });

  await check("tools/call deploy without task: -32601", async () => {
    const error = await refused(
      alice.request({ method: "tools/call", params: { name: "deploy", arguments: { target: "prod" } } }, CallToolResultSchema),
      ErrorCode.MethodNotFound,
      "tools/call",
    );
    return JSON.stringify(error.message);
  });

  await check("unknown task id: tasks/get -32602", async () => {
    const error = await refused(alice.experimental.tasks.getTask("no-such-task"), ErrorCode.InvalidParams, "tasks/get");
    return JSON.stringify(error.message);
  });

  await check("tasks/list with a bad cursor: -32602", async () => {
    const error = await refused(alice.experimental.tasks.listTasks("no-such-cursor"), ErrorCode.InvalidParams, "tasks/list");
    return JSON.stringify(error.message);
  });

  await check("tasks/cancel of a completed task: -32602", async () => {
    const error = await refused(alice.experimental.tasks.cancelTask(built.taskId), ErrorCode.InvalidParams, "tasks/cancel");
    return JSON.stringify(error.message);
  });

  let cancelled;
  await check("tasks/cancel of build {seconds: 30}: cancelled; the stream ends in an error", async () => {
    let answer;
    const run = await follow(alice, "build", { seconds: 30 }, async (task) => {
      answer = await alice.experimental.tasks.cancelTask(task.taskId);
    });
    cancelled = run.task;
    assertTask(answer, "tasks/cancel");
    assert.equal(answer.taskId, cancelled.taskId);
    assert.equal(answer.status, "cancelled");
    assert.match(run.error?.message ?? "", /was cancelled/, JSON.stringify(run));
    assert.equal((await alice.experimental.tasks.getTask(cancelled.taskId)).status, "cancelled");
  });

  await check("tasks/cancel again: -32602", async () => {
    const error = await refused(alice.experimental.tasks.cancelTask(cancelled.taskId), ErrorCode.InvalidParams, "tasks/cancel");
    return JSON.stringify(error.message);
  });

  await check("tasks/list as alice: her tasks, newest first", async () => {
    const { tasks, ids, pages } = await listAll(alice);
    const older = ids.indexOf(built.taskId);
    const newer = ids.indexOf(cancelled.taskId);
    assert.ok(older >= 0 && newer >= 0, `${built.taskId}, ${cancelled.taskId} in ${ids}`);
    assert.ok(newer < older, "newest first");
    for (let i = 1; i < tasks.length; i++) {
      assert.ok(Date.parse(tasks[i - 1].createdAt) >= Date.parse(tasks[i].createdAt), `order at ${i}`);
    }
    return `${ids.length} task(s), ${pages} page(s)`;
  });

  await check("bob: tasks/list without alice's tasks; tasks/get, tasks/result, tasks/cancel -32602 without the id", async () => {
    bob = await open("bob@A", urlA, { principal: "bob" });
    const { ids } = await listAll(bob);
    assert.ok(!ids.includes(built.taskId) && !ids.includes(cancelled.taskId), `bob sees ${ids}`);
    const refusals = [
      await refused(bob.experimental.tasks.getTask(built.taskId), ErrorCode.InvalidParams, "tasks/get"),
      await refused(bob.experimental.tasks.getTaskResult(built.taskId, CallToolResultSchema), ErrorCode.InvalidParams, "tasks/result"),
      await refused(bob.experimental.tasks.cancelTask(built.taskId), ErrorCode.InvalidParams, "tasks/cancel"),
    ];
    for (const error of refusals) assert.ok(!error.message.includes(built.taskId), `names the id: ${error.message}`);
    return refusals.map((e) => JSON.stringify(e.message)).join("; ");
  });

  await check('callToolStream deploy {target: "prod"}: input_required, the question answered, "Deployed to prod"', async () => {
    let whileAsked;
    alice.asked.length = 0;
    alice.answer = async (request) => {
      whileAsked = await alice.experimental.tasks.getTask(request.params._meta?.[RELATED_TASK]?.taskId);
      return { action: "accept", content: { confirm: true } };
    };
    const run = await follow(alice, "deploy", { target: "prod" });
    assert.equal(run.error, undefined, run.error?.message);
    assert.equal(text(run.result), "Deployed to prod");
    assert.equal(alice.asked.length, 1, "questions asked");
    const { request } = alice.asked[0];
    assert.equal(request.params.mode ?? "form", "form");
    assert.equal(request.params.requestedSchema.properties.confirm?.type, "boolean");
    assert.equal(whileAsked?.status, "input_required", "tasks/get while the question waits");
    const { carrier, message, answer } = await assertQuestionOnWire(run.task.taskId, { answeredTo: urlA });
    assert.equal((await alice.experimental.tasks.getTask(run.task.taskId)).status, "completed");
    return `question id ${JSON.stringify(message.id)} on #${carrier.n}, answer #${answer.n} -> ${answer.status}`;
  });

  await check('deploy {target: "staging"} answered confirm: false: "Deployment to staging called off"', async () => {
    alice.answer = async () => ({ action: "accept", content: { confirm: false } });
    const run = await follow(alice, "deploy", { target: "staging" });
    assert.equal(text(run.result), "Deployment to staging called off");
  });

  if (urlB !== undefined) await twoNodes(urlA, urlB, alice, open);

  for (const client of clients) await client.close();
}

/** Created on A, followed on B (same store): get, result, list, cancel, a question. */
async function twoNodes(urlA, urlB, alice, open) {
  let aliceB;
  let created;

  await check("connect alice to B", async () => {
    aliceB = await open("alice@B", urlB, { principal: "alice" });
    await assertInitialized(aliceB);
  });

  await check("build {seconds: 2} created on A: tasks/get, tasks/result on B", async () => {
    created = await start(alice, "build", { seconds: 2 });
    const seen = await aliceB.experimental.tasks.getTask(created.taskId);
    assertTask(seen, "tasks/get on B");
    assert.equal(seen.createdAt, created.createdAt);
    const result = await aliceB.experimental.tasks.getTaskResult(created.taskId, CallToolResultSchema);
    assert.equal(text(result), "Build finished after 2s");
    assert.equal((await aliceB.experimental.tasks.getTask(created.taskId)).status, "completed");
  });

  await check("tasks/list on B: the task created on A", async () => {
    const { ids } = await listAll(aliceB);
    assert.ok(ids.includes(created.taskId), `${created.taskId} not in ${ids}`);
  });

  await check("build {seconds: 30} created on A, cancelled on B: cancelled on A", async () => {
    const task = await start(alice, "build", { seconds: 30 });
    const answer = await aliceB.experimental.tasks.cancelTask(task.taskId);
    assert.equal(answer.status, "cancelled");
    assert.equal((await alice.experimental.tasks.getTask(task.taskId)).status, "cancelled");
    await refused(aliceB.experimental.tasks.cancelTask(task.taskId), ErrorCode.InvalidParams, "cancel again on B");
  });

  await check("deploy created on A, its question asked and answered on B's tasks/result", async () => {
    const task = await start(alice, "deploy", { target: "b" });
    const waiting = await pollTask(aliceB, task.taskId, (t) => t.status !== "working");
    assert.equal(waiting.status, "input_required", "tasks/get on B while the question waits");
    aliceB.answer = async () => ({ action: "accept", content: { confirm: true } });
    const result = await aliceB.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    assert.equal(text(result), "Deployed to b");
    assert.equal(aliceB.asked.length, 1);
    const { carrier } = await assertQuestionOnWire(task.taskId, { answeredTo: urlB });
    assert.equal(carrier.url, urlB, "asked on B's stream");
  });

  await check("deploy followed on A, the answer POST routed to B (as a load balancer may)", async () => {
    // The SDK answers on the transport the question came on; a fetch that sends the
    // client's response POSTs to B stands for a balancer that picks another node.
    const routed = await open("alice@A,answers@B", urlA, {
      principal: "alice",
      route: (url, rpc) => (rpc && !("method" in rpc) && "id" in rpc ? urlB : url),
    });
    routed.answer = async () => ({ action: "accept", content: { confirm: true } });
    const run = await follow(routed, "deploy", { target: "lb" });
    assert.equal(run.error, undefined, run.error?.message);
    assert.equal(text(run.result), "Deployed to lb");
    const { carrier } = await assertQuestionOnWire(run.task.taskId, { answeredTo: urlB });
    assert.equal(carrier.url, urlA, "asked on A's stream");
  });
}

/**
 * `TaskMode::Auto` tools on the 2025-11-25 wire: each is "optional"; a task-augmented
 * call becomes a task at once, slow or fast; a plain call waits for the answer; the
 * handler's progress becomes the status message, its error the task's failure, and
 * `tasks/cancel` drops the running handler.
 */
async function retrofit(url) {
  let alice;
  const stats = async () => JSON.parse(text(await alice.callTool({ name: "stats", arguments: {} })));

  await check("connect alice: initialize 2025-11-25, capabilities.tasks", async () => {
    alice = await connect("alice", url, { principal: "alice" });
    const result = await assertInitialized(alice);
    assert.deepEqual(alice.getServerCapabilities().tasks?.requests?.tools?.call, {});
    return `server ${result.serverInfo.name} ${result.serverInfo.version}`;
  });

  await check('tools/list: every Auto tool "optional"', async () => {
    const { tools } = await alice.listTools();
    const support = Object.fromEntries(tools.map((tool) => [tool.name, tool.execution?.taskSupport]));
    for (const name of ["sleep", "boom", "slow_ask", "steps", "stats"]) {
      assert.equal(support[name], "optional", `${name} in ${JSON.stringify(support)}`);
    }
    return JSON.stringify(support);
  });

  await check("callToolStream sleep {ms: 1500}: a task at once, completed, the handler's answer", async () => {
    const started = Date.now();
    let createdAfter;
    const run = await follow(alice, "sleep", { ms: 1500 }, async () => {
      createdAfter = Date.now() - started;
    });
    assertTask(run.task, "taskCreated");
    assert.equal(run.task.status, "working", "a slow Auto call is a working task at once");
    assert.ok(createdAfter < 1500, `taskCreated after ${createdAfter} ms`);
    assert.equal(run.error, undefined, run.error?.message);
    assert.equal(text(run.result), "slept 1500ms");
    assertPolledWithTaskParam(run.task.taskId);
    return `taskCreated after ${createdAfter} ms`;
  });

  await check("callToolStream sleep {ms: 10}: a fast answer is a task too, already completed", async () => {
    const run = await follow(alice, "sleep", { ms: 10 });
    assert.equal(run.error, undefined, run.error?.message);
    assert.equal(text(run.result), "slept 10ms");
    const task = await alice.experimental.tasks.getTask(run.task.taskId);
    assert.equal(task.status, "completed");
    const result = await alice.experimental.tasks.getTaskResult(run.task.taskId, CallToolResultSchema);
    assert.deepEqual(result._meta?.[RELATED_TASK], { taskId: run.task.taskId });
  });

  await check("plain callTool sleep {ms: 600} (no task): the client waits for the answer", async () => {
    const result = await alice.callTool({ name: "sleep", arguments: { ms: 600 } });
    assert.equal(text(result), "slept 600ms");
    const response = await wire.responseIn(wire.requests("tools/call", (ex) => ex.rpc.params.name === "sleep").at(-1));
    assert.equal(response?.result?.task, undefined, `a task came back: ${JSON.stringify(response)}`);
  });

  await check("steps {steps: 4, ms: 400} as a task: progress as statusMessage while working, then the result", async () => {
    const task = await start(alice, "steps", { steps: 4, ms: 400 });
    const seen = new Set();
    const done = await pollTask(alice, task.taskId, (t) => {
      if (t.statusMessage) seen.add(t.statusMessage);
      return t.status !== "working";
    });
    assert.equal(done.status, "completed", JSON.stringify(done));
    assert.ok([...seen].some((m) => /step \d of 4 done/.test(m)), `status messages seen: ${JSON.stringify([...seen])}`);
    const result = await alice.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema);
    assert.equal(text(result), "4 steps done");
    return JSON.stringify([...seen]);
  });

  await check("boom {ms: 400} as a task: failed; tasks/result gives the handler's error", async () => {
    const task = await start(alice, "boom", { ms: 400 });
    const done = await pollTask(alice, task.taskId, (t) => t.status !== "working");
    assert.equal(done.status, "failed", JSON.stringify(done));
    const error = await refused(
      alice.experimental.tasks.getTaskResult(task.taskId, CallToolResultSchema),
      ErrorCode.InternalError,
      "tasks/result",
    );
    assert.match(error.message, /boom/);
    return JSON.stringify(error.message);
  });

  await check("tasks/cancel of sleep {ms: 30000}: cancelled, the handler dropped, cancel again -32602", async () => {
    const before = await stats();
    const task = await start(alice, "sleep", { ms: 30000 });
    const answer = await alice.experimental.tasks.cancelTask(task.taskId);
    assert.equal(answer.status, "cancelled");
    const deadline = Date.now() + 10_000;
    let after = await stats();
    while (after.dropped === before.dropped && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
      after = await stats();
    }
    assert.equal(after.dropped, before.dropped + 1, `stats ${JSON.stringify(before)} -> ${JSON.stringify(after)}`);
    assert.equal((await alice.experimental.tasks.getTask(task.taskId)).status, "cancelled");
    await refused(alice.experimental.tasks.cancelTask(task.taskId), ErrorCode.InvalidParams, "cancel again");
    return `stats ${JSON.stringify(after)}`;
  });

  await check("bob: tasks/list without alice's tasks; tasks/get of hers -32602", async () => {
    const bob = await connect("bob", url, { principal: "bob" });
    const { ids: hers } = await listAll(alice);
    assert.ok(hers.length >= 5, `alice lists ${hers.length}`);
    const { ids: his } = await listAll(bob);
    assert.deepEqual(his.filter((id) => hers.includes(id)), []);
    await refused(bob.experimental.tasks.getTask(hers[0]), ErrorCode.InvalidParams, "tasks/get");
    await bob.close();
  });

  await alice.close();
}

// ---------------------------------------------------------------------------------

const options = parseArgs(process.argv.slice(2));
const wire = new Wire(options.wire);
process.on("unhandledRejection", (error) => fail(`${failing} (unhandled rejection)`, error));

if (options.target === "everything") {
  console.log(`# sdk-v1: @modelcontextprotocol/sdk client against server-everything at ${options.url}`);
  await everything(options.url);
} else if (options.target === "retrofit") {
  console.log(`# sdk-v1: @modelcontextprotocol/sdk client against the retrofit example at ${options.url}`);
  await retrofit(options.url);
} else {
  console.log(`# sdk-v1: @modelcontextprotocol/sdk client against the quickstart at ${options.a}${options.b ? ` and ${options.b}` : ""}`);
  await quickstart(options.a, options.b);
}
console.log(`# ${passed} checks passed`);
process.exit(0);
