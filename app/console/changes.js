// A repository task's change (docs/agents.md, "Working on your repository"): the `<task>-changes` summary
// (branch, base, files, commits), the whole diff and each turn's, coloured as render.js colours any diff, and
// each patch as a download of the artifact's exact bytes. Paths, subjects and diffs are the agent's: text only.

import { el } from "./page.js";
import { base64Bytes, renderDiff } from "./render.js";

const STATUSES = new Set(["added", "modified", "deleted", "renamed", "copied", "type changed", "unmerged"]);

// Each patch decoded, its Blob URL and its coloured lines, made once per content: the task page is rebuilt
// on every streamed event and a snapshot replaces every part object, and a diff of many lines (or a Blob URL
// per rebuild) is too dear to make again each time. What a render no longer shows is dropped (`prune`).
const patches = new Map(); // a part's base64 -> {bytes, url, node}
let shown = new Set();

function partOf(artifact) {
  return (artifact?.parts || []).find((p) => typeof p.raw === "string");
}

function fileOf(artifact) {
  // The artifact's file part with inline bytes, decoded (`bytes` null when not base64); null without one.
  const part = partOf(artifact);
  if (!part) return null;
  shown.add(part.raw);
  if (!patches.has(part.raw)) {
    let bytes = null;
    try {
      bytes = base64Bytes(part.raw);
    } catch {
      /* shown as an error below */
    }
    // A non-rendering type: the link saves the bytes as they are, it never opens them.
    const url = bytes ? URL.createObjectURL(new Blob([bytes], { type: "application/octet-stream" })) : null;
    patches.set(part.raw, { bytes, url, node: null });
  }
  return patches.get(part.raw);
}

function prune() {
  for (const [raw, file] of patches) {
    if (shown.has(raw)) continue;
    if (file.url) URL.revokeObjectURL(file.url);
    patches.delete(raw);
  }
  shown = new Set();
}

function diffNode(file, placed) {
  // The coloured diff; a copy when this render has placed it already (two turns with the same patch).
  if (!file.node) file.node = renderDiff(new TextDecoder().decode(file.bytes));
  if (placed.has(file.node)) return file.node.cloneNode(true);
  placed.add(file.node);
  return file.node;
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

function diffBox(placed, title, shown, download, label, name, note, same = false) {
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
      el("a", { href: saved.url, download: partOf(download).filename || name, class: "download", text: label }),
      el("span", { class: "meta", text: ` ${saved.bytes.length} bytes` })),
    note ? el("p", { class: "note", text: note }) : null,
    same ? el("p", { class: "note", text: "The same as the whole change above." }) : diffNode(shownFile, placed));
}

export function renderChanges(found) {
  // The section, or null when the task published no change summary.
  const section = changesSection(found);
  prune();
  return section;
}

function changesSection(found) {
  const placed = new Set();
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
    whole ? diffBox(placed, "Whole change", found.whole || whole, whole, "Download patch", "changes.diff", note) : null,
    found.turns.map((t) => {
      const name = `turn-${t.number}.diff`;
      const same = Boolean(found.whole) && partOf(t.artifact)?.raw === partOf(found.whole)?.raw;
      return diffBox(placed, `Turn ${t.number}`, t.artifact, t.artifact, `Download ${name}`, name, null, same);
    }));
}
