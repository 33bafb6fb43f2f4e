// Usage: CLIENT_MODULE=<path of @modelcontextprotocol/client's dist/index.mjs> node list_tools.mjs <mcp url> <key> <legacy|auto>
// Lists the tools with the TypeScript SDK 2.x client in one version-negotiation mode and prints
// one JSON line: the negotiated era, the server's name and version, and the tool names.
const { Client, StreamableHTTPClientTransport } = await import(process.env.CLIENT_MODULE);

const [url, key, mode] = process.argv.slice(2);
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "bench-ts", version: "1.0.0" }, { versionNegotiation: { mode } });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name).sort();
const server = client.getServerVersion() ?? {};
console.log(JSON.stringify({ mode, version: client.getNegotiatedProtocolVersion?.() ?? null, server, tools }));
await client.close();
