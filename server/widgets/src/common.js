// What every widget shares: the connection to the host, the host's theme, a small DOM helper and
// tool calls that fail loudly.
import { App, applyDocumentTheme, applyHostFonts, applyHostStyleVariables } from "@modelcontextprotocol/ext-apps";

/** Create an element: el("div", { class: "x", onclick: f }, child, "text", ...). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else if (name === "text") node.textContent = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child !== null && child !== undefined && child !== false) {
      node.append(child instanceof Node ? child : document.createTextNode(String(child)));
    }
  }
  return node;
}

function applyHostContext(context) {
  if (!context) return;
  if (context.theme) applyDocumentTheme(context.theme);
  if (context.styles?.variables) applyHostStyleVariables(context.styles.variables);
  if (context.styles?.css?.fonts) applyHostFonts(context.styles.css.fonts);
}

/**
 * Connect to the host. `onResult` receives the launcher's structured result (and again whenever the
 * host sends a new one); `onInput` its arguments.
 */
export async function connect(name, { onResult, onInput } = {}) {
  const app = new App({ name: `memory-mcp-${name}`, version: "1.0.0" }, {}, { autoResize: true });
  app.onhostcontextchanged = (context) => applyHostContext(context);
  app.ontoolinput = (params) => onInput?.(params.arguments ?? {});
  app.ontoolresult = (result) => onResult?.(result.structuredContent ?? {}, result);
  await app.connect();
  applyHostContext(app.getHostContext());
  return app;
}

/** Call a server tool through the host; its structured result, or an Error with the tool's message. */
export async function callTool(app, name, args = {}) {
  const result = await app.callServerTool({ name, arguments: args });
  if (result.isError) {
    const text = result.content?.find((c) => c.type === "text")?.text ?? `${name} failed`;
    throw new Error(text.replace(/^Error executing tool [^:]+: /, ""));
  }
  return result.structuredContent ?? {};
}

/** Show a message in a status element; kind is "", "ok" or "error". */
export function say(node, message, kind = "") {
  node.textContent = message;
  node.className = `status ${kind}`.trim();
}

/** "3 hours ago" style time, in the host's locale when it says one. */
export function ago(iso) {
  if (!iso) return "no activity yet";
  const seconds = (Date.now() - new Date(iso).getTime()) / 1000;
  const steps = [
    [60, "second"],
    [60, "minute"],
    [24, "hour"],
    [30, "day"],
    [12, "month"],
    [Infinity, "year"],
  ];
  let value = -seconds;
  for (const [size, unit] of steps) {
    if (Math.abs(value) < size) {
      return new Intl.RelativeTimeFormat(undefined, { numeric: "auto" }).format(Math.round(value), unit);
    }
    value /= size;
  }
  return iso;
}

/** A space's one-line summary. */
export function spaceLine(space) {
  return `${space.memoryCount} memories · ${space.documentCount} documents · ${ago(space.lastActivity)}`;
}
