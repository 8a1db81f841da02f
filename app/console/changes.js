// A repository task's change (docs/agents.md, "Working on your repository"): the `<task>-changes` summary
// (branch, base, files, commits), the whole diff and each turn's, coloured as render.js colours any diff, and
// each patch as a download of the artifact's exact bytes. Paths, subjects and diffs are the agent's: text only.

import { el } from "./page.js";
import { base64Bytes, renderDiff } from "./render.js";

const STATUSES = new Set(["added", "modified", "deleted", "renamed", "copied", "type changed", "unmerged"]);

// Built once per part: the task page is rebuilt on every streamed event, and a diff of many lines (or a
// Blob URL per rebuild) is too dear to make again each time. A part replaced by an update is a new key.
const diffNodes = new WeakMap();
const downloads = new WeakMap();

function fileOf(artifact) {
  // The artifact's file part with inline bytes, decoded; null when it has none or they are not base64.
  const part = (artifact?.parts || []).find((p) => typeof p.raw === "string");
  if (!part) return null;
  if (!downloads.has(part)) {
    let bytes = null;
    try {
      bytes = base64Bytes(part.raw);
    } catch {
      /* shown as an error below */
    }
    // A non-rendering type: the link saves the bytes as they are, it never opens them.
    const url = bytes ? URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" })) : null;
    downloads.set(part, { part, bytes, url });
  }
  return downloads.get(part);
}

function rawOf(artifact) {
  return (artifact?.parts || []).find((p) => typeof p.raw === "string")?.raw;
}

function diffNode(file) {
  if (!diffNodes.has(file.part)) diffNodes.set(file.part, renderDiff(new TextDecoder().decode(file.bytes)));
  return diffNodes.get(file.part);
}

export function repositoryArtifacts(task) {
  // The artifacts a repository turn publishes (ids `<task>-changes`, `-diff`, `-diff-full`, `-turn-<n>`).
  const prefix = `${task.id}-`;
  const found = { summary: null, whole: null, full: null, turns: [], ids: new Set() };
  for (const a of task.artifacts || []) {
    const id = a.artifactId || "";
    if (!id.startsWith(prefix)) continue;
    const rest = id.slice(prefix.length);
    const turn = /^turn-(\d+)$/.exec(rest);
    if (rest === "changes") found.summary = a;
    else if (rest === "diff") found.whole = a;
    else if (rest === "diff-full") found.full = a;
    else if (turn) found.turns.push({ number: Number(turn[1]), artifact: a });
    else continue;
    found.ids.add(id);
  }
  found.turns.sort((x, y) => x.number - y.number);
  return found;
}

function shortSha(sha) {
  return el("code", { title: sha || "", text: (sha || "").slice(0, 12) });
}

function lines(f) {
  if (f.binary) return el("span", { class: "meta", text: "binary" });
  return el("span", {}, el("span", { class: "add", text: `+${f.added ?? 0}` }), " ",
    el("span", { class: "del", text: `−${f.deleted ?? 0}` }));
}

function filesTable(files) {
  return el("table", { class: "files", id: "changed-files" },
    el("tr", {}, el("th", { text: "status" }), el("th", { text: "file" }), el("th", { text: "lines" })),
    files.map((f) => {
      const status = STATUSES.has(f.status) ? f.status : "other";
      return el("tr", { "data-path": f.path, "data-status": status },
        el("td", {}, el("span", { class: `fstatus ${status.replace(" ", "-")}`, text: f.status || "?" })),
        el("td", { class: "mono" }, f.oldPath ? `${f.oldPath} → ${f.path}` : f.path),
        el("td", {}, lines(f)));
    }));
}

function diffBox(title, shown, download, label, name, note, same = false) {
  // One diff as published (`shown`), and a link that saves `download`'s bytes under the part's file name;
  // `same`: the diff is the one shown above, not repeated.
  const shownFile = fileOf(shown);
  const saved = fileOf(download);
  if (!shownFile?.bytes || !saved?.bytes) {
    return el("div", { class: "diff-box" }, el("h3", { text: title }),
      el("p", { class: "error", text: `${name}: the patch's bytes are not valid base64` }));
  }
  return el("div", { class: "diff-box", "data-diff": name },
    el("div", { class: "diff-head" },
      el("h3", { text: title }),
      el("a", { href: saved.url, download: saved.part.filename || name, class: "download", text: label }),
      el("span", { class: "meta", text: ` ${saved.bytes.length} bytes` })),
    note ? el("p", { class: "note", text: note }) : null,
    same ? el("p", { class: "note", text: "The same as the whole change above." }) : diffNode(shownFile));
}

export function renderChanges(found) {
  // The section, or null when the task published no change summary.
  const data = (found.summary?.parts || []).find((p) => p.data !== undefined)?.data;
  if (!data) return null;
  if (data.error) {
    return el("div", { id: "changes" }, el("p", { class: "error", text: `The change could not be measured: ${data.error}` }));
  }
  const files = data.files || [];
  const commits = data.commits || [];
  const repo = data.repository || {};
  const whole = found.full || found.whole;
  let note = null;
  if (data.cut && found.full) note = "Shown cut; the download is the whole patch (changes-full.diff).";
  else if (data.cut) note = `Cut, and too long to publish whole: the branch ${data.branch} holds the whole change.`;
  return el("div", { id: "changes", "data-branch": data.branch || "" },
    el("dl", { class: "facts" },
      el("dt", { text: "Repository" }), el("dd", { class: "mono", text: repo.ref ? `${repo.url} (${repo.ref})` : repo.url || "" }),
      el("dt", { text: "Branch" }), el("dd", { class: "mono", id: "changes-branch", text: data.branch || "" }),
      el("dt", { text: "Base" }), el("dd", {}, shortSha(data.base)),
      el("dt", { text: "Head" }), el("dd", {}, shortSha(data.head))),
    files.length ? filesTable(files) : el("p", { text: "No file changed." }),
    commits.length
      ? el("ol", { class: "commits", id: "commits" }, commits.map((c) =>
          el("li", { "data-sha": c.sha }, shortSha(c.sha), " ", el("span", { text: c.subject }), " ",
            el("span", { class: "meta", text: c.author }))))
      : null,
    whole ? diffBox("Whole change", found.whole || whole, whole, "Download patch", "changes.diff", note) : null,
    found.turns.map((t) => {
      const name = `turn-${t.number}.diff`;
      const same = Boolean(found.whole) && rawOf(t.artifact) === rawOf(found.whole);
      return diffBox(`Turn ${t.number}`, t.artifact, t.artifact, `Download ${name}`, name, null, same);
    }));
}
