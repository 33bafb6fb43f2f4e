// Usage: node client.mjs <mcp url> <api key>
// Calls every tool with the TypeScript SDK client, which validates each result's structured
// content against the tool's declared output schema, and prints one JSON summary line.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "ts-check", version: "1.0.0" });
await client.connect(transport);

const summary = { tools: [], calls: {}, errors: {} };
summary.tools = (await client.listTools()).tools.map((t) => t.name).sort();

async function call(name, args) {
  const result = await client.callTool({ name, arguments: args });
  if (result.isError) {
    summary.errors[name] = result.content[0].text;
  } else {
    summary.calls[name] = result.structuredContent;
  }
  return result;
}

const saved = await call("add_memory", { content: "The TypeScript client saved this.", category: "ts" });
await call("add_memory", { content: "The TypeScript client saved this." });
await call("search_memory", { query: "what did the TypeScript client save?" });
await call("listDocuments", { limit: 5 });
await call("getDocument", { documentId: saved.structuredContent.memory.documentId });
await call("listMemories", {});
await call("listSpaces", {});
await call("whoAmI", {});
await call("select-space", { space: summary.calls.whoAmI.activeSpace });
// The MCP Apps tools: the widgets' launchers and the app-only tools the widgets call.
await call("guided-save", { prefill: "A draft from the TypeScript client." });
await call("upload-file", {});
await call("memory-graph", {});
await call("set-active-space", { space: summary.calls.whoAmI.activeSpace });
await call("save-memory", { content: "The TypeScript client saved this through the form.", space: "ts" });
await call("prepare-file-upload", {});
await call("fetch-graph-data", { limit: 5 });
await call("search_memory", { keyword: "TypeScript", containerTag: "no-such-space" });
// A forget by memoryId alone (no content), as the input schema allows.
const doomed = await client.callTool({ name: "add_memory", arguments: { content: "The TypeScript client forgets this." } });
const forgetArgs = { action: "forget", memoryId: doomed.structuredContent.memory.id };
summary.forgetById = (await client.callTool({ name: "add_memory", arguments: forgetArgs })).structuredContent;
summary.resources = (await client.listResources()).resources.map((r) => r.uri).sort();
summary.profile = (await client.readResource({ uri: "memory-mcp://profile" })).contents[0].text;
summary.prompt = (await client.getPrompt({ name: "context" })).messages[0].content.text;
await client.close();
console.log(JSON.stringify(summary));
