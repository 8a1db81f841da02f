// The official JS SDK's server (@a2a-js/sdk + express), everything in memory, with an echo agent: the peer
// `python -m bench.send` measures beside ours. v1.0 natively, v0.3 through the SDK's compat layer, as its
// own compat sample serves both. `node server.mjs PORT`; GET /readyz answers once it listens.
import { randomUUID } from "node:crypto";

import express from "express";
import { A2A_PROTOCOL_VERSION, AGENT_CARD_PATH, TaskState } from "@a2a-js/sdk";
import { AgentEvent, DefaultRequestHandler, InMemoryTaskStore } from "@a2a-js/sdk/server";
import { agentCardHandler, jsonRpcHandler, UserBuilder } from "@a2a-js/sdk/server/express";

const port = Number(process.argv[2] || 41241);
const base = `http://127.0.0.1:${port}`;

const card = {
  name: "Echo (JS SDK)",
  description: "Answers every message with its own text.",
  supportedInterfaces: [
    { url: `${base}/a2a/jsonrpc`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: A2A_PROTOCOL_VERSION },
    // The compat layer answers v0.3 only where the card declares it.
    { url: `${base}/a2a/jsonrpc`, protocolBinding: "JSONRPC", tenant: "", protocolVersion: "0.3" },
  ],
  version: "1.0.0",
  capabilities: { streaming: true, pushNotifications: false, extensions: [], extendedAgentCard: false },
  securitySchemes: {},
  securityRequirements: [],
  defaultInputModes: ["text"],
  defaultOutputModes: ["text"],
  skills: [
    {
      id: "echo",
      name: "Echo",
      description: "Repeats the text of the user's message.",
      tags: ["echo"],
      examples: ["hello"],
      inputModes: ["text"],
      outputModes: ["text"],
      securityRequirements: [],
    },
  ],
  documentationUrl: "",
  signatures: [],
};

const textPart = (value) => ({ content: { $case: "text", value }, metadata: undefined, filename: "", mediaType: "text/plain" });

/** The same work as our echo agent: the task, its answer as an artifact, then completed. */
class EchoExecutor {
  cancelTask = async () => {};

  async execute(ctx, bus) {
    const { taskId, contextId } = ctx;
    const message = ctx.userMessage;
    const text = message.parts.find((p) => p.content?.$case === "text")?.content.value ?? "";
    const now = () => new Date().toISOString();
    if (!ctx.task) {
      bus.publish(
        AgentEvent.task({
          id: taskId,
          contextId,
          status: { state: TaskState.TASK_STATE_SUBMITTED, timestamp: now(), message: undefined },
          artifacts: [],
          history: [message],
          metadata: {},
        }),
      );
    }
    bus.publish(
      AgentEvent.artifactUpdate({
        taskId,
        contextId,
        artifact: { artifactId: randomUUID(), name: "response", description: "", parts: [textPart(text)], metadata: undefined, extensions: [] },
        append: false,
        lastChunk: true,
        metadata: undefined,
      }),
    );
    bus.publish(
      AgentEvent.statusUpdate({
        taskId,
        contextId,
        status: { state: TaskState.TASK_STATE_COMPLETED, timestamp: now(), message: undefined },
        metadata: undefined,
      }),
    );
  }
}

const handler = new DefaultRequestHandler(card, new InMemoryTaskStore(), new EchoExecutor());
const app = express();
app.get("/readyz", (_req, res) => res.json({ status: "ok" }));
app.use(`/${AGENT_CARD_PATH}`, agentCardHandler({ agentCardProvider: handler, legacyCompat: { enabled: true } }));
app.use(
  "/a2a/jsonrpc",
  jsonRpcHandler({ requestHandler: handler, userBuilder: UserBuilder.noAuthentication, legacyCompat: { enabled: true } }),
);
const server = app.listen(port, "127.0.0.1", () => console.log(`JS SDK echo server on ${base}`));
server.on("error", (err) => {
  console.error(err);
  process.exit(1);
});
for (const signal of ["SIGTERM", "SIGINT"]) process.on(signal, () => server.close(() => process.exit(0)));
