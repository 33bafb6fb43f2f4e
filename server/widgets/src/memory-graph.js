// A space's documents and memories as a graph (fetch-graph-data, a page at a time), laid out by a
// small force simulation and drawn as SVG: zoom with the wheel or the buttons, pan by dragging,
// search to highlight, click a node for its details.
import { callTool, connect, el, say } from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const WIDTH = 800;
// 2:1, and at most 300 px tall on the page: a host shows a widget inline up to 500 px tall.
const HEIGHT = 400;
const TICKS = 300;

function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG, tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, String(value));
  return node;
}

const search = el("input", { type: "search", id: "search", placeholder: "Search memories and documents", "aria-label": "Search the graph" });
const more = el("button", { id: "more", hidden: true, text: "Load more" });
const zoomIn = el("button", { "aria-label": "Zoom in", text: "+" });
const zoomOut = el("button", { "aria-label": "Zoom out", text: "−" });
const fit = el("button", { id: "fit", text: "Fit" });
const canvas = svg("svg", { id: "graph", viewBox: `0 0 ${WIDTH} ${HEIGHT}`, role: "img", "aria-label": "Graph of the space" });
const viewport = svg("g");
const edgeLayer = svg("g", { class: "edges" });
const nodeLayer = svg("g", { class: "nodes" });
viewport.append(edgeLayer, nodeLayer);
canvas.append(viewport);
const details = el("aside", { id: "details", class: "card" }, el("p", { class: "muted", text: "Click a node for its details." }));
const heading = el("h1", { text: "Memory graph" });
const summary = el("div", { class: "muted", id: "summary" });
const status = el("div", { class: "status", role: "status" });
const legend = el(
  "div",
  { class: "row muted legend" },
  el("span", {}, el("i", { class: "dot doc" }), " document"),
  el("span", {}, el("i", { class: "dot mem" }), " memory"),
  el("span", {}, el("i", { class: "dot old" }), " older version"),
  el("span", {}, el("i", { class: "line source" }), " from document"),
  el("span", {}, el("i", { class: "line version" }), " version"),
  el("span", {}, el("i", { class: "line related" }), " related"),
);
document.head.append(
  el(
    "style",
    {},
    `#layout { display: flex; gap: 10px; flex-wrap: wrap; margin-top: 8px; }
     #stage { flex: 3 1 320px; min-width: 0; border: 1px solid var(--mm-border); border-radius: var(--mm-radius); background: var(--mm-bg-2); }
     #graph { width: 100%; height: auto; max-height: 300px; display: block; touch-action: none; cursor: grab; }
     #details { flex: 1 1 200px; min-width: 0; max-height: 300px; overflow: auto; overflow-wrap: anywhere; }
     @media (max-width: 539px) { #details { max-height: 80px; } .legend { gap: 8px; } } /* below the graph, not beside it */
     .edges line { stroke-width: 1.2; }
     .edges .source { stroke: var(--mm-muted); opacity: .45; }
     .edges .version { stroke: #d97706; stroke-width: 2; }
     .edges .related { stroke: var(--mm-accent); stroke-dasharray: 4 3; opacity: .7; }
     .nodes g { cursor: pointer; }
     .nodes .document rect { fill: #7c3aed; }
     .nodes .memory circle { fill: var(--mm-accent); }
     .nodes .memory.old circle { fill: #d97706; }
     .nodes text { font-size: 11px; fill: var(--mm-text); pointer-events: none; }
     .nodes .dim { opacity: .18; }
     .nodes .match circle, .nodes .match rect, .nodes .selected circle, .nodes .selected rect { stroke: var(--mm-text); stroke-width: 2.5; }
     .legend { gap: 12px; margin-top: 6px; }
     .dot { display: inline-block; width: 10px; height: 10px; border-radius: 50%; vertical-align: middle; }
     .dot.doc { background: #7c3aed; border-radius: 2px; } .dot.mem { background: var(--mm-accent); } .dot.old { background: #d97706; }
     .line { display: inline-block; width: 18px; height: 0; border-top: 2px solid; vertical-align: middle; }
     .line.source { border-color: var(--mm-muted); } .line.version { border-color: #d97706; } .line.related { border-color: var(--mm-accent); border-top-style: dashed; }
     dl { margin: 0; } dt { font-size: 12px; color: var(--mm-muted); margin-top: 6px; } dd { margin: 0; }`,
  ),
);
document.body.append(
  heading,
  summary,
  el("div", { class: "row", style: "margin-top:8px" }, el("div", { class: "grow" }, search), zoomOut, zoomIn, fit, more),
  legend,
  el("div", { id: "layout" }, el("div", { id: "stage" }, canvas), details),
  status,
);

let app;
let space = null;
let page = 0;
const nodes = new Map(); // id -> node (with x, y)
const edges = [];
let view = { x: 0, y: 0, k: 1 };

function layout() {
  const list = [...nodes.values()];
  const index = new Map(list.map((n, i) => [n.id, i]));
  // Start new nodes on a golden-angle spiral: deterministic, and spread enough to untangle fast.
  list.forEach((n, i) => {
    if (n.x === undefined) {
      const r = 12 * Math.sqrt(i + 1);
      n.x = WIDTH / 2 + r * Math.cos(i * 2.39996);
      n.y = HEIGHT / 2 + r * Math.sin(i * 2.39996);
    }
  });
  const links = edges.filter((e) => index.has(e.source) && index.has(e.target));
  const ideal = { source: 45, version: 35, related: 70 };
  for (let tick = 0; tick < TICKS; tick++) {
    const cool = 1 - tick / TICKS;
    const fx = new Float64Array(list.length);
    const fy = new Float64Array(list.length);
    for (let i = 0; i < list.length; i++) {
      for (let j = i + 1; j < list.length; j++) {
        const dx = list[i].x - list[j].x || 0.01;
        const dy = list[i].y - list[j].y || 0.01;
        const d2 = Math.max(dx * dx + dy * dy, 25);
        if (d2 > 40_000) continue; // nodes 200 units apart no longer push: components stay near
        const f = 900 / d2;
        fx[i] += dx * f; fy[i] += dy * f; fx[j] -= dx * f; fy[j] -= dy * f;
      }
    }
    for (const e of links) {
      const a = index.get(e.source);
      const b = index.get(e.target);
      const dx = list[b].x - list[a].x;
      const dy = list[b].y - list[a].y;
      const d = Math.sqrt(dx * dx + dy * dy) || 0.01;
      const f = ((d - ideal[e.kind]) / d) * 0.08;
      fx[a] += dx * f; fy[a] += dy * f; fx[b] -= dx * f; fy[b] -= dy * f;
    }
    list.forEach((n, i) => {
      fx[i] += (WIDTH / 2 - n.x) * 0.03;
      fy[i] += (HEIGHT / 2 - n.y) * 0.03;
      const step = Math.sqrt(fx[i] * fx[i] + fy[i] * fy[i]);
      const cap = 20 * cool + 0.5;
      const scale = step > cap ? cap / step : 1;
      n.x += fx[i] * scale;
      n.y += fy[i] * scale;
    });
  }
}

function draw() {
  edgeLayer.replaceChildren(
    ...edges
      .filter((e) => nodes.has(e.source) && nodes.has(e.target))
      .map((e) => {
        const a = nodes.get(e.source);
        const b = nodes.get(e.target);
        return svg("line", { x1: a.x, y1: a.y, x2: b.x, y2: b.y, class: e.kind });
      }),
  );
  nodeLayer.replaceChildren(
    ...[...nodes.values()].map((n) => {
      const g = svg("g", {
        class: `${n.kind}${n.kind === "memory" && n.isLatest === false ? " old" : ""}`,
        "data-id": n.id,
        "data-kind": n.kind,
        transform: `translate(${n.x.toFixed(1)},${n.y.toFixed(1)})`,
        tabindex: 0,
      });
      if (n.kind === "document") g.append(svg("rect", { x: -9, y: -9, width: 18, height: 18, rx: 3 }));
      else g.append(svg("circle", { r: 7 }));
      const label = svg("text", { x: 12, y: 4 });
      label.textContent = n.label.length > 28 ? `${n.label.slice(0, 27)}…` : n.label;
      g.append(label);
      const title = svg("title");
      title.textContent = n.label;
      g.append(title);
      g.addEventListener("click", () => select(n.id));
      g.addEventListener("keydown", (event) => event.key === "Enter" && select(n.id));
      return g;
    }),
  );
  highlight();
}

function highlight() {
  const needle = search.value.trim().toLowerCase();
  for (const g of nodeLayer.children) {
    const n = nodes.get(g.dataset.id);
    const hit = needle && `${n.label} ${n.content ?? ""} ${n.category ?? ""}`.toLowerCase().includes(needle);
    g.classList.toggle("match", Boolean(hit));
    g.classList.toggle("dim", Boolean(needle) && !hit);
  }
}

function select(id) {
  const n = nodes.get(id);
  for (const g of nodeLayer.children) g.classList.toggle("selected", g.dataset.id === id);
  const linked = edges.filter((e) => e.source === id || e.target === id);
  const count = (kind) => linked.filter((e) => e.kind === kind).length;
  const rows = [["Kind", n.kind === "document" ? `document (${n.type ?? "text"})` : `memory, version ${n.version}${n.isLatest ? "" : " (superseded)"}`]];
  if (n.kind === "document") {
    rows.push(["Title", n.label], ["Status", n.status], ["Summary", n.summary || "—"], ["Memories on this page", count("source")]);
  } else {
    rows.push(["Text (written by a person)", n.content], ["Category", n.category ?? "—"], ["Related memories", count("related")], ["Versions linked", count("version")]);
  }
  rows.push(["Created", new Date(n.createdAt).toLocaleString()], ["Id", n.id]);
  details.replaceChildren(el("dl", {}, ...rows.flatMap(([k, v]) => [el("dt", { text: k }), el("dd", { text: String(v) })])));
}

function apply() {
  viewport.setAttribute("transform", `translate(${view.x},${view.y}) scale(${view.k})`);
}

function zoom(factor, cx = WIDTH / 2, cy = HEIGHT / 2) {
  const k = Math.min(8, Math.max(0.2, view.k * factor));
  view = { k, x: cx - ((cx - view.x) * k) / view.k, y: cy - ((cy - view.y) * k) / view.k };
  apply();
}

function fitAll() {
  const list = [...nodes.values()];
  if (!list.length) return;
  const xs = list.map((n) => n.x);
  const ys = list.map((n) => n.y);
  const [x0, x1, y0, y1] = [Math.min(...xs) - 30, Math.max(...xs) + 120, Math.min(...ys) - 30, Math.max(...ys) + 30];
  const k = Math.max(0.5, Math.min(2.5, WIDTH / (x1 - x0), HEIGHT / (y1 - y0)));
  view = { k, x: (WIDTH - (x1 + x0) * k) / 2, y: (HEIGHT - (y1 + y0) * k) / 2 };
  apply();
}

function toViewBox(event) {
  const box = canvas.getBoundingClientRect();
  return [((event.clientX - box.left) / box.width) * WIDTH, ((event.clientY - box.top) / box.height) * HEIGHT];
}

canvas.addEventListener("wheel", (event) => {
  event.preventDefault();
  zoom(event.deltaY < 0 ? 1.15 : 1 / 1.15, ...toViewBox(event));
}, { passive: false });
let drag = null;
canvas.addEventListener("pointerdown", (event) => {
  if (event.target.closest?.(".nodes g")) return;
  drag = { start: toViewBox(event), view: { ...view } };
  canvas.setPointerCapture(event.pointerId);
});
canvas.addEventListener("pointermove", (event) => {
  if (!drag) return;
  const [x, y] = toViewBox(event);
  view = { ...drag.view, x: drag.view.x + x - drag.start[0], y: drag.view.y + y - drag.start[1] };
  apply();
});
canvas.addEventListener("pointerup", () => { drag = null; });
zoomIn.addEventListener("click", () => zoom(1.25));
zoomOut.addEventListener("click", () => zoom(1 / 1.25));
fit.addEventListener("click", fitAll);
search.addEventListener("input", highlight);
search.addEventListener("keydown", (event) => {
  const first = nodeLayer.querySelector(".match");
  if (event.key === "Enter" && first) select(first.dataset.id);
});

async function loadPage() {
  more.disabled = true;
  try {
    const args = { page: page + 1 };
    if (space) args.containerTag = space;
    const out = await callTool(app, "fetch-graph-data", args);
    page = out.page;
    space = out.space;
    for (const n of out.nodes) if (!nodes.has(n.id)) nodes.set(n.id, n);
    edges.push(...out.edges);
    layout();
    draw();
    fitAll();
    const documents = [...nodes.values()].filter((n) => n.kind === "document").length;
    summary.textContent = `Space '${out.space}': ${documents} documents, ${nodes.size - documents} of ${out.totalMemories} memories shown.`;
    more.hidden = !out.hasMore;
    if (!nodes.size) say(status, "This space has no documents or memories yet.");
  } catch (error) {
    say(status, error.message, "error");
  } finally {
    more.disabled = false;
  }
}
more.addEventListener("click", loadPage);

app = await connect("memory-graph", {
  onResult: (result) => {
    if (result.space && result.space !== space) {
      space = result.space;
      heading.textContent = `Memory graph of ${result.name ?? result.space}`;
      nodes.clear();
      edges.length = 0;
      page = 0;
      loadPage();
    }
  },
});
