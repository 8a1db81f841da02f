// What the user sends to an agent, through A2A's SendMessage and CancelTask: on a task's page, an approval,
// a denial, an answer, a follow-up in the same context or a cancel (steerPanel); a new task, with files
// (newTaskView). Only the task's owner may steer it. A question that asks for tool calls (its approval data
// part, docs/agents.md#approvals) gets each call's options as buttons (approvalOf, callRow).

import { Unauthenticated, endpointOf, me, rpc } from "./api.js";
import { TERMINAL, WAITING, el, navigate, newId, reroute, say } from "./page.js";
import { textOf } from "./render.js";

const OPTION_LABELS = { allow_once: "Allow once", allow_always: "Allow always", deny: "Deny" };

// The approval data part of a question: `{kind: "approval", calls, options}`, or null.
export function approvalOf(task) {
  for (const part of task.status?.message?.parts || []) {
    if (part.data?.kind === "approval" && Array.isArray(part.data.calls)) return part.data;
  }
  return null;
}

function callRow(call, options, decide) {
  const always = call.always ? [call.always.tool, call.always.pattern].filter(Boolean).join(" ") : call.name;
  const buttons = options.map((option) =>
    el("button", {
      type: "button", class: `approval-option${option === "deny" ? " danger" : option === "allow_once" ? " primary" : ""}`,
      "data-call": call.id, "data-option": option,
      text: option === "allow_always" ? `${OPTION_LABELS[option]} (${always})` : OPTION_LABELS[option] || option,
      on: { click: decide(call.id, option) } }));
  const input = typeof call.input?.command === "string" ? call.input.command : JSON.stringify(call.input);
  return el("div", { class: "approval-call", "data-call": call.id },
    el("p", {}, el("strong", { text: call.name }), " ", el("code", { text: input })),
    call.diff ? el("pre", { class: "diff", text: call.diff }) : "",
    el("div", { class: "approval-options" }, ...buttons));
}

export function steerPanel(info, task, onSent, draft = "") {
  const state = task.status?.state;
  const panel = el("div", { class: "steer", id: "steer" });
  if (!info.own) {
    panel.append(el("p", { text: "You are watching another principal's task: it can be steered only by its owner." }));
    return panel;
  }
  const endpoint = info.endpoint;
  const text = el("textarea", { id: "reply-text", rows: 3, placeholder: WAITING.has(state) ? "Your answer" : "A follow-up in the same context" });
  text.value = draft; // what was typed before the state changed stays
  const send = async (parts, sameTask) => {
    const message = { messageId: newId(), role: "ROLE_USER", contextId: task.contextId, parts };
    if (sameTask) message.taskId = task.id;
    // Cleared as it goes, not after the answer: the task may move on first, and the next panel would carry
    // the sent text over as a draft. Put back if the send fails.
    const typed = text.value;
    text.value = "";
    let result;
    try {
      result = await rpc(endpoint, "SendMessage", { message, configuration: { returnImmediately: true } });
    } catch (err) {
      if (!text.value) text.value = typed;
      throw err;
    }
    onSent(result?.task?.id || task.id);
  };
  const guard = (fn) => async () => {
    try {
      panel.querySelectorAll("button").forEach((b) => (b.disabled = true));
      await fn();
    } catch (err) {
      if (err instanceof Unauthenticated) return reroute();
      say(err.message, true);
    } finally {
      panel.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  };
  if (WAITING.has(state)) {
    const approval = approvalOf(task);
    if (approval) {
      const decide = (callId, option) => guard(() => send([{ data: { kind: "approval", callId, option } }], true));
      panel.append(el("div", { class: "approvals", id: "approvals" },
        ...approval.calls.map((call) => callRow(call, approval.options || Object.keys(OPTION_LABELS), decide))));
    }
    panel.append(
      el("button", { type: "button", id: "approve", class: "primary", text: approval?.calls.length > 1 ? "Approve all" : "Approve",
        on: { click: guard(() => send([{ text: "approve" }, { data: { decision: "allow" } }], true)) } }),
      el("button", { type: "button", id: "deny", text: approval?.calls.length > 1 ? "Deny all" : "Deny",
        on: { click: guard(() => send([{ text: "deny" }, { data: { decision: "deny" } }], true)) } }),
      text,
      el("button", { type: "button", id: "answer", text: "Send answer",
        on: { click: guard(() => (text.value.trim() ? send([{ text: text.value }], true) : null)) } }));
  } else if (TERMINAL.has(state)) {
    panel.append(text, el("button", { type: "button", id: "follow-up", class: "primary", text: "Send follow-up",
      on: { click: guard(() => (text.value.trim() ? send([{ text: text.value }], false) : null)) } }));
  }
  if (!TERMINAL.has(state)) {
    panel.append(el("button", { type: "button", id: "cancel", class: "danger", text: "Cancel task",
      on: { click: guard(async () => { await rpc(endpoint, "CancelTask", { id: task.id }); say("Cancel requested."); }) } }));
  }
  return panel;
}

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

export function newTaskView(view) {
  const roleSel = el("select", { id: "new-role" }, (me.roles || []).map((r) => el("option", { value: r.name, text: r.name })));
  const text = el("textarea", { id: "new-text", rows: 6, required: true, placeholder: "What should the agent do?" });
  const files = el("input", { type: "file", id: "new-files", multiple: true });
  const ctx = el("input", { id: "new-context", placeholder: "context id (optional: continue a conversation)" });
  const form = el("form", { class: "new-task", id: "new-task" },
    el("label", {}, "Role ", roleSel), text, el("label", {}, "Attach files ", files), ctx,
    el("button", { type: "submit", class: "primary", text: "Start task" }));
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const button = form.querySelector("button");
    button.disabled = true;
    try {
      const parts = [{ text: text.value }];
      for (const file of files.files) {
        parts.push({ raw: await readFile(file), mediaType: file.type || "application/octet-stream", filename: file.name });
      }
      const message = { messageId: newId(), role: "ROLE_USER", parts };
      if (ctx.value.trim()) message.contextId = ctx.value.trim();
      const result = await rpc(endpointOf(roleSel.value), "SendMessage", { message, configuration: { returnImmediately: true } });
      if (result?.task?.id) navigate(`/console/tasks/${encodeURIComponent(result.task.id)}`);
      else say(`The agent answered directly: ${textOf(result?.message?.parts)}`);
    } catch (err) {
      if (err instanceof Unauthenticated) return reroute();
      say(err.message, true);
    } finally {
      button.disabled = false;
    }
  });
  view.append(el("h1", { text: "New task" }), form);
}
