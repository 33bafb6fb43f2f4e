// Usage: node load.mjs <mcp url> <api key> <tool> <clients> <seconds> < <argument choices as JSON>
// Runs <clients> concurrent TypeScript SDK MCP clients calling one tool in a closed loop for
// <seconds>, timed from when every session is open and has made one call, each call with one of
// the argument objects picked at random, and prints the latencies (milliseconds) as one JSON
// array. The SDK validates every result's structured content against the tool's output schema,
// as it does for any caller.
import { setMaxListeners } from "node:events";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import path from "node:path";

// The SDK is installed once for the client tests (tests/server/ts_client); resolve it from there.
const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(path.join(here, "../../tests/server/ts_client/package.json"));
const { Client } = require("@modelcontextprotocol/sdk/client/index.js");
const { StreamableHTTPClientTransport } = require("@modelcontextprotocol/sdk/client/streamableHttp.js");

import { readFileSync } from "node:fs";

const [url, key, tool, clients, seconds] = process.argv.slice(2);
const argsJson = readFileSync(0, "utf8"); // standard input: longer than a command line may be
// The SDK adds an abort listener per request to a signal that lives as long as the session, which
// Node reports as a possible leak after 1,500 calls; a load run makes thousands on purpose.
setMaxListeners(0);
const choices = JSON.parse(argsJson);

async function connect() {
  const transport = new StreamableHTTPClientTransport(new URL(url), {
    requestInit: { headers: { Authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: "memory-mcp-load", version: "1.0.0" });
  await client.connect(transport);
  await client.listTools(); // the SDK learns the output schemas it validates against
  await call(client); // untimed: the clock starts once every session has made a call
  return client;
}

async function call(client) {
  const args = choices[Math.floor(Math.random() * choices.length)];
  const result = await client.callTool({ name: tool, arguments: args });
  if (result.isError) throw new Error(`${tool} failed: ${result.content[0].text}`);
}

const sessions = await Promise.all(Array.from({ length: Number(clients) }, connect));
const latencies = [];
process.stderr.write("started\n"); // the caller may read resource counters from here on
const stopAt = performance.now() + Number(seconds) * 1000;
await Promise.all(
  sessions.map(async (client) => {
    while (performance.now() < stopAt) {
      const started = performance.now();
      await call(client);
      latencies.push(performance.now() - started);
    }
  }),
);
await Promise.all(sessions.map((c) => c.close()));
process.stdout.write(JSON.stringify(latencies) + "\n");
