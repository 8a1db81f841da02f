// What every view of the page shares: building elements (always with text as text), the status line, the
// task states, and moving between views. It imports nothing, so any module may import it.

export const TERMINAL = new Set(["TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED"]);
export const WAITING = new Set(["TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED"]);
export const STATES = [
  "TASK_STATE_SUBMITTED", "TASK_STATE_WORKING", "TASK_STATE_INPUT_REQUIRED", "TASK_STATE_AUTH_REQUIRED",
  "TASK_STATE_COMPLETED", "TASK_STATE_FAILED", "TASK_STATE_CANCELED", "TASK_STATE_REJECTED",
];

export function el(tag, props = {}, ...children) {
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

export const $ = (id) => document.getElementById(id);
export const stateLabel = (s) => (s || "").replace("TASK_STATE_", "").toLowerCase().replace("_", "-");
export const short = (id) => (id && id.length > 12 ? id.slice(0, 8) + "…" : id || "");
export const when = (iso) => (iso ? new Date(iso).toLocaleString() : "");

export function say(text, error = false) {
  const node = $("status");
  node.textContent = text || "";
  node.className = error ? "status error" : "status";
}

export const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

export function newId() {
  return crypto.randomUUID();
}

// ---- moving between views -----------------------------------------------------------------------------

// Bumped on every route change: loops of an old view stop. Importers read it live (an ES module binding);
// only `newView` changes it.
export let viewToken = 0;
let router = () => {};

export function newView() {
  return ++viewToken;
}

export function setRouter(fn) {
  // The views call back into the router (console.js) through this, so no view imports the entry module.
  router = fn;
}

export function reroute() {
  return router();
}

export function navigate(path) {
  history.pushState(null, "", path);
  router();
}
