// One task's page: its snapshot (the console's read API), then, for its owner, the live stream through A2A
// (SubscribeToTask from the snapshot's last event, again from the last event seen after a drop), folded into
// the page as it comes; the steering panel (steer.js) stays in place between them.

import { Unauthenticated, api, sseItems, subscribe } from "./api.js";
import { renderChanges, repositoryArtifacts } from "./changes.js";
import { $, TERMINAL, WAITING, el, navigate, sleep, stateLabel, viewToken, when } from "./page.js";
import { renderParts, textOf } from "./render.js";
import { approvalOf, steerPanel } from "./steer.js";
import { followTree } from "./tree.js";
import { renderUsage, taskSpend } from "./usage.js";

const TASK_REFRESH_MS = 1500;
const RESUBSCRIBE_MS = 500;
const STREAMED_MAX = 2000;
const LOADS_MAX = 3;

function applyEvent(task, item) {
  // Folds one stream item into the task; true when it carried a usage report (the sum is then stale).
  if (item.task) {
    Object.assign(task, item.task);
    return false;
  }
  const status = item.statusUpdate;
  if (status) {
    task.status = status.status;
    task.metadata = task.metadata || {};
    const transitions = (task.metadata.stateTransitions = task.metadata.stateTransitions || []);
    const last = transitions[transitions.length - 1];
    if (!last || last.state !== status.status.state || last.timestamp !== status.status.timestamp) {
      transitions.push({ state: status.status.state, timestamp: status.status.timestamp });
    }
    const resume = status.metadata?.resume;
    if (resume) {
      const attempts = (task.metadata.attempts = task.metadata.attempts || []);
      if (!attempts.some((a) => a.attempt === resume.attempt)) attempts.push(resume);
    }
    if (status.status.message) {
      task.history = task.history || [];
      if (!task.history.some((m) => m.messageId === status.status.message.messageId)) task.history.push(status.status.message);
    }
    return Boolean(status.metadata?.usage); // a run's report: the task's sum is to be read again
  }
  const update = item.artifactUpdate;
  if (update) {
    task.artifacts = task.artifacts || [];
    const art = update.artifact;
    const existing = task.artifacts.find((a) => a.artifactId === art.artifactId);
    if (existing && update.append) existing.parts = [...(existing.parts || []), ...(art.parts || [])];
    else if (existing) Object.assign(existing, art);
    else task.artifacts.push({ ...art, parts: [...(art.parts || [])] });
  }
  return false;
}

function remember(streamed, seq, item) {
  // The stream's items the page applied since its last snapshot (the newest STREAMED_MAX): a snapshot that
  // comes back older than some of them gets them again (`reload`).
  streamed.push([seq, item]);
  if (streamed.length > STREAMED_MAX) streamed.shift();
}

function bridges(streamed, from, to) {
  // Whether the stream's items hold every event after `from` up to `to`.
  const have = new Set(streamed.map(([seq]) => seq));
  for (let seq = from + 1; seq <= to; seq++) if (!have.has(seq)) return false;
  return true;
}

function toolCalls(task) {
  const calls = [];
  for (const m of task.history || []) {
    const call = m.metadata?.toolCall;
    const text = textOf(m.parts);
    if (call) calls.push({ name: call.name, input: call.input, at: m.metadata?.timestamp });
    else if (m.role === "ROLE_AGENT" && text.startsWith("Using tool: ")) calls.push({ name: text.slice(12) });
  }
  return calls;
}

function titleOf(task) {
  return textOf(task.history?.[0]?.parts).slice(0, 120);
}

function callFacts(task) {
  // A child task (started by another task's agent): its parent, and the roles from the tree's root down to
  // it. The server alone writes these keys; they are still shown as text, and the link is to this origin.
  const meta = task.metadata || {};
  if (typeof meta.parentTaskId !== "string") return [];
  const path = Array.isArray(meta.callPath) ? meta.callPath.map(String).join(" → ") : "";
  const depth = Number.isInteger(meta.callDepth) ? `depth ${meta.callDepth}` : "";
  return [
    el("dt", { text: "Parent" }),
    el("dd", {}, el("a", { id: "parent-link", class: "mono", href: `/console/tasks/${encodeURIComponent(meta.parentTaskId)}`, "data-nav": true, text: meta.parentTaskId })),
    el("dt", { text: "Called as" }),
    el("dd", { id: "call-path", text: [path, depth && `(${depth})`].filter(Boolean).join(" ") }),
  ];
}

function optionFacts(task) {
  // What the task asked for in its first message: the skill it was routed by, its own model and timeout
  // (the task keeps them in its metadata); else the model its agent reported. Shown as text.
  const meta = task.metadata || {};
  const asked = task.history?.[0]?.metadata || {};
  const skill = typeof meta.skill === "string" ? meta.skill : typeof asked.skill === "string" ? asked.skill : null;
  const model = typeof meta.model === "string" ? meta.model : typeof meta.session?.model === "string" ? meta.session.model : null;
  const timeout = typeof meta.timeoutS === "number" ? `${meta.timeoutS} s` : null;
  return [
    skill ? [el("dt", { text: "Skill" }), el("dd", { id: "task-skill", text: skill })] : [],
    model ? [el("dt", { text: "Model" }), el("dd", { id: "task-model", text: model })] : [],
    timeout ? [el("dt", { text: "Timeout" }), el("dd", { id: "task-timeout", text: timeout })] : [],
    taskSpend(task) ? [el("dt", { text: "Spend / budget" }), taskSpend(task)] : [],
    attemptFacts(meta.attempts),
  ].flat();
}

function attemptFacts(attempts) {
  // Each time the task's holder died or shut down and the task went on from its checkpoint elsewhere.
  if (!Array.isArray(attempts) || !attempts.length) return [];
  return [
    el("dt", { text: "Attempts" }),
    el("dd", { id: "task-attempts" },
      el("span", { text: `${attempts.length + 1}` }),
      el("ol", { class: "attempts" }, attempts.map((a) =>
        el("li", { text: `Attempt ${a.attempt}: ${a.previous} stopped (${a.reason}); went on from the checkpoint of ${a.checkpointAt}` })))),
  ];
}

function renderTask(head, tail, info, task) {
  // Around the steering panel, which stays in place: moving it out of the page and back would take the
  // focus from the text box being typed in.
  const state = task.status?.state;
  const usage = task.metadata?.usage;
  const transitions = task.metadata?.stateTransitions || [];
  const historyNodes = (task.history || []).map((m) =>
    el("div", { class: `message ${m.role === "ROLE_USER" ? "user" : "agent"}` },
      el("div", { class: "who", text: m.role === "ROLE_USER" ? "user" : "agent" }), renderParts(m.parts)));
  const statusMessage = task.status?.message;
  // A repository task's change has a section of its own; its artifacts are not listed again below it.
  const repository = repositoryArtifacts(task);
  const changes = renderChanges(repository);
  const artifacts = (task.artifacts || []).filter((a) => !changes || !repository.ids.has(a.artifactId)).map((a) =>
    el("div", { class: "artifact", "data-artifact": a.name || a.artifactId },
      el("h3", { text: a.name || a.artifactId }), renderParts(a.parts)));
  const calls = toolCalls(task);
  // replaceChildren, unlike el(), would show a null (no question) as the text "null".
  head.replaceChildren(...[
    el("div", { class: "task-head" },
      el("h1", { text: titleOf(task) || task.id }),
      el("span", { id: "task-state", class: `state ${stateLabel(state)}`, "data-state": stateLabel(state), text: stateLabel(state) })),
    el("dl", { class: "facts" },
      el("dt", { text: "Task" }), el("dd", { class: "mono", text: task.id }),
      el("dt", { text: "Context" }), el("dd", { class: "mono", text: task.contextId }),
      el("dt", { text: "Role" }), el("dd", { id: "task-role", text: info.role }),
      optionFacts(task),
      el("dt", { text: "Owner" }), el("dd", { text: info.owner }),
      callFacts(task)),
    WAITING.has(state) && statusMessage
      ? el("div", { class: "question", id: "question" }, el("h2", { text: "The agent asks" }), renderParts(statusMessage.parts))
      : null,
  ].filter((node) => node !== null));
  tail.replaceChildren(...[
    el("h2", { text: "Conversation" }), el("div", { class: "conversation", id: "conversation" }, historyNodes),
    changes ? el("h2", { text: "Changes" }) : null, changes,
    el("h2", { text: "Artifacts" }),
    el("div", { id: "artifacts" }, artifacts.length ? artifacts : el("p", { text: changes ? "None besides the change." : "None yet." })),
    el("h2", { text: "Tool calls" }),
    calls.length
      ? el("ol", { id: "tool-calls" }, calls.map((c) => el("li", {}, el("code", { text: c.name || "?" }),
          c.input !== undefined ? el("pre", { class: "json", text: JSON.stringify(c.input, null, 2) }) : null)))
      : el("p", { text: "None reported." }),
    el("h2", { text: "Usage" }),
    usage ? renderUsage(usage) : el("p", { text: "Not reported." }),
    el("h2", { text: "State transitions" }),
    el("ol", { class: "transitions", id: "transitions" },
      transitions.map((t) => el("li", {}, el("span", { class: `state ${stateLabel(t.state)}`, text: stateLabel(t.state) }), ` ${when(t.timestamp)}`))),
  ].filter((node) => node !== null));
}

async function follow(token, task, render, reload, refreshUsage, cursor, streamed) {
  // SubscribeToTask through A2A from the snapshot's last event (`Last-Event-ID`), so nothing is read twice;
  // after a dropped connection again from the last event seen (any replica serves it from the log). A
  // stream that ends at input-required (a server may end it there; ours goes on) has the page look again at
  // the snapshot until the task moves on.
  const live = $("live");
  let lastEventId = cursor;
  while (token === viewToken && !TERMINAL.has(task.status?.state)) {
    let ended = "dropped";
    try {
      const resp = await subscribe(task.endpoint, task.id, lastEventId);
      if (!(resp.headers.get("content-type") || "").startsWith("text/event-stream")) {
        ended = "refused";
      } else {
        live.textContent = "live";
        live.dataset.connects = String(Number(live.dataset.connects || 0) + 1);
        for await (const ev of sseItems(resp)) {
          if (token !== viewToken) return;
          if (ev.id) lastEventId = ev.id;
          const msg = JSON.parse(ev.data);
          if (msg.error) break;
          const item = msg.result || {};
          if (applyEvent(task, item)) refreshUsage();
          remember(streamed, Number(ev.id) || 0, item);
          render(Number(ev.id) || 0);
        }
        ended = "closed";
      }
    } catch (err) {
      if (err instanceof Unauthenticated) throw err;
    }
    if (token !== viewToken || TERMINAL.has(task.status?.state)) break;
    if (ended === "dropped") {
      live.textContent = "reconnecting…";
      await sleep(RESUBSCRIBE_MS);
      continue;
    }
    // Closed at an interrupted state, or refused (the task ended meanwhile): the snapshot says what now.
    live.textContent = WAITING.has(task.status?.state) ? "waiting for an answer" : "";
    await sleep(ended === "closed" && WAITING.has(task.status?.state) ? TASK_REFRESH_MS : RESUBSCRIBE_MS);
    if (token !== viewToken) return;
    const fresh = await reload();
    if (WAITING.has(fresh.task.status?.state)) continue;
    lastEventId = String(fresh.lastSeq);
  }
}

export async function taskView(view, taskId) {
  const token = viewToken;
  const load = () => api(`/console/api/tasks/${encodeURIComponent(taskId)}`);
  let info = await load();
  const task = { ...info.task, endpoint: info.endpoint };
  const head = el("div");
  const tail = el("div");
  const live = el("span", { id: "live", class: "live" });
  const steerBox = el("div");
  const treeBox = el("div");
  const box = el("div", { id: "task" }, head, steerBox, treeBox, tail);
  view.append(el("p", {}, el("a", { href: "/console", "data-nav": true, text: "← all tasks" }), " ", live), box);
  let panelKey = null; // what the steering panel was built for: rebuilt only when that changes
  let pending = false;
  let seen = Number(info.lastSeq) || 0; // the newest event the page shows, from a snapshot or the stream
  const streamed = []; // what the stream gave since the last snapshot: [event number, item]
  const render = (seq = 0) => {
    if (seq > seen) seen = seq;
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (token !== viewToken) return;
      // Not on every snapshot: a rebuild replaces the text box under the user's typing (focus, caret, and
      // what a test types in that instant are lost), so only a new state or new rights rebuild it.
      const calls = (approvalOf(task)?.calls || []).map((c) => c.id).join(",");
      const key = `${task.status?.state}|${info.own}|${info.endpoint}|${calls}`;
      if (key !== panelKey) {
        panelKey = key;
        const draft = steerBox.querySelector("#reply-text")?.value || "";
        steerBox.replaceChildren(steerPanel(info, task, sent, draft));
      }
      renderTask(head, tail, info, task);
    });
  };
  const reload = async () => {
    // The whole task again (its snapshot replaces what the page holds), the cursor to stream on from. A
    // snapshot can come back older than events the page already shows: the stream outran the load (each
    // load again can be outrun too, on a busy machine), or two loads crossed. Those events are applied
    // again on top of it from what the stream gave, so the page never rolls back (a chunk of the answer,
    // a half-typed follow-up); only events that came from an earlier snapshot instead need another load,
    // which sees them (an event is stored before it is streamed).
    let fresh = await load();
    let whole = bridges(streamed, Number(fresh.lastSeq) || 0, seen);
    for (let n = 1; n < LOADS_MAX && !whole; n++) {
      fresh = await load();
      whole = bridges(streamed, Number(fresh.lastSeq) || 0, seen);
    }
    const at = Number(fresh.lastSeq) || 0;
    for (const key of Object.keys(task)) if (key !== "endpoint") delete task[key];
    Object.assign(task, fresh.task);
    if (whole) {
      let upto = at;
      for (const [seq, item] of streamed) {
        if (seq > upto) {
          applyEvent(task, item);
          upto = seq;
        }
      }
      seen = Math.max(seen, at);
    } else {
      seen = at; // still older after LOADS_MAX loads: the page stands on it, and a stream goes on from it
    }
    const newer = streamed.filter(([seq]) => seq > at);
    streamed.splice(0, streamed.length, ...newer);
    info = { ...fresh, lastSeq: seen };
    render();
    return info;
  };
  const refreshUsage = async () => {
    // Only the sum: the rest of the task comes over the stream.
    const fresh = await load().catch(() => null);
    if (!fresh || token !== viewToken) return;
    task.metadata = { ...(task.metadata || {}), usage: fresh.task.metadata?.usage };
    render();
  };
  let following = false;
  const watch = async () => {
    if (following) return;
    following = true;
    try {
      if (info.own && info.endpoint) {
        await follow(token, task, render, reload, refreshUsage, String(info.lastSeq), streamed);
      }
      // Someone else's task (an admin watching): its snapshot, until it ends.
      while (token === viewToken && !info.own && !TERMINAL.has(task.status?.state)) {
        await sleep(TASK_REFRESH_MS);
        if (token === viewToken) await reload();
      }
    } finally {
      following = false;
      if (token === viewToken && TERMINAL.has(task.status?.state)) live.textContent = "ended";
    }
  };
  const sent = async (id) => {
    if (id !== task.id) return navigate(`/console/tasks/${encodeURIComponent(id)}`);
    await reload();
    watch();
  };
  render();
  // The tree on its own loop: its children move without an event on this task's stream.
  followTree(treeBox, task.id, () => ({ id: task.id, role: info.role, state: task.status?.state, title: titleOf(task) }));
  if (TERMINAL.has(task.status?.state)) live.textContent = "ended";
  else await watch();
}
