// The space picker: the key's spaces with effective access, counts and activity; a click makes
// one the active space (app-only tool set-active-space).
import { callTool, connect, el, say, spaceLine } from "./common.js";

const search = el("input", { type: "search", placeholder: "Search spaces", "aria-label": "Search spaces" });
const list = el("ul", { class: "list", id: "spaces" });
const status = el("div", { class: "status", role: "status" });
document.body.append(el("h1", { text: "Choose the active space" }), search, list, status);

let app;
let spaces = [];

function render() {
  const needle = search.value.trim().toLowerCase();
  const shown = spaces.filter(
    (s) => !needle || s.key.includes(needle) || s.name.toLowerCase().includes(needle) || (s.description ?? "").toLowerCase().includes(needle),
  );
  list.replaceChildren(
    ...shown.map((s) =>
      el(
        "li",
        {},
        el(
          "button",
          { class: "card", "data-space": s.key, "aria-current": s.active ? "true" : "false", onclick: () => choose(s.key) },
          el(
            "div",
            { class: "row" },
            el("span", { class: "title grow", text: s.name }),
            el("span", { class: "badge", text: s.access }),
            s.active && el("span", { class: "badge active", text: "active" }),
          ),
          el("div", { class: "muted", text: `${s.key} · ${spaceLine(s)}` }),
        ),
      ),
    ),
  );
  if (!spaces.length) list.append(el("li", { class: "muted", text: "This key has no spaces." }));
  else if (!shown.length) list.append(el("li", { class: "muted", text: "No space matches." }));
}

async function choose(key) {
  say(status, `Switching to '${key}'…`);
  try {
    const out = await callTool(app, "set-active-space", { space: key });
    spaces = spaces.map((s) => ({ ...s, active: s.key === out.activeSpace }));
    render();
    say(status, out.message, "ok");
  } catch (error) {
    say(status, error.message, "error");
  }
}

async function load(result) {
  if (result.message) say(status, result.message, "ok"); // called with `space`: switched already
  if (Array.isArray(result.spaces) && result.spaces.length) {
    spaces = result.spaces;
  } else {
    spaces = (await callTool(app, "listSpaces")).spaces ?? [];
  }
  render();
}

search.addEventListener("input", render);
app = await connect("select-space", {
  onResult: (result) => load(result).catch((error) => say(status, error.message, "error")),
});
