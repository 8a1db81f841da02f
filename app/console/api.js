// The page's calls to this origin: the console's read API (/console/api/...) and the A2A v1.0 JSON-RPC
// endpoints (send, answer, cancel, subscribe), with the credential typed in (this tab's session storage, sent
// as an Authorization header), and who that credential is.

const CREDENTIAL_KEY = "a2a-console-credential";

// {principal, admin, authenticated, roles: [{name, path}]}, or null when signed out. Importers read it live
// (an ES module binding); only `loadMe` and `forgetMe` change it.
export let me = null;

export function credential() {
  return sessionStorage.getItem(CREDENTIAL_KEY) || "";
}

export function keepCredential(value) {
  sessionStorage.setItem(CREDENTIAL_KEY, value);
}

export function dropCredential() {
  sessionStorage.removeItem(CREDENTIAL_KEY);
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

export class Unauthenticated extends Error {}

export async function api(path) {
  const resp = await fetch(path, { headers: headers(), cache: "no-store" });
  if (resp.status === 401) throw new Unauthenticated("sign in");
  const body = await resp.json().catch(() => ({}));
  if (!resp.ok) throw new Error(body?.error?.message || `HTTP ${resp.status}`);
  return body;
}

export async function loadMe() {
  // Who the credential is (null: none, or not accepted); another failure is thrown.
  try {
    me = await api("/console/api/me");
  } catch (err) {
    if (!(err instanceof Unauthenticated)) throw err;
    me = null;
  }
  return me;
}

export function forgetMe() {
  me = null;
}

let rpcId = 0;
export async function rpc(endpoint, method, params) {
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

export function endpointOf(role) {
  const found = (me?.roles || []).find((r) => r.name === role);
  return `${found ? found.path : ""}/a2a/jsonrpc`;
}

export async function subscribe(endpoint, taskId, lastEventId) {
  // SubscribeToTask: the answer as it came (an event stream, or a refusal the caller tells by its type),
  // from the event after `lastEventId` when there is one.
  const h = a2aHeaders(endpoint, { Accept: "text/event-stream" });
  if (lastEventId) h["Last-Event-ID"] = lastEventId;
  const resp = await fetch(endpoint, {
    method: "POST",
    headers: h,
    body: JSON.stringify({ jsonrpc: "2.0", id: ++rpcId, method: "SubscribeToTask", params: { id: taskId } }),
  });
  if (resp.status === 401) throw new Unauthenticated("sign in");
  return resp;
}

export async function* sseItems(resp) {
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
