// Usage: node drive.mjs <config.json>
// Opens each widget in headless Chromium inside host.js, against the real server, acts as a person
// would (search, click, type, pick a file, submit) and prints one JSON line of what it saw.
import { readFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { build } from "esbuild";
import puppeteer from "puppeteer-core";

const here = dirname(fileURLToPath(import.meta.url));
const config = JSON.parse(await readFile(process.argv[2], "utf8"));
const APPS = { "io.modelcontextprotocol/ui": { mimeTypes: ["text/html;profile=mcp-app"] } };
const LIGHT = { theme: "light", platform: "web", styles: { variables: { "--color-ring-primary": "#0f766e" } } };
const DARK = { theme: "dark", platform: "web" };

async function connect(key) {
  const client = new Client({ name: "widget-host", version: "1.0.0" }, { capabilities: { extensions: APPS } });
  clients.push(client);
  await client.connect(
    new StreamableHTTPClientTransport(new URL(config.mcpUrl), { requestInit: { headers: { Authorization: `Bearer ${key}` } } }),
  );
  return client;
}

const hostScript = (
  await build({ entryPoints: [join(here, "host.js")], bundle: true, format: "iife", write: false, logLevel: "error" })
).outputFiles[0].text;

const browser = await puppeteer.launch({
  executablePath: config.chromium,
  headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
});
const page = await browser.newPage();
page.setDefaultTimeout(30_000);
page.on("console", (message) => console.error(`[page] ${message.text()}`));
page.on("pageerror", (error) => console.error(`[page error] ${error.message}`));
const step = (what) => console.error(`[drive] ${what}`);
await page.setViewport({ width: 900, height: 900 });
const clients = [];
let client; // the MCP client of the key the current widget runs with
const calls = [];
await page.exposeFunction("hostCallTool", async (params) => {
  calls.push(params.name);
  return client.callTool(params);
});
await page.exposeFunction("hostReadResource", async (params) => client.readResource(params));
await page.setContent(`<!doctype html><html><body style="margin:0;background:#e5e7eb"><div id="stage" style="padding:8px"></div><script>${hostScript}</script></body></html>`);

/** Open a launcher's widget as a host does: tools/list -> resourceUri -> resources/read -> tools/call. */
async function open(key, tool, args, { hostContext = LIGHT, width = 640 } = {}) {
  step(`open ${tool}`);
  client = await connect(key);
  const listed = (await client.listTools()).tools.find((t) => t.name === tool);
  const uri = listed._meta.ui.resourceUri;
  const resource = (await client.readResource({ uri })).contents[0];
  const result = await client.callTool({ name: tool, arguments: args });
  step(`${tool} answered; rendering`);
  await page.evaluate(
    (o) => Promise.race([window.openWidget(o), new Promise((_, reject) => setTimeout(() => reject(new Error("the widget did not initialize")), 20_000))]),
    { html: resource.text, csp: resource._meta?.ui?.csp, input: args, result, hostContext, width },
  );
  const frame = await (await page.$("#widget")).contentFrame();
  return { frame, resource, result };
}

/** The widget's inline height as the host shows it (the iframe, sized from the widget's
 * size-changed notifications) and as its content needs it (the document's scroll height). */
async function measure(name) {
  await new Promise((resolve) => setTimeout(resolve, 300)); // let the host apply the widget's new height
  const element = await page.$("#widget");
  const shown = await element.evaluate((frame) => frame.getBoundingClientRect().height);
  const content = await (await element.contentFrame()).evaluate(() => document.documentElement.scrollHeight);
  heights[name] = { shown: Math.round(shown), content };
  return element;
}

async function shot(name) {
  const element = await measure(name);
  if (!config.screenshots) return;
  await element.screenshot({ path: join(config.screenshots, `widget-${name}.png`) });
}

const text = (frame, selector) => frame.$eval(selector, (node) => node.textContent);
const out = {};
const heights = {};

// select-space: the picker lists the key's spaces; a click makes one active.
{
  const { frame } = await open(config.keys.picker, "select-space", {});
  await frame.waitForSelector("[data-space]");
  const listed = await frame.$$eval("[data-space]", (nodes) => nodes.map((n) => n.dataset.space));
  await frame.type('input[type="search"]', config.pick.slice(0, 3));
  const filtered = await frame.$$eval("[data-space]", (nodes) => nodes.map((n) => n.dataset.space));
  await frame.$eval('input[type="search"]', (input) => {
    input.value = "";
    input.dispatchEvent(new Event("input"));
  });
  await frame.click(`[data-space="${config.pick}"]`);
  await frame.waitForSelector(".status.ok");
  const current = await frame.$eval('[aria-current="true"]', (n) => n.dataset.space);
  const who = await client.callTool({ name: "whoAmI", arguments: {} });
  await shot("select-space");
  out.selectSpace = { listed, filtered, current, status: await text(frame, ".status"), whoAmI: who.structuredContent.activeSpace };
}

// guided-save: the draft is prefilled; nothing is saved before Save; then it is, where chosen.
{
  const { frame } = await open(config.keys.writer, "guided-save", { prefill: config.prefill }, { hostContext: DARK, width: 360 });
  await frame.waitForSelector("#form:not([hidden])");
  const prefilled = await frame.$eval("#content", (n) => n.value);
  const options = await frame.$$eval("#space option", (nodes) => nodes.map((n) => n.value));
  const before = await client.callTool({ name: "search_memory", arguments: { keyword: config.marker, containerTag: config.saveInto, includeProfile: false } });
  await frame.$eval("#content", (n, extra) => {
    n.value += extra;
    n.dispatchEvent(new Event("input"));
  }, ` ${config.marker}`);
  await frame.type("#category", "policy");
  await frame.select("#space", config.saveInto);
  await shot("guided-save");
  await frame.click("#save");
  await frame.waitForSelector(".status.ok");
  out.guidedSave = { prefilled, options, countBefore: before.structuredContent.count, status: await text(frame, ".status") };
}

// guided-save for a Reader: nowhere to save, and no form at all.
{
  const { frame } = await open(config.keys.reader, "guided-save", { prefill: "anything" }, { hostContext: null });
  await frame.waitForSelector("#nowhere:not([hidden])");
  await measure("guided-save-reader");
  out.readerSave = { notice: await text(frame, "#nowhere"), formHidden: await frame.$eval("#form", (n) => n.hidden) };
}

// upload-file: a real file goes in, its progress shows, the document ends done. The file is a PDF
// that Chromium prints from the text the test gives, so it has a real text layer.
{
  const printer = await browser.newPage();
  const paragraphs = config.pdfText.map((p) => `<p>${p}</p>`).join("");
  await printer.setContent(`<!doctype html><html><head><title>Payments runbook</title></head><body style="font:14px serif">${paragraphs}</body></html>`);
  await printer.pdf({ path: config.uploadFile, format: "A5" });
  await printer.close();
  const { frame } = await open(config.keys.writer, "upload-file", {});
  await frame.waitForSelector("#form:not([hidden])");
  const input = await frame.$("#file");
  await input.uploadFile(config.uploadFile);
  await frame.select("#space", config.saveInto);
  await frame.click("#upload");
  const seen = new Set();
  for (;;) {
    const state = await frame.$eval("#status", (n) => ({ status: n.dataset.documentStatus ?? "", text: n.textContent, error: n.classList.contains("error") }));
    if (state.status) seen.add(state.status);
    if (state.status === "done" || state.status === "failed" || state.error) {
      out.upload = { ...state, seen: [...seen], progress: await frame.$eval("#progress", (n) => n.getAttribute("aria-valuenow")), documentId: await frame.$eval("#status", (n) => n.dataset.documentId ?? null) };
      break;
    }
    await new Promise((resolve) => setTimeout(resolve, 150));
  }
  await shot("upload-file");
}

// memory-graph: the space's documents and memories as nodes, none of another space's.
{
  const { frame } = await open(config.keys.writer, "memory-graph", { containerTag: config.saveInto }, { width: 820 });
  await frame.waitForSelector(".nodes g");
  const nodes = await frame.$$eval(".nodes g", (gs) => gs.map((g) => ({ id: g.dataset.id, kind: g.dataset.kind })));
  const edges = await frame.$$eval(".edges line", (ls) => ls.map((l) => l.getAttribute("class")));
  await frame.type("#search", config.marker);
  const matches = await frame.$$eval(".nodes .match", (gs) => gs.map((g) => g.dataset.id));
  await frame.$eval(".nodes .match", (g) => g.dispatchEvent(new MouseEvent("click", { bubbles: true })));
  const details = await text(frame, "#details");
  await frame.$eval("#search", (n) => {
    n.value = "";
    n.dispatchEvent(new Event("input"));
  });
  const transform = () => frame.$eval("#graph > g", (g) => g.getAttribute("transform"));
  const fitted = await transform();
  await frame.click('button[aria-label="Zoom in"]');
  const zoomed = await transform();
  await frame.click("#fit");
  await shot("memory-graph");
  out.graph = { nodes, edges, matches, details, fitted, zoomed };
}

// memory-graph in a narrow host: the details go below the graph, and still within the height.
{
  const { frame } = await open(config.keys.writer, "memory-graph", { containerTag: config.saveInto }, { width: 360 });
  await frame.waitForSelector(".nodes g");
  await frame.$eval(".nodes g", (g) => g.dispatchEvent(new MouseEvent("click", { bubbles: true })));
  await measure("memory-graph-narrow");
}

out.heights = heights;
out.calls = [...new Set(calls)].sort();
await browser.close();
await Promise.all(clients.map((c) => c.close()));
console.log(JSON.stringify(out));
process.exit(0); // keep-alive sockets of the HTTP clients would hold the process open
