// The A2A console: one page, no build step, no dependency: ES modules served as they are written. It talks
// to this origin only, through the same A2A v1.0 JSON-RPC endpoints any client uses (send, answer, cancel,
// subscribe) and the console's read API (/console/api/...). Agent output is untrusted: every string goes into
// the page as text (textContent, createTextNode), never as HTML, and links are made only for http(s) URLs.
//
// This module signs in and routes (the path picks the view); the rest, by job:
//   page.js    elements, the status line, task states, moving between views (imports nothing)
//   api.js     the calls to this origin, the credential, who it is, reading an event stream
//   render.js  agent output, as text
//   usage.js   usage and cost, spend against the budgets (a task's, the day's)
//   lists.js   the task list (kept live) and the agents
//   task.js    one task's page: snapshot, live stream
//   tree.js    a task's tree: the tasks above it (agents that called it) and those its agent called
//   changes.js a repository task's change: summary, each turn's diff, the patch to download
//   steer.js   what the user sends: approve, deny, answer, follow up, cancel, a new task

import { Unauthenticated, credential, dropCredential, forgetMe, keepCredential, loadMe, me } from "./api.js";
import { agentsView, tasksView } from "./lists.js";
import { $, navigate, newView, say, setRouter } from "./page.js";
import { newTaskView } from "./steer.js";
import { taskView } from "./task.js";
import { usageView } from "./usage.js";

// ---- sign-in ------------------------------------------------------------------------------------------

async function signedIn() {
  // Who the credential is, shown in the header (or the sign-in form); false when none is accepted.
  await loadMe();
  const known = me !== null;
  $("sign-in").hidden = known;
  $("view").hidden = !known;
  $("sign-out").hidden = !known || !credential();
  $("who").textContent = known ? `${me.principal}${me.admin ? " (admin)" : ""}` : "";
  return known;
}

function wireSignIn() {
  $("sign-in-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    keepCredential($("credential").value.trim());
    $("credential").value = "";
    if (await signedIn()) {
      $("sign-in-error").textContent = "";
      route();
    } else {
      dropCredential();
      $("sign-in-error").textContent = "That credential was not accepted.";
    }
  });
  $("sign-out").addEventListener("click", () => {
    dropCredential();
    location.assign("/console");
  });
}

// ---- routing ------------------------------------------------------------------------------------------

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
  newView();
  say("");
  const view = $("view");
  view.replaceChildren();
  if (!me && !(await signedIn())) return;
  const path = location.pathname.replace(/\/+$/, "");
  const match = path.match(/^\/console\/tasks\/([^/]+)$/);
  for (const id of ["nav-tasks", "nav-new", "nav-agents", "nav-usage"]) $(id).classList.remove("active");
  try {
    if (match) await taskView(view, decodeURIComponent(match[1]));
    else if (path === "/console/new") {
      $("nav-new").classList.add("active");
      newTaskView(view);
    } else if (path === "/console/usage") {
      $("nav-usage").classList.add("active");
      await usageView(view);
    } else if (path === "/console/agents") {
      $("nav-agents").classList.add("active");
      await agentsView(view);
    } else {
      $("nav-tasks").classList.add("active");
      await tasksView(view);
    }
  } catch (err) {
    if (err instanceof Unauthenticated) {
      forgetMe();
      await signedIn();
    } else say(err.message, true);
  }
}

// ---- start -------------------------------------------------------------------------------------------------

setRouter(route);
wireSignIn();
wireNavigation();
route();
