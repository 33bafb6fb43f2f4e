// Upload one file into a space the key can write to: a one-time token from the app-only tool
// prepare-file-upload, a multipart POST of the file to the server, then the document's progress
// (getDocument) until it is done.
import { callTool, connect, el, say } from "./common.js";

const POLL_MS = 700;

const space = el("select", { id: "space", "aria-label": "Space" });
const file = el("input", { id: "file", type: "file", "aria-label": "File" });
const title = el("input", { id: "title", placeholder: "default: the file name", "aria-label": "Title" });
const upload = el("button", { class: "primary", id: "upload", type: "submit", text: "Upload" });
const status = el("div", { class: "status", role: "status", id: "status" });
const bar = el("div", { id: "bar" });
const progress = el("div", { class: "progress", hidden: true, id: "progress", role: "progressbar", "aria-valuemin": 0, "aria-valuemax": 100 }, bar);
const form = el(
  "form",
  { id: "form", hidden: true },
  el("label", { for: "file", text: "File (text, Markdown, PDF, Word, CSV, image, audio, video)" }),
  file,
  el(
    "div",
    { class: "row" },
    el("div", { class: "grow" }, el("label", { for: "space", text: "Space" }), space),
    el("div", { class: "grow" }, el("label", { for: "title", text: "Title" }), title),
  ),
  el("div", { class: "row", style: "margin-top:12px" }, upload),
);
const nowhere = el("p", { class: "notice", id: "nowhere", hidden: true });
document.body.append(el("h1", { text: "Upload a file" }), nowhere, form, progress, status);

let app;

function ready() {
  upload.disabled = !file.files?.length || !space.value;
}

function load(result) {
  const spaces = result.spaces ?? [];
  if (!spaces.length) {
    nowhere.hidden = false;
    nowhere.textContent = "This key cannot write to any space, so there is nowhere to upload.";
    return;
  }
  form.hidden = false;
  space.replaceChildren(
    ...spaces.map((s) => el("option", { value: s.key, selected: s.key === result.activeSpace, text: `${s.name} (${s.key})` })),
  );
  ready();
}

function show(fraction, message, kind = "") {
  progress.hidden = false;
  const percent = Math.round(Math.max(0, Math.min(1, fraction)) * 100);
  bar.style.width = `${percent}%`;
  progress.setAttribute("aria-valuenow", percent);
  say(status, message, kind);
}

async function follow(documentId) {
  for (;;) {
    const doc = await callTool(app, "getDocument", { documentId });
    const fraction = doc.status === "done" ? 1 : (doc.progress ?? (doc.status === "processing" ? 0.5 : 0.1));
    status.dataset.documentStatus = doc.status;
    if (doc.status === "done") {
      const count = doc.memoryCount ?? doc.memoryIds?.length ?? 0;
      return show(1, `Done: '${doc.title}' is in space '${doc.space}' as ${count} ${count === 1 ? "memory" : "memories"}.`, "ok");
    }
    if (doc.status === "failed") return show(fraction, `Failed: ${doc.error ?? "the file could not be read"}`, "error");
    show(fraction, `${doc.status === "queued" ? "Queued" : "Reading"} '${doc.title}'… ${Math.round(fraction * 100)}%`);
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  upload.disabled = true;
  try {
    const chosen = file.files[0];
    show(0, `Uploading '${chosen.name}'…`);
    const ticket = await callTool(app, "prepare-file-upload", { containerTag: space.value });
    // The token and the fields go before the file: the server checks the token before it reads the file.
    const body = new FormData();
    body.append("uploadToken", ticket.uploadToken);
    if (title.value.trim()) body.append("title", title.value.trim());
    body.append("file", chosen, chosen.name);
    const response = await fetch(ticket.uploadUrl, { method: "POST", body });
    const answer = await response.json().catch(() => ({}));
    if (!response.ok) throw new Error(answer.message ?? `upload refused (${response.status})`);
    status.dataset.documentId = answer.id;
    await follow(answer.id);
  } catch (error) {
    say(status, error.message, "error");
  } finally {
    ready();
  }
});
file.addEventListener("change", ready);
space.addEventListener("change", ready);
app = await connect("upload-file", { onResult: load });
