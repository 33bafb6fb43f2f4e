// The host side of MCP Apps, as a chat client would run it: the widget's HTML in a sandboxed
// iframe under the CSP its resource declares, an AppBridge speaking to it, and every tools/call and
// resources/read the widget makes handed to the page's owner (drive.mjs), which sends it on to the
// real server with the real key.
import { AppBridge, PostMessageTransport } from "@modelcontextprotocol/ext-apps/app-bridge";

function withCsp(html, csp) {
  const connect = (csp?.connectDomains ?? []).join(" ") || "'none'";
  const policy = `default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:; connect-src ${connect}`;
  return html.replace("<head>", `<head><meta http-equiv="Content-Security-Policy" content="${policy}">`);
}

window.openWidget = async ({ html, csp, input, result, hostContext, width }) => {
  const frame = document.createElement("iframe");
  frame.id = "widget";
  frame.setAttribute("sandbox", "allow-scripts allow-forms");
  frame.style.cssText = `width:${width}px;height:420px;border:0;display:block`;
  document.getElementById("stage").replaceChildren(frame);
  const bridge = new AppBridge(
    null,
    { name: "memory-mcp-test-host", version: "1.0.0" },
    { serverTools: {}, serverResources: {} },
    hostContext ? { hostContext } : {},
  );
  bridge.oncalltool = (params) => window.hostCallTool(params);
  bridge.onreadresource = (params) => window.hostReadResource(params);
  bridge.onsizechange = ({ height }) => {
    if (height) frame.style.height = `${Math.ceil(height)}px`;
  };
  const initialized = new Promise((resolve) => {
    bridge.oninitialized = resolve;
  });
  frame.srcdoc = withCsp(html, csp);
  await bridge.connect(new PostMessageTransport(frame.contentWindow, frame.contentWindow));
  await initialized;
  await bridge.sendToolInput({ arguments: input });
  await bridge.sendToolResult(result);
  window.bridge = bridge;
};
