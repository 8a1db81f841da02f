// The A2A console: one page, no build step, no dependency. It talks to this origin only, through the same
// A2A v1.0 JSON-RPC endpoints any client uses (send, answer, cancel, subscribe) and the console's read API
// (/console/api/...). Agent output is untrusted: every string goes into the page as text (textContent,
// createTextNode), never as HTML, and links are made only for http(s) URLs.

const CREDENTIAL_KEY = "a2a-console-credential";
const LIST_REFRESH_MS = 700;
const TASK_REFRESH_MS = 1500;
const RESUBSCRIBE_MS = 500;
const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]);
const WAITING = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);
const STATES = [
  "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
];
const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

let me = null; // {principal, admin, authenticated, roles: [{name, path}]}
let viewToken = 0; // bumped on every route change: loops of an old view stop

// ---- small helpers ------------------------------------------------------------------------------

function el(tag, props = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props)) {
    if (value === undefined || value === null || value === false) continue;
    if (key === "text") node.textContent = String(value);
    else if (key === "class") node.className = value;
    else if (key === "on") for (const [ev, fn] of Object.entries(value)) node.addEventListener(ev, fn);
    else node.setAttribute(key, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    node.append(typeof child === "string" ? document.createTextNode(child) : child);
  }
  return node;
}

const $ = (id) => document.getElementById(id);
const stateLabel = (s) => (s || "").replace("TASK_STATE_", "").toLowerCase().replace("_", "-");
const short = (id) => (id && id.length > 12 ? id.slice(0, 8) + "…" : id || "");
const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

function say(text, error = false) {
  const node = $("status");
  node.textContent = text || "";
  node.className = error ? "status error" : "status";
}

function credential() {
  return sessionStorage.getItem(CREDENTIAL_KEY) || "";
}

function headers(extra = {}) {
  const h = { ...extra };
  const c = credential();
  if (c) h.Authorization = `Bearer ${c}`;
  return h;
}

function a2aHeaders(endpoint, extra = {}) {
  // An A2A call: version 1.0, and the extensions the role's card requires (the page supports what it
  // needs of them: it only shows what comes back).
  const role = (me?.roles || []).find((r) => `${r.path}/a2a/jsonrpc` === endpoint);
  const h = headers({ "Content-Type": "application/json", "A2A-Version": "1.0", ...extra });
  if (role?.requiredExtensions?.length) h["A2A-Extensions"] = role.requiredExtensions.join(",");
  return h;
}

class Unauthenticated extends Error {}

async function api(path) {
  const resp = await fetch(path, { headers: headers(), cache: "no-store" });
  if (resp.status === 401) throw new Unauthenticated("sign in");
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body?.error?.message || `HTTP ${resp.status}`);
  return body;
}

let rpcId = 0;
async function rpc(endpoint, method, params) {
  const resp = await fetch(endpoint, {
    method: "POST",
    headers: a2aHeaders(endpoint),
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcId, method, params }),
  });
  if (resp.status === 401) throw new Unauthenticated("sign in");
  const body = await resp.json().catch(() => null);
  if (!body) throw new Error(`HTTP ${resp.status}`);
  if (body.error) throw new Error(body.error.message || `error ${body.error.code}`);
  return body.result;
}

function endpointOf(role) {
  const found = (me?.roles || []).find((r) => r.name === role);
  return `${found ? found.path : ""}/a2a/jsonrpc`;
}

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function newId() {
  return crypto.randomUUID();
}

// ---- rendering agent output, always as text -------------------------------------------------------

function looksLikeDiff(text) {
  return /^(---|\+\+\+) /m.test(text) && /^@@ /m.test(text);
}

function renderText(text, mediaType) {
  if (mediaType === "text/x-diff" || mediaType === "text/x-patch" || looksLikeDiff(text)) {
    const pre = el("pre", { class: "diff" });
    for (const line of text.split("\n")) {
      const cls = line.startsWith("@@") ? "hunk" : line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
      pre.append(el("span", { class: cls, text: line }), "\n");
    }
    return pre;
  }
  const trimmed = text.trim();
  if ((trimmed.startsWith("{") && trimmed.endsWith("}")) || (trimmed.startsWith("[") && trimmed.endsWith("]"))) {
    try {
      return el("pre", { class: "json", text: JSON.stringify(JSON.parse(trimmed), null, 2) });
    } catch {
      /* not JSON: shown as it is */
    }
  }
  return el("pre", { class: "text", text });
}

function base64Bytes(b64) {
  const bin = atob(b64);
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  return bytes;
}

function safeHttpUrl(url) {
  try {
    const parsed = new URL(url, location.origin);
    return parsed.protocol === "http:" || parsed.protocol === "https:" ? parsed.href : null;
  } catch {
    return null;
  }
}

function renderFile(part) {
  const name = part.filename || "file";
  const type = part.mediaType || "application/octet-stream";
  let bytes;
  try {
    bytes = base64Bytes(part.raw);
  } catch {
    return el("p", { class: "error", text: `${name}: the file's bytes are not valid base64` });
  }
  // A download of the bytes as they are; the type is forced to a non-rendering one unless it is an image.
  const blob = new Blob([bytes], { type: IMAGE_TYPES.has(type) ? type : "application/octet-stream" });
  const url = URL.createObjectURL(blob);
  const box = el("div", { class: "file" },
    el("a", { href: url, download: name, class: "download", text: `Download ${name}` }),
    el("span", { class: "meta", text: ` ${type}, ${bytes.length} bytes` }));
  if (IMAGE_TYPES.has(type)) box.append(el("img", { src: url, alt: name, class: "preview" }));
  return box;
}

function renderParts(parts) {
  const box = el("div", { class: "parts" });
  let text = "";
  let textType = null;
  const flush = () => {
    if (text) box.append(renderText(text, textType));
    text = "";
    textType = null;
  };
  for (const part of parts || []) {
    if (typeof part.text === "string") {
      text += part.text;
      textType = textType || part.mediaType || null;
    } else if (part.data !== undefined) {
      flush();
      box.append(el("pre", { class: "json", text: JSON.stringify(part.data, null, 2) }));
    } else if (typeof part.raw === "string") {
      flush();
      box.append(renderFile(part));
    } else if (typeof part.url === "string") {
      flush();
      const href = safeHttpUrl(part.url);
      const label = part.filename ? `${part.filename} (${part.url})` : part.url;
      box.append(
        href
          ? el("a", { href, target: "_blank", rel: "noopener noreferrer", class: "link", text: label })
          : el("span", { class: "link unsafe", text: label })
      );
    }
  }
  flush();
  return box;
}

function textOf(parts) {
  return (parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join("");
}

// ---- sign-in ------------------------------------------------------------------------------------------

async function loadMe() {
  try {
    me = await api("/console/api/me");
  } catch (err) {
    if (!(err instanceof Unauthenticated)) throw err;
    me = null;
  }
  const signedIn = me !== null;
  $("sign-in").hidden = signedIn;
  $("view").hidden = !signedIn;
  $("sign-out").hidden = !signedIn || !credential();
  $("who").textContent = signedIn ? `${me.principal}${me.admin ? " (admin)" : ""}` : "";
  return signedIn;
}

function wireSignIn() {
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    sessionStorage.setItem(CREDENTIAL_KEY, $("credential").value.trim());
    $("credential").value = "";
    if (await loadMe()) {
      $("sign-in-error").textContent = "";
      route();
    } else {
      sessionStorage.removeItem(CREDENTIAL_KEY);
      $("sign-in-error").textContent = "That credential was not accepted.";
    }
  });
  $("sign-out").addEventListener("click", () => {
    sessionStorage.removeItem(CREDENTIAL_KEY);
    location.assign("/console");
  });
}

// ---- routing ------------------------------------------------------------------------------------------

function navigate(path) {
  history.pushState(null, "", path);
  route();
}

function wireNavigation() {
  document.addEventListener("click", (event) => {
    const link = event.target.closest("a[data-nav]");
    if (!link || event.ctrlKey || event.metaKey || event.shiftKey || event.button !== 0) return;
    event.preventDefault();
    navigate(link.getAttribute("href"));
  });
  window.addEventListener("popstate", route);
}

async function route() {
  viewToken++;
  say("");
  const view = $("view");
  view.replaceChildren();
  if (!me && !(await loadMe())) return;
  const path = location.pathname.replace(/\/+$/, "");
  const match = path.match(/^\/console\/tasks\/([^/]+)$/);
  for (const id of ["nav-tasks", "nav-new", "nav-agents"]) $(id).classList.remove("active");
  try {
    if (match) await taskView(view, decodeURIComponent(match[1]));
    else if (path === "/console/new") {
      $("nav-new").classList.add("active");
      newTaskView(view);
    } else if (path === "/console/agents") {
      $("nav-agents").classList.add("active");
      await agentsView(view);
    } else {
      $("nav-tasks").classList.add("active");
      await tasksView(view);
    }
  } catch (err) {
    if (err instanceof Unauthenticated) {
      me = null;
      await loadMe();
    } else say(err.message, true);
  }
}

// ---- the task list ----------------------------------------------------------------------------------

function usageCell(usage) {
  if (!usage) return "";
  const cost = usage.costUsd ?? usage.cost_usd;
  const tokens = (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0);
  if (typeof cost === "number") return `$${cost.toFixed(4)}`;
  return tokens ? `${tokens} tokens` : "";
}

async function tasksView(view) {
  const token = viewToken;
  const params = new URLSearchParams(location.search);
  const form = el("form", { class: "filters", id: "filters" });
  const stateSel = el("select", { name: "state", id: "filter-state" }, el("option", { value: "", text: "any state" }),
    STATES.map((s) => el("option", { value: s, text: stateLabel(s), selected: params.get("state") === s })));
  const roleSel = el("select", { name: "role", id: "filter-role" }, el("option", { value: "", text: "any role" }),
    (me.roles || []).map((r) => el("option", { value: r.name, text: r.name, selected: params.get("role") === r.name })));
  const ctx = el("input", { name: "contextId", id: "filter-context", placeholder: "context id", value: params.get("contextId") || "" });
  const q = el("input", { name: "q", id: "filter-text", placeholder: "search text or id", value: params.get("q") || "" });
  form.append(stateSel, roleSel, ctx, q);
  if (me.admin) {
    form.append(el("input", { name: "owner", id: "filter-owner", placeholder: "owner (* for all)", value: params.get("owner") || "" }));
  }
  form.append(el("button", { type: "submit", text: "Filter" }));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const next = new URLSearchParams();
    for (const [k, v] of new FormData(form)) if (v) next.set(k, v);
    navigate(`/console${next.toString() ? "?" + next : ""}`);
  });
  const body = el("tbody", { id: "task-rows" });
  const table = el("table", { class: "tasks" },
    el("thead", {}, el("tr", {}, ["Task", "State", "Role", "Context", "Updated", "Usage"].map((h) => el("th", { text: h })),
      me.admin ? el("th", { text: "Owner" }) : null)), body);
  const more = el("button", { type: "button", id: "more", hidden: true, text: "Load more" });
  view.append(el("h1", { text: "Tasks" }), form, table, more);

  const query = new URLSearchParams();
  for (const key of ["state", "role", "contextId", "q", "owner"]) if (params.get(key)) query.set(key, params.get(key));
  const rows = new Map(); // id -> {line, tr}
  let newest = null;
  let cursor = "";

  const rowOf = (line) => {
    const tr = el("tr", { "data-task-id": line.id, "data-state": stateLabel(line.state) },
      el("td", {}, el("a", { href: `/console/tasks/${encodeURIComponent(line.id)}`, "data-nav": true, class: "title", text: line.title || line.id })),
      el("td", {}, el("span", { class: `state ${stateLabel(line.state)}`, text: stateLabel(line.state) })),
      el("td", { text: line.role }),
      el("td", { class: "mono", title: line.contextId, text: short(line.contextId) }),
      el("td", { text: when(line.statusAt) }),
      el("td", { text: usageCell(line.usage) }),
      me.admin ? el("td", { text: line.owner }) : null);
    return tr;
  };
  const place = (line, atTop) => {
    const old = rows.get(line.id);
    const tr = rowOf(line);
    if (old) old.tr.remove();
    if (atTop) body.prepend(tr);
    else body.append(tr);
    rows.set(line.id, { line, tr });
    if (!newest || line.statusAt > newest) newest = line.statusAt;
  };
  const loadPage = async () => {
    const q2 = new URLSearchParams(query);
    if (cursor) q2.set("cursor", cursor);
    const page = await api(`/console/api/tasks?${q2}`);
    for (const line of page.tasks) place(line, false);
    cursor = page.nextCursor;
    more.hidden = !cursor;
  };
  more.addEventListener("click", () => loadPage().catch((err) => say(err.message, true)));
  await loadPage();
  if (!rows.size) say("No tasks yet.");

  // Live: what changed since the newest status seen, by the same keyset (new tasks and state changes).
  while (token === viewToken) {
    await sleep(LIST_REFRESH_MS);
    if (token !== viewToken) return;
    if (document.hidden) continue;
    try {
      const q2 = new URLSearchParams(query);
      if (newest) q2.set("changedAfter", newest);
      const page = await api(`/console/api/tasks?${q2}`);
      if (token !== viewToken) return;
      for (const line of page.tasks.slice().reverse()) place(line, true);
      if (page.tasks.length) say("");
    } catch (err) {
      if (err instanceof Unauthenticated) return route();
      say(`Refresh failed: ${err.message}`, true);
    }
  }
}

// ---- one task -------------------------------------------------------------------------------------------

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

const USAGE_FIELDS = [
  ["costUsd", "Cost (USD)", (v) => `$${Number(v).toFixed(4)}`],
  ["inputTokens", "Input tokens"],
  ["outputTokens", "Output tokens"],
  ["cacheReadTokens", "Cache read tokens"],
  ["cacheWriteTokens", "Cache write tokens"],
  ["wallMs", "Wall time", (v) => `${(Number(v) / 1000).toFixed(1)} s`],
  ["turns", "Agent turns"],
  ["toolCalls", "Tool calls"],
  ["reports", "Runs reported"],
];

function renderUsage(usage) {
  // The task's summed usage (metadata key `usage`), then one row per model.
  const facts = el("dl", { class: "facts", id: "usage" });
  for (const [key, label, format] of USAGE_FIELDS) {
    if (usage[key] === undefined || usage[key] === null) continue;
    facts.append(el("dt", { text: label }), el("dd", { "data-usage": key, text: format ? format(usage[key]) : String(usage[key]) }));
  }
  const models = Object.entries(usage.models || {});
  if (!models.length) return facts;
  const table = el("table", { class: "tasks models" },
    el("thead", {}, el("tr", {}, ["Model", "Input", "Output", "Cache read", "Cache write", "Cost (USD)"].map((h) => el("th", { text: h })))),
    el("tbody", {}, models.map(([model, m]) => el("tr", { "data-model": model },
      el("td", { class: "mono", text: model }), el("td", { text: String(m.inputTokens ?? "") }),
      el("td", { text: String(m.outputTokens ?? "") }), el("td", { text: String(m.cacheReadTokens ?? "") }),
      el("td", { text: String(m.cacheWriteTokens ?? "") }),
      el("td", { text: typeof m.costUsd === "number" ? m.costUsd.toFixed(6) : "" })))));
  return el("div", {}, facts, table);
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
  const artifacts = (task.artifacts || []).map((a) =>
    el("div", { class: "artifact", "data-artifact": a.name || a.artifactId },
      el("h3", { text: a.name || a.artifactId }), renderParts(a.parts)));
  const calls = toolCalls(task);
  // replaceChildren, unlike el(), would show a null (no question) as the text "null".
  head.replaceChildren(...[
    el("div", { class: "task-head" },
      el("h1", { text: textOf(task.history?.[0]?.parts).slice(0, 120) || task.id }),
      el("span", { id: "task-state", class: `state ${stateLabel(state)}`, "data-state": stateLabel(state), text: stateLabel(state) })),
    el("dl", { class: "facts" },
      el("dt", { text: "Task" }), el("dd", { class: "mono", text: task.id }),
      el("dt", { text: "Context" }), el("dd", { class: "mono", text: task.contextId }),
      el("dt", { text: "Role" }), el("dd", { text: info.role }),
      el("dt", { text: "Owner" }), el("dd", { text: info.owner })),
    WAITING.has(state) && statusMessage
      ? el("div", { class: "question", id: "question" }, el("h2", { text: "The agent asks" }), renderParts(statusMessage.parts))
      : null,
  ].filter((node) => node !== null));
  tail.replaceChildren(...[
    el("h2", { text: "Conversation" }), el("div", { class: "conversation", id: "conversation" }, historyNodes),
    el("h2", { text: "Artifacts" }), el("div", { id: "artifacts" }, artifacts.length ? artifacts : el("p", { text: "None yet." })),
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

function steerPanel(info, task, onSent, draft = "") {
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
      if (err instanceof Unauthenticated) return route();
      say(err.message, true);
    } finally {
      panel.querySelectorAll("button").forEach((b) => (b.disabled = false));
    }
  };
  if (WAITING.has(state)) {
    panel.append(
      el("button", { type: "button", id: "approve", class: "primary", text: "Approve",
        on: { click: guard(() => send([{ text: "approve" }, { data: { decision: "allow" } }], true)) } }),
      el("button", { type: "button", id: "deny", text: "Deny",
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

async function* sseItems(resp) {
  // Server-sent events from a fetch body: `id:` and `data:` lines, an empty line ends an event.
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  let data = [];
  let id = null;
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buffer += value;
    let nl;
    while ((nl = buffer.indexOf("\n")) >= 0) {
      const line = buffer.slice(0, nl).replace(/\r$/, "");
      buffer = buffer.slice(nl + 1);
      if (line === "") {
        if (data.length) yield { id, data: data.join("\n") };
        data = [];
      } else if (line.startsWith("data:")) data.push(line.slice(5).trimStart());
      else if (line.startsWith("id:")) id = line.slice(3).trim();
    }
  }
}

async function follow(token, task, render, reload, refreshUsage, cursor) {
  // SubscribeToTask through A2A from the snapshot's last event (`Last-Event-ID`), so nothing is read twice;
  // after a dropped connection again from the last event seen (any replica serves it from the log). A
  // stream ends at input-required: the page then looks again at the snapshot until the task moves on.
  const live = $("live");
  let lastEventId = cursor;
  while (token === viewToken && !TERMINAL.has(task.status?.state)) {
    let ended = "dropped";
    try {
      const h = a2aHeaders(task.endpoint, { Accept: "text/event-stream" });
      if (lastEventId) h["Last-Event-ID"] = lastEventId;
      const resp = await fetch(task.endpoint, {
        method: "POST",
        headers: h,
        body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcId, method: "SubscribeToTask", params: { id: task.id } }),
      });
      if (resp.status === 401) throw new Unauthenticated("sign in");
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
          if (applyEvent(task, msg.result || {})) refreshUsage();
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

async function taskView(view, taskId) {
  const token = viewToken;
  const load = () => api(`/console/api/tasks/${encodeURIComponent(taskId)}`);
  let info = await load();
  const task = { ...info.task, endpoint: info.endpoint };
  const head = el("div");
  const tail = el("div");
  const live = el("span", { id: "live", class: "live" });
  const steerBox = el("div");
  const box = el("div", { id: "task" }, head, steerBox, tail);
  view.append(el("p", {}, el("a", { href: "/console", "data-nav": true, text: "← all tasks" }), " ", live), box);
  let panelKey = null; // what the steering panel was built for: rebuilt only when that changes
  let pending = false;
  let seen = Number(info.lastSeq) || 0; // the newest event the page shows, from a snapshot or the stream
  const render = (seq = 0) => {
    if (seq > seen) seen = seq;
    if (pending) return;
    pending = true;
    requestAnimationFrame(() => {
      pending = false;
      if (token !== viewToken) return;
      // Not on every snapshot: a rebuild replaces the text box under the user's typing (focus, caret, and
      // what a test types in that instant are lost), so only a new state or new rights rebuild it.
      const key = `${task.status?.state}|${info.own}|${info.endpoint}`;
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
    // snapshot taken before events the page already shows (two loads crossed: one after a reply, one by the
    // follower) would roll the page back, and a half-typed follow-up with it: load once more, which now
    // sees them (an event is stored before it is streamed).
    let fresh = await load();
    if ((Number(fresh.lastSeq) || 0) < seen) fresh = await load();
    info = fresh;
    seen = Math.max(seen, Number(info.lastSeq) || 0);
    for (const key of Object.keys(task)) if (key !== "endpoint") delete task[key];
    Object.assign(task, info.task);
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
      if (info.own && info.endpoint) await follow(token, task, render, reload, refreshUsage, String(info.lastSeq));
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
  if (TERMINAL.has(task.status?.state)) live.textContent = "ended";
  else await watch();
}

// ---- a new task -------------------------------------------------------------------------------------------

function readFile(file) {
  return new Promise((resolve, reject) => {
    const reader = new FileReader();
    reader.onload = () => resolve(String(reader.result).split(",", 2)[1] || "");
    reader.onerror = () => reject(reader.error);
    reader.readAsDataURL(file);
  });
}

function newTaskView(view) {
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
      if (err instanceof Unauthenticated) return route();
      say(err.message, true);
    } finally {
      button.disabled = false;
    }
  });
  view.append(el("h1", { text: "New task" }), form);
}

// ---- agents ---------------------------------------------------------------------------------------------

async function agentsView(view) {
  const listing = await api("/agents");
  const roles = el("table", { class: "tasks", id: "roles" },
    el("thead", {}, el("tr", {}, ["Role", "Available", "Instances", "Card"].map((h) => el("th", { text: h })))),
    el("tbody", {}, (listing.roles || []).map((r) => el("tr", { "data-role": r.role },
      el("td", { text: r.role }), el("td", { text: r.available ? "yes" : "no" }),
      el("td", { text: String(r.instances) }), el("td", { class: "mono", text: r.card_url })))));
  const instances = el("table", { class: "tasks", id: "instances" },
    el("thead", {}, el("tr", {}, ["Instance", "Role", "Kind", "Slots in use", "Last seen"].map((h) => el("th", { text: h })))),
    el("tbody", {}, (listing.agents || []).map((a) => el("tr", {},
      el("td", { class: "mono", text: a.name }), el("td", { text: a.role }), el("td", { text: a.kind }),
      el("td", { text: `${a.running} / ${a.slots}` }), el("td", { text: when(a.last_seen) })))));
  view.append(el("h1", { text: "Agents" }), el("h2", { text: "Roles" }), roles, el("h2", { text: "Live instances" }),
    (listing.agents || []).length ? instances : el("p", { text: "No live instance is listed (discovery is off or none has announced itself)." }));
}

// ---- start -------------------------------------------------------------------------------------------------

wireSignIn();
wireNavigation();
route();
