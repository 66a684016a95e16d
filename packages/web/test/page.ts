/**
 * Test helpers for the converter page: build it with Vite (recording what the bundle pulls in),
 * serve the build on 127.0.0.1, and drive Debian's Chromium with playwright-core.
 */
import { existsSync, readFileSync } from "node:fs";
import { type Server, createServer } from "node:http";
import { isBuiltin } from "node:module";
import type { AddressInfo } from "node:net";
import { extname, join, normalize, resolve, sep } from "node:path";
import { fileURLToPath } from "node:url";
import { type Browser, chromium } from "playwright-core";
import { type Plugin, build } from "vite";
import { describe, it } from "vitest";

/** The web package's folder. */
export const WEB_ROOT = resolve(fileURLToPath(new URL("..", import.meta.url)));

/** Chromium as Debian installs it (`apt-get install chromium`); `ST_CONVERT_CHROMIUM` points elsewhere. */
export const CHROMIUM_PATH = process.env.ST_CONVERT_CHROMIUM || "/usr/bin/chromium";

/**
 * Flags for a headless Chromium in a container: no sandbox (root, no user namespaces), no GPU,
 * and nothing that reaches the network on its own (component updates, first-run pages).
 */
export const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--no-first-run"];

/** What a build put in the bundle. */
export interface BuildRecord {
  /** The output folder. */
  outDir: string;
  /** Every Node built-in a module of the page asked for, with the module that asked. */
  builtins: { specifier: string; importer: string | undefined }[];
  /** Each JavaScript chunk: its file, the modules in it, and what it imports. */
  chunks: { fileName: string; moduleIds: string[]; imports: string[]; dynamicImports: string[]; code: string }[];
}

/**
 * Builds the page (its own `vite.config.ts`) into `outDir`, recording each request for a Node
 * built-in (`node:fs`, `fs`, `path`…) on the way: Vite would otherwise replace one with an empty
 * stub and the page would fail only when that code runs. `entry` replaces the page's `index.html`
 * (for the test that checks the recorder itself).
 */
export async function buildPage(outDir: string, options: { root?: string } = {}): Promise<BuildRecord> {
  const record: BuildRecord = { outDir, builtins: [], chunks: [] };
  const recorder: Plugin = {
    name: "st-convert:record-builtins",
    enforce: "pre",
    resolveId(specifier, importer) {
      if (specifier.startsWith("node:") || isBuiltin(specifier)) record.builtins.push({ specifier, importer });
      return null;
    },
    generateBundle(_options, bundle) {
      for (const output of Object.values(bundle)) {
        if (output.type !== "chunk") continue;
        record.chunks.push({
          fileName: output.fileName,
          moduleIds: [...output.moduleIds],
          imports: [...output.imports],
          dynamicImports: [...output.dynamicImports],
          code: output.code,
        });
      }
    },
  };
  await build({
    configFile: join(WEB_ROOT, "vite.config.ts"),
    root: options.root ?? WEB_ROOT,
    logLevel: "error",
    plugins: [recorder],
    build: { outDir, emptyOutDir: true },
  });
  return record;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".json": "application/json",
  ".png": "image/png",
  ".svg": "image/svg+xml",
};

/** A static file server over a folder, on 127.0.0.1 and a free port, that logs each request. */
export interface StaticServer {
  readonly origin: string;
  /** `METHOD /path` of every request, in order. */
  readonly requests: string[];
  close(): Promise<void>;
}

/** Serves `root` (GET and HEAD only; `/` is `index.html`). */
export async function serveStatic(root: string): Promise<StaticServer> {
  const requests: string[] = [];
  const server: Server = createServer((request, response) => {
    requests.push(`${request.method} ${request.url}`);
    const path = decodeURIComponent(new URL(request.url ?? "/", "http://x").pathname);
    const file = normalize(join(root, path === "/" ? "index.html" : path));
    if ((request.method !== "GET" && request.method !== "HEAD") || !file.startsWith(root + sep) || !existsSync(file)) {
      response.writeHead(request.method === "GET" || request.method === "HEAD" ? 404 : 405).end();
      return;
    }
    const body = readFileSync(file);
    response.writeHead(200, { "content-type": TYPES[extname(file)] ?? "application/octet-stream", "content-length": body.byteLength });
    response.end(request.method === "HEAD" ? undefined : body);
  });
  await new Promise<void>((done) => server.listen(0, "127.0.0.1", done));
  const { port } = server.address() as AddressInfo;
  return {
    origin: `http://127.0.0.1:${port}`,
    requests,
    close: () =>
      new Promise<void>((done, fail) => {
        server.close((error) => (error === undefined ? done() : fail(error)));
        server.closeAllConnections();
      }),
  };
}

/** Launches Chromium headless, with a fresh profile that Playwright removes on close. */
export function launchChromium(): Promise<Browser> {
  return chromium.launch({ executablePath: CHROMIUM_PATH, headless: true, args: CHROMIUM_ARGS, timeout: 120_000 });
}

let noted = false;

/**
 * A `describe` for tests in a real browser. Without Chromium the block is skipped with a visible
 * note, unless `ST_CONVERT_REQUIRE_BROWSER=1` (CI), where a missing Chromium fails.
 */
export function describeBrowser(name: string, body: () => void): void {
  if (existsSync(CHROMIUM_PATH)) {
    describe(name, body);
    return;
  }
  if (process.env.ST_CONVERT_REQUIRE_BROWSER === "1") {
    describe(name, () => {
      it("needs Chromium", () => {
        throw new Error(`ST_CONVERT_REQUIRE_BROWSER=1 but there is no Chromium at ${CHROMIUM_PATH}: apt-get install chromium (or set ST_CONVERT_CHROMIUM)`);
      });
    });
    return;
  }
  if (!noted) {
    noted = true;
    console.warn(`NOTE: browser tests skipped: no Chromium at ${CHROMIUM_PATH} (apt-get install chromium, or set ST_CONVERT_CHROMIUM)`);
  }
  describe.skip(name, body);
}
