// A draft memory to check before it is saved: text (prefilled), category, and a space the key can
// write to. Nothing is saved until the person presses Save (app-only tool save-memory).
import { callTool, connect, el, say } from "./common.js";

const content = el("textarea", { id: "content", "aria-label": "Memory text" });
const counter = el("span", { class: "muted" });
const category = el("input", { id: "category", placeholder: "optional, e.g. decision", "aria-label": "Category" });
const space = el("select", { id: "space", "aria-label": "Space" });
const save = el("button", { class: "primary", id: "save", type: "submit", text: "Save memory" });
const status = el("div", { class: "status", role: "status" });
const form = el(
  "form",
  { id: "form", hidden: true },
  el("label", { for: "content", text: "Memory" }),
  content,
  counter,
  el(
    "div",
    { class: "row" },
    el("div", { class: "grow" }, el("label", { for: "category", text: "Category" }), category),
    el("div", { class: "grow" }, el("label", { for: "space", text: "Space" }), space),
  ),
  el("div", { class: "row", style: "margin-top:12px" }, save),
);
const nowhere = el("p", { class: "notice", id: "nowhere", hidden: true });
document.body.append(el("h1", { text: "Save a memory" }), nowhere, form, status);

let app;
let maxContent = 2000;

function count() {
  counter.textContent = `${content.value.length} / ${maxContent} characters`;
  save.disabled = !content.value.trim() || content.value.length > maxContent || !space.value;
}

function load(result) {
  const spaces = result.spaces ?? [];
  maxContent = result.maxContent ?? maxContent;
  if (!spaces.length) {
    form.hidden = true;
    nowhere.hidden = false;
    nowhere.textContent = "This key cannot write to any space, so there is nowhere to save.";
    return;
  }
  nowhere.hidden = true;
  form.hidden = false;
  if (!content.value) content.value = result.prefill ?? "";
  if (!category.value) category.value = result.category ?? "";
  space.replaceChildren(
    ...spaces.map((s) => el("option", { value: s.key, selected: s.key === result.activeSpace, text: `${s.name} (${s.key})` })),
  );
  count();
}

form.addEventListener("submit", async (event) => {
  event.preventDefault();
  save.disabled = true;
  say(status, "Saving…");
  try {
    const args = { content: content.value, space: space.value };
    if (category.value.trim()) args.category = category.value.trim();
    const out = await callTool(app, "save-memory", args);
    say(status, `${out.message} (memory ${out.memory?.id ?? ""})`, "ok");
  } catch (error) {
    say(status, error.message, "error");
  } finally {
    count();
  }
});
content.addEventListener("input", count);
space.addEventListener("change", count);
app = await connect("guided-save", { onResult: load });
