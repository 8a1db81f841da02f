// The lists: tasks (filtered, paged, and kept live by asking what changed since the newest status seen) and
// agents (the roles and their live instances, from discovery's GET /agents).

import { Unauthenticated, api, me } from "./api.js";
import { STATES, el, navigate, reroute, say, short, sleep, stateLabel, viewToken, when } from "./page.js";
import { usageCell } from "./usage.js";

const LIST_REFRESH_MS = 700;

export async function tasksView(view) {
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
      el("td", { class: "role" }, line.role, line.skill ? el("span", { class: "skill", title: "the skill asked for", text: ` · ${line.skill}` }) : null,
        line.parentTaskId
        ? el("span", { class: "called", title: `started by task ${line.parentTaskId}`, text: " ↳ called" }) : null),
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
      if (err instanceof Unauthenticated) return reroute();
      say(`Refresh failed: ${err.message}`, true);
    }
  }
}

export async function agentsView(view) {
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
