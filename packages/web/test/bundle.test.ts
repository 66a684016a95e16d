/**
 * The page's bundle holds no Node built-in: core and the adapters claim to run in browsers, and
 * this is where that claim is checked at build time (the browser tests check it at run time).
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BuildRecord, buildPage } from "./page.ts";

/** Problems of a build: built-ins asked for, imports of anything but the bundle's own chunks, Vite's stubs. */
function nodeLeaks(record: BuildRecord): string[] {
  const problems = record.builtins.map((b) => `${b.importer ?? "?"} imports ${b.specifier}`);
  const files = new Set(record.chunks.map((c) => c.fileName));
  for (const chunk of record.chunks) {
    for (const target of [...chunk.imports, ...chunk.dynamicImports]) {
      if (!files.has(target)) problems.push(`${chunk.fileName} imports ${target}, which is not a chunk of the page`);
    }
    for (const id of chunk.moduleIds) if (id.includes("__vite-browser-external")) problems.push(`${chunk.fileName} holds Vite's stub for a Node module: ${id}`);
    // A literal import of a bare or node: specifier left in the code would fail in the browser.
    for (const match of chunk.code.matchAll(/\bimport\s*\(\s*["'`]([^"'`]+)["'`]\s*\)|\bfrom\s*["'`]([^"'`]+)["'`]/g)) {
      const specifier = match[1] ?? match[2] ?? "";
      if (!specifier.startsWith("./") && !specifier.startsWith("../")) problems.push(`${chunk.fileName} imports ${JSON.stringify(specifier)}`);
    }
  }
  return problems;
}

describe("the page's bundle", () => {
  let out: string;
  let record: BuildRecord;

  beforeAll(async () => {
    out = mkdtempSync(join(tmpdir(), "st-convert-web-bundle-"));
    record = await buildPage(out);
  });
  afterAll(() => rmSync(out, { recursive: true, force: true }));

  it("pulls in no Node built-in (node:*, fs, path, zlib…) from any package", () => {
    expect(record.chunks.length).toBeGreaterThan(1);
    expect(nodeLeaks(record)).toEqual([]);
  });

  it("bundles core and every adapter the command registers", () => {
    const ids = record.chunks.flatMap((c) => c.moduleIds);
    for (const pkg of ["core", "npy", "flax", "json", "torch", "gguf"]) {
      expect(
        ids.some((id) => id.includes(`/packages/${pkg}/dist/`)),
        pkg,
      ).toBe(true);
    }
  });

  it("carries fflate, in a chunk of its own that only a deflated archive loads", () => {
    const fflate = record.chunks.filter((c) =>
      c.moduleIds.some((id) => /[\\/]node_modules[\\/](?:\.pnpm[\\/][^\\/]+[\\/]node_modules[\\/])?fflate[\\/]/.test(id)),
    );
    expect(fflate).toHaveLength(1);
    // Not in the entry chunk: reaching it takes a dynamic import.
    const entry = record.chunks.find((c) => c.moduleIds.some((id) => id.endsWith("/src/main.ts")));
    expect(entry?.fileName).not.toBe(fflate[0]!.fileName);
    expect(entry?.imports).not.toContain(fflate[0]!.fileName);
  });

  it("the check catches a node:fs import that sneaks in (a page built from a module that imports it)", async () => {
    const root = mkdtempSync(join(tmpdir(), "st-convert-web-leak-"));
    try {
      writeFileSync(join(root, "index.html"), '<!doctype html><script type="module" src="./leak.js"></script>\n');
      writeFileSync(join(root, "leak.js"), 'import { readFileSync } from "node:fs";\nimport { join } from "path";\nconsole.log(readFileSync, join);\n');
      const leaky = await buildPage(join(root, "dist"), { root });
      const problems = nodeLeaks(leaky);
      expect(problems.some((p) => p.includes("node:fs"))).toBe(true);
      expect(problems.some((p) => p.endsWith("imports path"))).toBe(true);
    } finally {
      rmSync(root, { recursive: true, force: true });
    }
  });
});
