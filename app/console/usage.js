// What a task cost: its usage sum in a list's row, and in full (then one row per model) on its page; its spend
// against its budget; and the usage page: the principal's spend today against the day's budget, and its days.

import { api } from "./api.js";
import { el } from "./page.js";

const usd = (v) => `$${Number(v).toFixed(v >= 0.01 || v === 0 ? 2 : 4)}`;

export function taskSpend(task) {
  // What the task spent (its own runs and the ended tasks it called) against its budget (metadata.budgetUsd).
  const meta = task.metadata || {};
  if (typeof meta.budgetUsd !== "number") return null;
  const cost = (sum) => (typeof sum?.costUsd === "number" ? sum.costUsd : 0);
  const spent = cost(meta.usage) + cost(meta.usage?.children);
  const over = spent > meta.budgetUsd;
  return el("dd", { id: "task-budget", class: over ? "over-budget" : "",
    text: `${usd(spent)} of ${usd(meta.budgetUsd)}${over ? " (over budget)" : ""}` });
}

export async function usageView(view) {
  // GET /usage by day: the caller's spend today (UTC) against BUDGET_DAY_USD, then each day's sums.
  const body = await api("/usage?by=day");
  const budget = body.budget || {};
  const cap = typeof budget.dayBudgetUsd === "number" ? budget.dayBudgetUsd : null;
  const spent = Number(budget.spentUsd || 0);
  const today = el("dl", { class: "facts", id: "day-budget" },
    el("dt", { text: "Principal" }), el("dd", { text: body.owner }),
    el("dt", { text: `Today (${budget.day || "UTC"})` }),
    el("dd", { id: "day-spend", class: cap !== null && spent >= cap ? "over-budget" : "",
      text: cap === null ? `${usd(spent)} (no daily budget)` : `${usd(spent)} of ${usd(cap)}` }),
    el("dt", { text: "Resets" }), el("dd", { text: budget.resetsAt ? `${budget.resetsAt} (midnight UTC)` : "" }));
  const meter = cap ? el("progress", { id: "day-meter", max: String(cap), value: String(Math.min(spent, cap)) }) : null;
  const days = (body.groups || []).slice().reverse();
  const table = el("table", { class: "tasks", id: "usage-days" },
    el("thead", {}, el("tr", {}, ["Day (UTC)", "Cost (USD)", "Tasks", "Input tokens", "Output tokens"].map((h) => el("th", { text: h })))),
    el("tbody", {}, days.map((d) => el("tr", { "data-day": d.day },
      el("td", { text: d.day }), el("td", { text: typeof d.costUsd === "number" ? usd(d.costUsd) : "" }),
      el("td", { text: String(d.tasks) }), el("td", { text: String(d.inputTokens) }),
      el("td", { text: String(d.outputTokens) })))));
  view.replaceChildren(...[el("h1", { text: "Usage" }), today, meter,
    el("h2", { text: "By day" }), days.length ? table : el("p", { text: "Nothing reported yet." })].filter((n) => n !== null));
}

export function usageCell(usage) {
  if (!usage) return "";
  const cost = usage.costUsd ?? usage.cost_usd;
  const tokens = (usage.inputTokens ?? 0) + (usage.outputTokens ?? 0);
  if (typeof cost === "number") return `$${cost.toFixed(4)}`;
  return tokens ? `${tokens} tokens` : "";
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

export function renderUsage(usage) {
  // The task's summed usage (metadata key `usage`), then one row per model.
  const facts = el("dl", { class: "facts", id: "usage" });
  // A parent whose own runs reported nothing has a sum only for the tasks it called: no row of zeros.
  const own = usage.reports !== 0 ? USAGE_FIELDS : [];
  if (!own.length) facts.append(el("dt", { text: "Its own runs" }), el("dd", { text: "none reported" }));
  for (const [key, label, format] of own) {
    if (usage[key] === undefined || usage[key] === null) continue;
    facts.append(el("dt", { text: label }), el("dd", { "data-usage": key, text: format ? format(usage[key]) : String(usage[key]) }));
  }
  const children = usage.children;
  if (children && typeof children === "object") {
    // What the tasks it called (agents calling agents) used: counted in their own tasks, not in the above.
    const count = Array.isArray(usage.childTasks) ? usage.childTasks.length : 0;
    facts.append(el("dt", { text: "Tasks it called" }), el("dd", { "data-usage": "children",
      text: `${usageCell(children) || "nothing reported"} (${count} task${count === 1 ? "" : "s"} it called, and theirs; not in its own sums)` }));
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
