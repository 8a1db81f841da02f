// A task's place among agents that called agents (the console's GET /console/api/tasks/<id>/tree): the tasks
// above it, from the root down to its parent, then the task itself and every task its run started, and
// theirs, each with its role, state and a link. Titles are the agents' and the clients' text: shown as text.

import { api } from "./api.js";
import { TERMINAL, el, short, sleep, stateLabel, viewToken } from "./page.js";

const TREE_REFRESH_MS = 1500;

function taskLink(line) {
  return el("a", { href: `/console/tasks/${encodeURIComponent(line.id)}`, "data-nav": true, class: "title", text: line.title || line.id });
}

function entry(line, here) {
  // One task of the tree: role, state, title (a link, but not to the page it is on) and its id.
  return el("div", { class: "tree-entry" },
    el("span", { class: "tree-role", text: line.role }),
    el("span", { class: `state ${stateLabel(line.state)}`, text: stateLabel(line.state) }),
    here ? el("span", { class: "title here", text: line.title || line.id }) : taskLink(line),
    el("span", { class: "mono meta", title: line.id, text: short(line.id) }),
    here ? el("span", { class: "meta", text: "(this task)" }) : null);
}

function subtree(nodes) {
  return el("ul", {}, nodes.map((n) =>
    el("li", { "data-tree-task": n.id, "data-state": stateLabel(n.state), "data-role": n.role },
      entry(n, false), n.children.length ? subtree(n.children) : null)));
}

function settled(nodes) {
  return nodes.every((n) => TERMINAL.has(n.state) && settled(n.children));
}

export function renderTree(tree, here) {
  // The section, or null for a task alone (no parent, no children). `here`: the task's own list line.
  if (!tree.ancestors.length && !tree.children.length) return null;
  // The ancestors nest down to the task, its children below it.
  let inner = el("li", { "data-tree-task": here.id, "data-state": stateLabel(here.state), "data-role": here.role, class: "here" },
    entry(here, true), tree.children.length ? subtree(tree.children) : null);
  for (const line of tree.ancestors.slice().reverse()) {
    inner = el("li", { "data-tree-task": line.id, "data-state": stateLabel(line.state), "data-role": line.role },
      entry(line, false), el("ul", {}, inner));
  }
  return el("section", { id: "task-tree" },
    el("h2", { text: "Task tree" }),
    el("ul", { class: "tree" }, inner),
    tree.cut ? el("p", { class: "meta", text: "More tasks lie below; not all are shown." }) : null);
}

export async function followTree(box, taskId, here) {
  // Draws the tree into `box`, then again every TREE_REFRESH_MS while a task in it (this one included,
  // `here()` reads its state) has not ended: the tasks around it move without an event on this task's stream.
  const token = viewToken;
  let drawn = null; // what the box shows: redrawn only when that changes, so a link is not replaced under a click
  for (;;) {
    let tree;
    try {
      tree = await api(`/console/api/tasks/${encodeURIComponent(taskId)}/tree`);
    } catch {
      tree = null; // the page says what went wrong with the task itself; the tree is tried again
    }
    if (token !== viewToken) return;
    if (tree) {
      const key = JSON.stringify([tree, here()]);
      if (key !== drawn) {
        drawn = key;
        const section = renderTree(tree, here());
        box.replaceChildren(...(section ? [section] : []));
      }
      if (TERMINAL.has(here().state) && settled([...tree.ancestors.map((a) => ({ ...a, children: [] })), ...tree.children])) return;
    }
    await sleep(TREE_REFRESH_MS);
    if (token !== viewToken) return;
    while (document.hidden && token === viewToken) await sleep(TREE_REFRESH_MS);
  }
}
