// Agent output, which is untrusted: every string goes into the page as text (textContent, createTextNode),
// never as HTML; links are made only for http(s) URLs, and a file is a download (an image also a preview).

import { el } from "./page.js";

const IMAGE_TYPES = new Set(["image/png", "image/jpeg", "image/gif", "image/webp"]);

function looksLikeDiff(text) {
  return /^(---|\+\+\+) /m.test(text) && /^@@ /m.test(text);
}

function diffClass(line, inHunk) {
  // A file's header (`diff --git`, and `---`/`+++` before its first hunk) is not a removed or added line.
  if (line.startsWith("@@")) return "hunk";
  if (line.startsWith("diff --git ") || (!inHunk && (line.startsWith("--- ") || line.startsWith("+++ ")))) return "head";
  if (!inHunk) return "";
  return line.startsWith("+") ? "add" : line.startsWith("-") ? "del" : "";
}

export function renderDiff(text) {
  // A unified diff, one span a line, coloured by what the line is.
  const pre = el("pre", { class: "diff" });
  let inHunk = false;
  const lines = text.split("\n");
  if (lines[lines.length - 1] === "") lines.pop(); // the newline that ends the last line starts no other
  for (const line of lines) {
    const cls = diffClass(line, inHunk);
    if (cls === "hunk") inHunk = true;
    else if (cls === "head") inHunk = false;
    pre.append(el("span", { class: cls, text: line }), "\n");
  }
  return pre;
}

function renderText(text, mediaType) {
  if (mediaType === "text/x-diff" || mediaType === "text/x-patch" || looksLikeDiff(text)) return renderDiff(text);
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

export function base64Bytes(b64) {
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

export function renderParts(parts) {
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
    } else if (part.data?.kind === "approval") {
      // A tool permission's question is in its text, and its calls under the steering panel's buttons; an
      // answer is one line.
      if (typeof part.data.callId === "string") {
        flush();
        box.append(el("p", { class: "approval-answer", text: `${part.data.option} (call ${part.data.callId})` }));
      }
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

export function textOf(parts) {
  return (parts || []).filter((p) => typeof p.text === "string").map((p) => p.text).join("");
}
