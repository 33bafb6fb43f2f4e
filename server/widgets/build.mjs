// Build each widget into one self-contained HTML file (script and styles inlined, nothing fetched).
// Usage: node build.mjs [out dir]   (default: ../src/memory_mcp/server/widgets, the package data the server serves)
// The output depends only on the sources and the locked packages, so a test can rebuild and compare.
import { readFile, mkdir, writeFile } from "node:fs/promises";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const here = dirname(fileURLToPath(import.meta.url));
const out = resolve(process.argv[2] ?? join(here, "..", "src", "memory_mcp", "server", "widgets"));
const WIDGETS = ["select-space", "guided-save", "upload-file", "memory-graph"];

// zod re-exports every locale (260 kB of the 670 kB a widget weighed); the widgets need English only.
const englishOnly = {
  name: "zod-english-only",
  setup(context) {
    context.onResolve({ filter: /\/locales\/index\.js$/ }, (args) =>
      args.importer.includes(`${join("node_modules", "zod")}`) ? { path: join(dirname(args.importer), "..", "locales", "en.js") } : undefined,
    );
  },
};

const css = (await readFile(join(here, "src", "style.css"), "utf8")).trim();
await mkdir(out, { recursive: true });
for (const name of WIDGETS) {
  const result = await build({
    entryPoints: [join(here, "src", `${name}.js`)],
    bundle: true,
    format: "esm",
    target: "es2022",
    minify: true,
    legalComments: "none",
    write: false,
    absWorkingDir: here,
    logLevel: "error",
    plugins: [englishOnly],
  });
  // "</script" inside the bundle would end the inline script early.
  const js = result.outputFiles[0].text.trim().replaceAll("</script", "<\\/script");
  const html = [
    "<!doctype html>",
    '<html lang="en">',
    "<head>",
    '<meta charset="utf-8">',
    '<meta name="viewport" content="width=device-width, initial-scale=1">',
    `<title>Memory-MCP ${name.replace("-", " ")}</title>`,
    `<style>${css}</style>`,
    "</head>",
    "<body>",
    `<script type="module">${js}</script>`,
    "</body>",
    "</html>",
    "",
  ].join("\n");
  await writeFile(join(out, `${name}.html`), html);
}
console.log(`built ${WIDGETS.length} widgets into ${out}`);
