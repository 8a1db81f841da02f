#!/usr/bin/env node
// Interop: the official JavaScript A2A client (@a2a-js/sdk) drives a running server.
//
//   node tests/support/js/interop.mjs <base-url> [--transport JSONRPC|HTTP+JSON|GRPC] [--protocol 0.3|1.0|auto]
//                             [--stock] [--steps send,stream,...] [--timeout-ms 30000]
//                             [--header NAME=VALUE ...] [--extensions URI,...] [--card-jwk FILE]
//                             [--repository URL]
//
// The client is built the way an SDK user builds one: the SDK's DefaultAgentCardResolver fetches
// <base-url>/.well-known/agent-card.json (v0.3 cards are translated by the SDK's compat layer), and
// the SDK's ClientFactory picks the transport from the card's supportedInterfaces:
//
//   --transport  the protocol binding to prefer (ClientFactory `preferredTransports`); default JSONRPC
//                (aliases: jsonrpc, rest, http+json, grpc). GRPC uses the SDK's `@a2a-js/sdk/client/grpc`
//                transport (with its optional peers @grpc/grpc-js and @bufbuild/protobuf).
//   --protocol   0.3 or 1.0: keep only the card's interfaces of that version before the factory picks
//                (the factory itself always prefers 1.0 when a binding is offered in both versions);
//                auto: let the factory choose. Default auto.
//   --stock      ignore the options above: `new ClientFactory().createFromUrl(base)` with the SDK's
//                defaults (v1.0 transports, no v0.3 compat), i.e. the plain client most users write.
//   --header     NAME=VALUE sent with every call of the client (a credential such as X-API-Key=...), as
//                an SDK user adds one: a client interceptor putting it in the call's service parameters
//                (HTTP headers; gRPC metadata). Repeatable.
//   --extensions the extension URIs the `extensions` step requests (the SDK's `withA2AExtensions`).
//   --card-jwk   a JSON file of public JWKs by kid ({"<kid>": {...}}): the keys the `signed_card` step
//                verifies the card's signatures with (the SDK's `verifyAgentCardSignature`, on jose).
//   --repository the git URL the `repository` and `repository_stream` steps name in the message's
//                metadata.repository (the server's ndjson repo agent edits it on `EDIT`).
//
// Every call then goes through the SDK's own request building and response parsing. Each step prints
// one JSON object on its own line to stdout: {"step": ..., "ok": true|false, "error"?: ..., ...}, with
// `wire` listing the HTTP requests the step made (method, path, A2A-Version header, JSON-RPC method), or
// its gRPC calls (method "GRPC", path `/<package>.A2AService/<Method>`, the a2a-version metadata).
// The wire record also has the response's `A2A-Extensions` (`echo`; gRPC: the initial metadata's) and the
// extensions header the SDK sent (`extensions`, under the name it used: `extensionsHeader`).
// --steps defaults to the first six steps; resubscribe, push_config, multi_turn, extensions, signed_card,
// repository and repository_stream run when named.
// The exit status is 0 when every step passed, 1 when a step failed, 2 when no client could be built.

import { randomUUID } from "node:crypto";
import { parseArgs } from "node:util";

import { InterceptingCall } from "@grpc/grpc-js";
import { readFileSync } from "node:fs";

import { AgentCard, Role, roleToJSON, TaskState, taskStateToJSON, verifyAgentCardSignature } from "@a2a-js/sdk";
import {
  ClientFactory,
  ClientFactoryOptions,
  DefaultAgentCardResolver,
  JsonRpcTransportFactory,
  RestTransportFactory,
  ServiceParameters,
  withA2AExtensions,
} from "@a2a-js/sdk/client";
import { GrpcTransportFactory } from "@a2a-js/sdk/client/grpc";
import { ExtensionSupportRequiredError, TaskNotCancelableError, TaskNotFoundError } from "@a2a-js/sdk/errors";

const RESPONSE = "assistant-response";
const DEFAULT_STEPS = ["send", "stream", "get", "cancel", "cancel_nonblocking", "not_found"];
const ALL_STEPS = [
  ...DEFAULT_STEPS,
  "resubscribe",
  "push_config",
  "multi_turn",
  "extensions",
  "signed_card",
  "repository",
  "repository_stream",
];
const ORDER = [TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING];
const TERMINAL = new Set([
  TaskState.TASK_STATE_COMPLETED,
  TaskState.TASK_STATE_FAILED,
  TaskState.TASK_STATE_CANCELED,
  TaskState.TASK_STATE_REJECTED,
]);
const BINDINGS = { jsonrpc: "JSONRPC", rest: "HTTP+JSON", "http+json": "HTTP+JSON", grpc: "GRPC" };

// ---- arguments ----------------------------------------------------------------------------------

function usage(message) {
  process.stderr.write(`${message}\nusage: node interop.mjs <base-url> [--transport JSONRPC|HTTP+JSON|GRPC] ` +
    `[--protocol 0.3|1.0|auto] [--stock] [--steps ${ALL_STEPS.join(",")}] [--timeout-ms N] ` +
    `[--header NAME=VALUE ...] [--extensions URI,...] [--card-jwk FILE] [--repository URL]\n`);
  process.exit(64);
}

let args;
try {
  args = parseArgs({
    allowPositionals: true,
    options: {
      transport: { type: "string", default: "JSONRPC" },
      protocol: { type: "string", default: "auto" },
      stock: { type: "boolean", default: false },
      steps: { type: "string", default: DEFAULT_STEPS.join(",") },
      "timeout-ms": { type: "string", default: "30000" },
      header: { type: "string", multiple: true, default: [] },
      extensions: { type: "string", default: "" },
      "card-jwk": { type: "string" },
      repository: { type: "string" },
    },
  });
} catch (err) {
  usage(err.message);
}
if (args.positionals.length !== 1) usage("one base URL is required");
const BASE_URL = args.positionals[0];
const TRANSPORT = BINDINGS[args.values.transport.toLowerCase()];
if (!TRANSPORT) usage(`unknown transport ${args.values.transport}`);
const PROTOCOL = args.values.protocol;
if (!["0.3", "1.0", "auto"].includes(PROTOCOL)) usage(`unknown protocol ${PROTOCOL}`);
const STEPS = args.values.steps.split(",").filter(Boolean);
for (const s of STEPS) if (!ALL_STEPS.includes(s)) usage(`unknown step ${s}`);
const WAIT_MS = Number(args.values["timeout-ms"]);
if (!(WAIT_MS > 0)) usage("--timeout-ms must be a positive number");
const HEADERS = {};
for (const h of args.values.header) {
  const at = h.indexOf("=");
  if (at < 1) usage(`--header ${h}: expected NAME=VALUE`);
  HEADERS[h.slice(0, at)] = h.slice(at + 1);
}
const EXTENSIONS = args.values.extensions.split(",").filter(Boolean);
const CARD_JWKS = args.values["card-jwk"] ? JSON.parse(readFileSync(args.values["card-jwk"], "utf8")) : null;
const REPOSITORY = args.values.repository ?? null;

// ---- output and the wire record -----------------------------------------------------------------

// stdout carries the steps' JSON lines only: what the SDK logs itself (its signature verifier reports each
// signature that does not verify with console.debug) goes to stderr.
for (const level of ["log", "info", "debug"]) console[level] = console.error;

function emit(obj) {
  return new Promise((resolve) => process.stdout.write(JSON.stringify(obj) + "\n", resolve));
}

/**
 * Every HTTP request the SDK makes: method, path, A2A-Version header, JSON-RPC method if any. The SDK
 * calls the global `fetch` when no `fetchImpl` is given, so wrapping it records the stock client too.
 */
const wire = [];
const realFetch = globalThis.fetch;
globalThis.fetch = async function recordingFetch(input, init = {}) {
  const url = new URL(input instanceof Request ? input.url : String(input));
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  const entry = { method: init.method ?? "GET", path: url.pathname + url.search };
  entry.version = headers.get("A2A-Version");
  for (const name of ["A2A-Extensions", "X-A2A-Extensions"]) {
    if (headers.has(name)) Object.assign(entry, { extensions: headers.get(name), extensionsHeader: name });
  }
  if (typeof init.body === "string") {
    try {
      const body = JSON.parse(init.body);
      if (body && typeof body === "object" && typeof body.method === "string") entry.rpc = body.method;
    } catch {
      // not JSON: nothing more to record
    }
  }
  wire.push(entry);
  const response = await realFetch(input, init);
  entry.echo = response.headers.get("A2A-Extensions");
  return response;
};

/** The same record for gRPC: a grpc-js interceptor sees each call's method path and metadata. */
function recordingInterceptor(options, nextCall) {
  return new InterceptingCall(nextCall(options), {
    start(metadata, listener, next) {
      const version = metadata.get("a2a-version");
      const entry = { method: "GRPC", path: options.method_definition.path };
      entry.version = version.length ? String(version[0]) : null;
      for (const name of ["a2a-extensions", "x-a2a-extensions"]) {
        const sent = metadata.get(name);
        if (sent.length) Object.assign(entry, { extensions: String(sent[0]), extensionsHeader: name });
      }
      entry.echo = null;
      wire.push(entry);
      // A partial listener: grpc-js passes what it does not name through to `listener`.
      next(metadata, {
        onReceiveMetadata(received, nextListener) {
          const echo = received.get("a2a-extensions");
          entry.echo = echo.length ? String(echo[0]) : null;
          nextListener(received);
        },
      });
    },
  });
}

// ---- plain-JSON views of SDK objects ------------------------------------------------------------

const stateName = (s) => (s === undefined ? null : taskStateToJSON(s));
const textOf = (parts) =>
  (parts ?? []).filter((p) => p.content?.$case === "text").map((p) => p.content.value).join("");
/** The value of the first data part, or undefined (not printed) when there is none. */
const dataOf = (parts) => (parts ?? []).find((p) => p.content?.$case === "data")?.content.value;

function viewTask(t) {
  return {
    id: t.id,
    contextId: t.contextId,
    state: stateName(t.status?.state),
    statusText: t.status?.message ? textOf(t.status.message.parts) : null,
    artifacts: (t.artifacts ?? []).map((a) => ({
      id: a.artifactId,
      name: a.name,
      text: textOf(a.parts),
      data: dataOf(a.parts),
    })),
    history: (t.history ?? []).map((m) => ({ role: roleToJSON(m.role), text: textOf(m.parts), taskId: m.taskId })),
  };
}

/** Every part of each artifact as the SDK typed it: the content's case, a file's bytes in base64, a data
 * part's value, the mediaType and filename. */
function viewArtifactParts(artifacts) {
  return (artifacts ?? []).map((a) => ({
    id: a.artifactId,
    name: a.name,
    parts: (a.parts ?? []).map((p) => ({
      kind: p.content?.$case ?? null,
      mediaType: p.mediaType,
      filename: p.filename,
      ...(p.content?.$case === "raw" ? { bytes: Buffer.from(p.content.value).toString("base64") } : {}),
      ...(p.content?.$case === "data" ? { data: p.content.value } : {}),
      ...(p.content?.$case === "text" ? { text: p.content.value } : {}),
    })),
  }));
}

function viewEvent(ev) {
  const { $case, value } = ev.payload ?? {};
  switch ($case) {
    case "task":
      return { kind: "task", ...viewTask(value) };
    case "statusUpdate":
      return {
        kind: "status",
        taskId: value.taskId,
        contextId: value.contextId,
        state: stateName(value.status?.state),
        text: value.status?.message ? textOf(value.status.message.parts) : null,
      };
    case "artifactUpdate":
      return {
        kind: "artifact",
        taskId: value.taskId,
        contextId: value.contextId,
        artifactId: value.artifact?.artifactId,
        name: value.artifact?.name,
        append: value.append,
        lastChunk: value.lastChunk,
        text: textOf(value.artifact?.parts),
        data: dataOf(value.artifact?.parts),
      };
    case "message":
      return { kind: "message", role: roleToJSON(value.role), text: textOf(value.parts) };
    default:
      return { kind: String($case) };
  }
}

/** What a client rebuilds from a stream: last state, each artifact's text by name. */
function fold(events) {
  let state = null;
  const names = new Map();
  const texts = new Map();
  for (const ev of events) {
    if (ev.kind === "task") {
      state = ev.state;
      for (const a of ev.artifacts) {
        names.set(a.id, a.name);
        texts.set(a.id, a.text);
      }
    } else if (ev.kind === "status") {
      state = ev.state;
    } else if (ev.kind === "artifact") {
      if (ev.append) {
        check(texts.has(ev.artifactId), `append to unknown artifact ${ev.artifactId}`);
        texts.set(ev.artifactId, texts.get(ev.artifactId) + ev.text);
      } else {
        names.set(ev.artifactId, ev.name);
        texts.set(ev.artifactId, ev.text);
      }
    }
  }
  const artifacts = {};
  for (const [id, text] of texts) artifacts[names.get(id)] = text;
  return { state, artifacts };
}

// ---- helpers ------------------------------------------------------------------------------------

class CheckFailed extends Error {}

function check(cond, message) {
  if (!cond) throw new CheckFailed(message);
}

function eq(actual, expected, what) {
  check(
    JSON.stringify(actual) === JSON.stringify(expected),
    `${what}: expected ${JSON.stringify(expected)}, got ${JSON.stringify(actual)}`,
  );
}

function userMessage(text, { taskId = "", contextId = "" } = {}) {
  return {
    messageId: randomUUID(),
    contextId,
    taskId,
    role: Role.ROLE_USER,
    parts: [{ content: { $case: "text", value: text }, metadata: undefined, filename: "", mediaType: "" }],
    metadata: undefined,
    extensions: [],
    referenceTaskIds: [],
  };
}

const call = () => ({ signal: AbortSignal.timeout(WAIT_MS) });

function sendParams(text, { returnImmediately = false } = {}) {
  return { message: userMessage(text), configuration: { returnImmediately } };
}

/** `EDIT` with metadata.repository naming --repository. */
function repositoryParams() {
  check(REPOSITORY !== null, "--repository names the repository");
  const message = { ...userMessage("EDIT"), metadata: { repository: { url: REPOSITORY, ref: "main" } } };
  return { message, configuration: { returnImmediately: false } };
}

/** The task by getTask once its turn ended (within WAIT_MS), its artifacts as viewArtifactParts sees them. */
async function endedTask(client, id) {
  const ended = [TaskState.TASK_STATE_COMPLETED, TaskState.TASK_STATE_FAILED, TaskState.TASK_STATE_INPUT_REQUIRED];
  const deadline = Date.now() + WAIT_MS;
  for (;;) {
    const task = await client.getTask({ id }, call());
    if (ended.includes(task.status?.state)) {
      return {
        id: task.id,
        contextId: task.contextId,
        state: stateName(task.status?.state),
        artifacts: viewArtifactParts(task.artifacts),
      };
    }
    check(Date.now() < deadline, `task ${id} still ${stateName(task.status?.state)} after ${WAIT_MS} ms`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

function asTask(result, what) {
  check(result && "status" in result && !("messageId" in result), `${what}: expected a Task, got a Message`);
  return viewTask(result);
}

async function sendForTask(client, text, opts) {
  return asTask(await client.sendMessage(sendParams(text, opts), call()), `sendMessage(${text})`);
}

function artifactText(task, name) {
  const found = task.artifacts.filter((a) => a.name === name);
  eq(found.length, 1, `artifacts named ${name} in ${JSON.stringify(task.artifacts.map((a) => a.name))}`);
  return found[0].text;
}

function errorView(err) {
  return { name: err?.name, message: err?.message, ...(err?.envelopeCode ? { code: err.envelopeCode } : {}),
    ...(err?.statusCode ? { status: err.statusCode } : {}) };
}

/** The error `promise` fails with, which must be a `cls`; with `asCause`, or the `cause` of the error (the
 * SDK's v0.3 JSON-RPC stream throws an error event that way). */
async function expectError(promise, cls, what, { asCause = false } = {}) {
  try {
    await promise;
  } catch (err) {
    if (asCause && !(err instanceof cls) && err?.cause instanceof cls) {
      return { ...errorView(err.cause), wrapped: err.name };
    }
    check(err instanceof cls, `${what}: expected ${cls.name}, got ${err?.name}: ${err?.message}`);
    return errorView(err);
  }
  throw new CheckFailed(`${what}: expected ${cls.name}, but the call succeeded`);
}

/** Reads an SDK event stream step by step and keeps what it read (as plain views). */
class Stream {
  constructor(client, params, options = {}) {
    this.abort = AbortSignal.timeout(WAIT_MS);
    this.gen = client.sendMessageStream(params, { ...options, signal: this.abort });
    this.events = [];
  }

  async next() {
    const { value, done } = await this.gen.next();
    check(!done, "the stream ended early");
    const ev = viewEvent(value);
    this.events.push(ev);
    return ev;
  }

  async until(cond) {
    for (;;) {
      const ev = await this.next();
      if (cond(ev)) return ev;
    }
  }

  /** Everything until the server ends the stream. */
  async rest() {
    const start = this.events.length;
    for (;;) {
      const { value, done } = await this.gen.next();
      if (done) return this.events.slice(start);
      this.events.push(viewEvent(value));
    }
  }

  async close() {
    await this.gen.return(undefined).catch(() => {});
  }
}

const stateOf = (ev) => (ev.kind === "task" || ev.kind === "status" ? ev.state : null);
const S = (s) => taskStateToJSON(s);

// ---- the client ---------------------------------------------------------------------------------

/** The card as the resolver returned it (the client keeps a copy cut to the interfaces of --protocol). */
let resolvedCard = null;

async function makeClient() {
  const out = { baseUrl: BASE_URL, transportWanted: TRANSPORT, protocolWanted: PROTOCOL, stock: args.values.stock };
  let client;
  if (args.values.stock) {
    client = await new ClientFactory().createFromUrl(BASE_URL);
    resolvedCard = client.agentCard;
    out.card = viewCard(client.agentCard);
  } else {
    const compat = { legacyCompat: { enabled: true } };
    const grpc = { ...compat, grpcCallOptions: { interceptors: [recordingInterceptor] } };
    const resolver = new DefaultAgentCardResolver(compat);
    const factory = new ClientFactory(
      ClientFactoryOptions.createFrom(ClientFactoryOptions.default, {
        transports: [
          new JsonRpcTransportFactory(compat),
          new RestTransportFactory(compat),
          new GrpcTransportFactory(grpc),
        ],
        preferredTransports: [TRANSPORT],
        cardResolver: resolver,
        clientConfig: { interceptors: [headersInterceptor(HEADERS)] },
      }),
    );
    const card = await resolver.resolve(BASE_URL);
    resolvedCard = card;
    out.card = viewCard(card);
    let chosen = card;
    if (PROTOCOL !== "auto") {
      const matching = (card.supportedInterfaces ?? []).filter(
        (i) => i.protocolBinding?.toUpperCase() === TRANSPORT && versionIs(i.protocolVersion, PROTOCOL),
      );
      if (matching.length === 0) {
        throw new CheckFailed(
          `the agent card advertises no ${TRANSPORT} interface of protocol ${PROTOCOL}: ` +
            JSON.stringify(out.card.interfaces),
        );
      }
      chosen = { ...card, supportedInterfaces: matching };
    }
    client = await factory.createFromAgentCard(chosen);
  }
  const transport = client.transport;
  out.transport = transport.protocolName;
  out.protocolVersion = client.protocolVersion;
  out.transportClass = transport.constructor.name;
  // The gRPC transports keep no endpoint, only a grpc-js client whose channel names the target it dials.
  out.endpoint =
    transport.endpoint ?? transport.base?.endpoint ?? transport.grpcClient?.getChannel().getTarget() ?? null;
  if (!args.values.stock && PROTOCOL !== "auto") {
    eq(out.transport, TRANSPORT, "transport the factory picked");
    check(versionIs(out.protocolVersion, PROTOCOL), `protocol version: wanted ${PROTOCOL}, got ${out.protocolVersion}`);
  }
  return { client, out };
}

/** A client interceptor sending `headers` with every call, in its service parameters. */
function headersInterceptor(headers) {
  return {
    async before(args) {
      args.options = { ...args.options, serviceParameters: { ...args.options?.serviceParameters, ...headers } };
    },
    async after() {},
  };
}

/** The card as the SDK sees it (after its v0.3 translation, if any): interfaces and streaming. */
function viewCard(card) {
  const interfaces = (card.supportedInterfaces ?? []).map((i) => ({
    url: i.url,
    protocolBinding: i.protocolBinding,
    protocolVersion: i.protocolVersion,
    tenant: i.tenant || undefined,
  }));
  return { interfaces, streaming: card.capabilities?.streaming ?? null };
}

function versionIs(version, wanted) {
  // "0.3" matches "0.3", "0.3.0", ...; the SDK treats an empty version as v0.3 as well.
  if (!version) return wanted === "0.3";
  const [major, minor = "0"] = version.split(".");
  const [wMajor, wMinor] = wanted.split(".");
  return Number(major) === Number(wMajor) && Number(minor) === Number(wMinor);
}

// ---- the steps ----------------------------------------------------------------------------------

const steps = {
  /** Blocking send: a completed task whose assistant-response artifact echoes the text. */
  async send(client, out) {
    const text = "hello from the official js sdk";
    const task = await sendForTask(client, text);
    out.task = task;
    check(task.id && task.contextId, "the task has an id and a contextId");
    eq(task.state, S(TaskState.TASK_STATE_COMPLETED), "state");
    eq(artifactText(task, RESPONSE), text, `${RESPONSE} text`);
    eq(task.history.filter((m) => m.role === "ROLE_USER").map((m) => m.text), [text], "user messages in history");
  },

  /** Streaming send: the task first, then status and artifact updates in order, completed last. */
  async stream(client, out) {
    const stream = new Stream(client, sendParams("chunks:5"));
    try {
      out.events = await stream.rest();
    } finally {
      out.events ??= stream.events;
      await stream.close();
    }
    const events = out.events;
    check(events.length > 0, "the stream delivered events");
    eq(events[0].kind, "task", "the first event's kind");
    const taskId = events[0].id;
    for (const ev of events.slice(1)) {
      check(ev.kind === "status" || ev.kind === "artifact", `an update after the task, got ${ev.kind}`);
      eq(ev.taskId, taskId, "every update names the streamed task");
    }
    const states = events.map(stateOf).filter((s) => s !== null);
    const rank = (s) => (ORDER.map(S).includes(s) ? ORDER.map(S).indexOf(s) : ORDER.length);
    eq(states.map(rank), [...states.map(rank)].sort((a, b) => a - b), `states in order (${states.join(", ")})`);
    const last = events.at(-1);
    eq([last.kind, last.state], ["status", S(TaskState.TASK_STATE_COMPLETED)], "the last event");
    eq(
      states.filter((s) => TERMINAL.has(TaskState[s])),
      [S(TaskState.TASK_STATE_COMPLETED)],
      "terminal states in the stream",
    );
    out.folded = fold(events);
    eq(out.folded.state, S(TaskState.TASK_STATE_COMPLETED), "folded state");
    eq(out.folded.artifacts[RESPONSE], "chunk-0 chunk-1 chunk-2 chunk-3 chunk-4 ", `folded ${RESPONSE}`);
  },

  /** getTask by id returns the task the send made, with its history; historyLength cuts it. */
  async get(client, out) {
    const sent = await sendForTask(client, "say:hello");
    const got = viewTask(await client.getTask({ id: sent.id }, call()));
    out.task = got;
    eq([got.id, got.contextId], [sent.id, sent.contextId], "id and contextId");
    eq(got.state, S(TaskState.TASK_STATE_COMPLETED), "state");
    eq(artifactText(got, RESPONSE), "hello", `${RESPONSE} text`);
    eq(got.history.map((m) => [m.role, m.text]), [["ROLE_USER", "say:hello"]], "history");
    const cut = viewTask(await client.getTask({ id: sent.id, historyLength: 0 }, call()));
    out.historyLength0 = cut.history.length;
    // v0.3 gRPC's history_length is a plain proto3 int32: 0 is "unset", which v0.3 defines as unlimited.
    const unlimited = client.transport.protocolName === "GRPC" && versionIs(client.protocolVersion, "0.3");
    eq(cut.history.length, unlimited ? 1 : 0, "history with historyLength 0");
  },

  /** A task streaming `sleep:30` is canceled: the call answers canceled, the stream ends canceled. */
  async cancel(client, out) {
    const stream = new Stream(client, sendParams("sleep:30"));
    try {
      const first = await stream.next();
      eq(first.kind, "task", "the first event's kind");
      const taskId = first.id;
      out.taskId = taskId;
      if (first.state !== S(TaskState.TASK_STATE_WORKING)) {
        await stream.until((ev) => stateOf(ev) === S(TaskState.TASK_STATE_WORKING));
      }
      const canceled = viewTask(await client.cancelTask({ id: taskId }, call()));
      out.canceled = canceled;
      eq([canceled.id, canceled.state], [taskId, S(TaskState.TASK_STATE_CANCELED)], "cancelTask's answer");
      const after = await stream.rest();
      check(after.length > 0, "the stream reports the cancel");
      const last = after.at(-1);
      eq([last.kind, last.state], ["status", S(TaskState.TASK_STATE_CANCELED)], "the stream's last event");
    } finally {
      out.events = stream.events;
      await stream.close();
    }
    const got = viewTask(await client.getTask({ id: out.taskId }, call()));
    eq(got.state, S(TaskState.TASK_STATE_CANCELED), "getTask after cancel");
    out.cancelAgain = await expectError(
      client.cancelTask({ id: out.taskId }, call()),
      TaskNotCancelableError,
      "cancelTask on a canceled task",
    );
  },

  /** A task started with returnImmediately is canceled. */
  async cancel_nonblocking(client, out) {
    const task = await sendForTask(client, "sleep:30", { returnImmediately: true });
    out.started = task.state;
    check(
      [S(TaskState.TASK_STATE_SUBMITTED), S(TaskState.TASK_STATE_WORKING)].includes(task.state),
      `returnImmediately answers before the end, got ${task.state}`,
    );
    const canceled = viewTask(await client.cancelTask({ id: task.id }, call()));
    eq(canceled.state, S(TaskState.TASK_STATE_CANCELED), "cancelTask's answer");
    const got = viewTask(await client.getTask({ id: task.id }, call()));
    out.state = got.state;
    eq(got.state, S(TaskState.TASK_STATE_CANCELED), "getTask after cancel");
  },

  /** Unknown task ids are the SDK's TaskNotFoundError for get and cancel, and for a resubscribe (whose
   * v0.3 JSON-RPC error comes as the stream's one event: the SDK throws it as the `cause` of its error). */
  async not_found(client, out) {
    const id = `no-such-task-${randomUUID()}`;
    out.get = await expectError(client.getTask({ id }, call()), TaskNotFoundError, "getTask(unknown)");
    out.cancel = await expectError(client.cancelTask({ id }, call()), TaskNotFoundError, "cancelTask(unknown)");
    try {
      for await (const _ of client.resubscribeTask({ id }, call())) {
        throw new CheckFailed("resubscribeTask(unknown) yielded an event");
      }
    } catch (err) {
      if (err instanceof CheckFailed) throw err;
      const found = err instanceof TaskNotFoundError || err?.cause instanceof TaskNotFoundError;
      check(found, `resubscribeTask(unknown): expected TaskNotFoundError, got ${err?.name}: ${err?.message}`);
      out.subscribe = { ...errorView(err), ...(err?.cause ? { cause: err.cause.name } : {}) };
      return;
    }
    throw new CheckFailed("resubscribeTask(unknown): expected TaskNotFoundError, but the stream just ended");
  },

  /** A task paused at input-required is resubscribed: the task first, then what the answer sets off,
   * ending completed. The answer is sent only once the subscription delivered, so nothing is missed. */
  async resubscribe(client, out) {
    const waiting = await sendForTask(client, "ask:Resume?;chunks:3");
    out.taskId = waiting.id;
    eq(waiting.state, S(TaskState.TASK_STATE_INPUT_REQUIRED), "the blocking send's state");
    const gen = client.resubscribeTask({ id: waiting.id }, call());
    out.events = [];
    try {
      const first = await gen.next();
      check(!first.done, "the resubscription ended before its first event");
      out.events.push(viewEvent(first.value));
      eq([out.events[0].kind, out.events[0].id], ["task", waiting.id], "the first event");
      eq(out.events[0].state, S(TaskState.TASK_STATE_INPUT_REQUIRED), "the first event's state");
      const answer = userMessage("yes", { taskId: waiting.id, contextId: waiting.contextId });
      const answered = asTask(
        await client.sendMessage({ message: answer, configuration: { returnImmediately: true } }, call()),
        "the answer",
      );
      eq(answered.id, waiting.id, "the answer continues the task");
      for await (const ev of { [Symbol.asyncIterator]: () => gen }) out.events.push(viewEvent(ev));
    } finally {
      await gen.return(undefined).catch(() => {});
    }
    const last = out.events.at(-1);
    eq([last.kind, last.state], ["status", S(TaskState.TASK_STATE_COMPLETED)], "the last event");
    for (const ev of out.events.slice(1)) eq(ev.taskId, waiting.id, "every update names the task");
    out.folded = fold(out.events);
    eq(out.folded.artifacts[RESPONSE], "answer:yeschunk-0 chunk-1 chunk-2 ", `folded ${RESPONSE}`);
  },

  /** Push configs: create, get, list, delete, then get is TaskNotFoundError. The URL is a public address
   * literal (the server's SSRF guard refuses private ones) on a finished task, so nothing is delivered. */
  async push_config(client, out) {
    const task = await sendForTask(client, "say:x");
    const url = "https://93.184.215.14/hook";
    const config = { tenant: "", taskId: task.id, id: "cfg-1", url, token: "secret", authentication: undefined };
    const created = await client.createTaskPushNotificationConfig(config, call());
    out.created = { taskId: created.taskId, id: created.id, url: created.url, tokenKept: created.token === "secret" };
    eq([created.taskId, created.id, created.url], [task.id, "cfg-1", url], "the created config");
    const ref = { tenant: "", taskId: task.id, id: "cfg-1" };
    const got = await client.getTaskPushNotificationConfig(ref, call());
    out.got = { taskId: got.taskId, id: got.id, url: got.url };
    eq([got.taskId, got.id, got.url], [task.id, "cfg-1", url], "the config read back");
    const list = { tenant: "", taskId: task.id, pageSize: 0, pageToken: "" };
    out.listed = (await client.listTaskPushNotificationConfig(list, call())).configs.map((c) => c.id);
    eq(out.listed, ["cfg-1"], "the configs listed");
    await client.deleteTaskPushNotificationConfig(ref, call());
    out.listedAfterDelete = (await client.listTaskPushNotificationConfig(list, call())).configs.map((c) => c.id);
    eq(out.listedAfterDelete, [], "the configs listed after the delete");
    out.getAfterDelete = await expectError(
      client.getTaskPushNotificationConfig(ref, call()),
      TaskNotFoundError,
      "getTaskPushNotificationConfig after the delete",
    );
  },

  /** Extensions (--extensions): without them a send and a stream are refused with the SDK's
   * ExtensionSupportRequiredError; with them (`withA2AExtensions`) both complete and the agent's `whoami`
   * artifact says what was activated. The wire record has what the SDK sent and the server echoed. */
  async extensions(client, out) {
    check(EXTENSIONS.length > 0, "--extensions names the URIs to request");
    const asked = { serviceParameters: ServiceParameters.create(withA2AExtensions(...EXTENSIONS)) };
    out.refused = await expectError(
      client.sendMessage(sendParams("whoami"), call()),
      ExtensionSupportRequiredError,
      "sendMessage without the extensions",
    );
    const task = asTask(
      await client.sendMessage(sendParams("whoami"), { ...asked, ...call() }),
      "sendMessage with the extensions",
    );
    eq(task.state, S(TaskState.TASK_STATE_COMPLETED), "state");
    out.whoami = whoami(task.artifacts);
    const refused = new Stream(client, sendParams("whoami"));
    try {
      out.streamRefused = await expectError(
        refused.next(),
        ExtensionSupportRequiredError,
        "a stream without the extensions",
        { asCause: true },
      );
    } finally {
      await refused.close();
    }
    const stream = new Stream(client, sendParams("whoami"), asked);
    try {
      await stream.rest();
    } finally {
      await stream.close();
    }
    const last = stream.events.at(-1);
    eq([last?.kind, last?.state], ["status", S(TaskState.TASK_STATE_COMPLETED)], "the stream's last event");
    out.streamWhoami = whoami(stream.events.flatMap((ev) => ev.artifacts ?? (ev.kind === "artifact" ? [ev] : [])));
  },

  /** The card's signatures (--card-jwk) with the SDK's own verifier (`verifyAgentCardSignature`: jose over
   * the JCS of the card as the v1.0 AgentCard sees it): the 1.0 card and the hybrid one as served, the
   * card the SDK resolved and the extended card fetched through the client's `getAgentCard(options,
   * verify)`; a card with one field changed, and a key that did not sign, fail it. The verifier takes a
   * card in its JSON form: the resolver and the transports hand over a parsed one (its oneofs as `$case`
   * objects), which the verifier parses again, losing the security schemes, so those are given to it as
   * `AgentCard.toJSON` prints them; `parsedAsIs` is what it says of the parsed card itself. */
  async signed_card(client, out) {
    check(CARD_JWKS !== null, "--card-jwk names the public keys");
    const verify = verifyAgentCardSignature(async (kid) => {
      check(kid in CARD_JWKS, `no key for kid ${kid}`);
      return CARD_JWKS[kid];
    });
    const verifyParsed = (card) => verify(AgentCard.toJSON(card));
    const served = async (headers) => {
      const url = new URL(".well-known/agent-card.json", BASE_URL.replace(/\/?$/, "/"));
      return (await fetch(url, { headers, signal: AbortSignal.timeout(WAIT_MS) })).json();
    };
    out.verified = [];
    const v10 = await served({ "A2A-Version": "1.0" });
    out.kids = (v10.signatures ?? []).map((s) => JSON.parse(Buffer.from(s.protected, "base64url")).kid);
    check(out.kids.length > 0, "the 1.0 card carries signatures");
    await verify(v10);
    out.verified.push("1.0");
    const hybrid = await served({});
    check("url" in hybrid && "supportedInterfaces" in hybrid, "the card served without A2A-Version is the hybrid");
    await verify(hybrid);
    out.verified.push("hybrid");
    await verifyParsed(resolvedCard);
    out.verified.push("resolved");
    const extended = await client.getAgentCard(call(), verifyParsed);
    out.verified.push("extended");
    out.extendedSkills = (extended.skills ?? []).map((s) => s.id);
    out.extendedSignatures = (extended.signatures ?? []).length;
    out.parsedAsIs = await settle(verify(resolvedCard));
    out.tampered = await rejects(verify({ ...v10, description: v10.description + "!" }), "a tampered card");
    check("wrong" in CARD_JWKS, "--card-jwk has a key under the kid `wrong`, one that signed nothing");
    out.wrongKey = await rejects(
      verifyAgentCardSignature(async () => CARD_JWKS.wrong)(v10),
      "the card with a key that did not sign it",
    );
    out.extendedTampered = await rejects(
      verifyParsed({ ...extended, skills: extended.skills.slice(1) }),
      "a tampered extended card",
    );
  },

  /** A task on --repository: the change artifacts of the blocking send's task, each part as the SDK typed
   * it (the Python test decodes the patch and applies it). */
  async repository(client, out) {
    const sent = await client.sendMessage(repositoryParams(), call());
    check(sent && "status" in sent, "sendMessage: expected a Task");
    out.sentState = stateName(sent.status?.state);
    out.task = await endedTask(client, sent.id);
    eq(out.task.state, S(TaskState.TASK_STATE_COMPLETED), "state");
  },

  /** The same streamed: the artifact updates with their parts, the last event, then the task by getTask. */
  async repository_stream(client, out) {
    const gen = client.sendMessageStream(repositoryParams(), { signal: AbortSignal.timeout(WAIT_MS) });
    out.events = [];
    for await (const ev of gen) {
      const { $case, value } = ev.payload ?? {};
      if ($case === "artifactUpdate") {
        out.events.push({ kind: "artifact", taskId: value.taskId, artifact: viewArtifactParts([value.artifact])[0] });
      } else {
        out.events.push(viewEvent(ev));
      }
    }
    check(out.events.length > 0 && out.events[0].kind === "task", "the stream opens with the task");
    const last = out.events.at(-1);
    eq([last.kind, last.state], ["status", S(TaskState.TASK_STATE_COMPLETED)], "the last event");
    out.task = await endedTask(client, out.events[0].id);
  },

  /** Two turns: the agent asks (input-required, the question in the status), the answer completes it. */
  async multi_turn(client, out) {
    const waiting = await sendForTask(client, "ask:Proceed?");
    out.waiting = waiting;
    eq(waiting.state, S(TaskState.TASK_STATE_INPUT_REQUIRED), "the first turn's state");
    check((waiting.statusText ?? "").includes("Proceed?"), `the question in the status: ${waiting.statusText}`);
    const answer = userMessage("yes", { taskId: waiting.id, contextId: waiting.contextId });
    const done = asTask(await client.sendMessage({ message: answer, configuration: {} }, call()), "the answer");
    out.done = done;
    eq([done.id, done.contextId], [waiting.id, waiting.contextId], "the answer's task");
    eq(done.state, S(TaskState.TASK_STATE_COMPLETED), "the second turn's state");
    eq(artifactText(done, RESPONSE), "answer:yes", `${RESPONSE} text`);
    eq(
      done.history.filter((m) => m.role === "ROLE_USER").map((m) => m.text),
      ["ask:Proceed?", "yes"],
      "user messages in history",
    );
  },
};

/** The data of the one artifact named `whoami` (a data part: the agent's view of the call). */
function whoami(artifacts) {
  const found = artifacts.filter((a) => a.name === "whoami");
  eq(found.length, 1, "whoami artifacts");
  return found[0].data;
}

async function rejects(promise, what) {
  const settled = await settle(promise);
  check(!settled.ok, `${what} verified`);
  return settled;
}

async function settle(promise) {
  try {
    await promise;
    return { ok: true };
  } catch (err) {
    return { ok: false, ...errorView(err) };
  }
}

// ---- main ---------------------------------------------------------------------------------------

function failure(err) {
  return err instanceof CheckFailed
    ? { error: err.message }
    : { error: `${err?.name ?? "Error"}: ${err?.message ?? String(err)}`, stack: err?.stack };
}

async function main() {
  const watchdog = setTimeout(async () => {
    await emit({ step: "watchdog", ok: false, error: `the run took longer than ${WAIT_MS * (STEPS.length + 2)} ms` });
    process.exit(3);
  }, WAIT_MS * (STEPS.length + 2));
  watchdog.unref();

  let made;
  const start = wire.length;
  try {
    made = await makeClient();
    await emit({ step: "client", ok: true, ...made.out, wire: wire.slice(start) });
  } catch (err) {
    await emit({ step: "client", ok: false, ...failure(err), wire: wire.slice(start) });
    return 2;
  }
  let failed = 0;
  for (const name of STEPS) {
    const out = {};
    const from = wire.length;
    try {
      await steps[name](made.client, out);
      await emit({ step: name, ok: true, ...out, wire: wire.slice(from) });
    } catch (err) {
      failed += 1;
      await emit({ step: name, ok: false, ...failure(err), ...out, wire: wire.slice(from) });
    }
  }
  return failed ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  async (err) => {
    await emit({ step: "fatal", ok: false, ...failure(err) });
    process.exit(3);
  },
);
