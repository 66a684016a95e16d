/**
 * The executable's code cache (src/codeCache.ts): V8's compiled code of the bundle's chunks, kept
 * in a private folder under $XDG_CACHE_HOME, read back by later runs, and never where another user
 * could have written it. What a run compiled is seen in the files it leaves; whether V8 used them
 * is V8's affair (it rejects code of another source or build), so no timing is asserted here.
 */
import { spawnSync } from "node:child_process";
import { chmodSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync, symlinkSync, writeFileSync } from "node:fs";
import Module from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

/** Node 22.1 and later keep the cache themselves, in their own layout. */
const nodeKeepsIt = typeof (Module as { enableCompileCache?: unknown }).enableCompileCache === "function";
const folder = () => join(dir, "cache", "st-convert", `code-${process.version}-${process.arch}`);

function convert(env: Record<string, string>, output = join(dir, "out.safetensors")) {
  const run = runCli([fixturePath("gguf", "plain.gguf"), output, "--force", "--quiet"], { env: { XDG_CACHE_HOME: join(dir, "cache"), ...env } });
  expect(run.status, run.stderr).toBe(0);
  expect(run.stderr).toBe("");
  return readFileSync(output);
}

describe.skipIf(nodeKeepsIt)("the code cache", () => {
  it("keeps each chunk the command ran, privately, and later runs convert alike with it", () => {
    const first = convert({});
    const names = readdirSync(folder()).sort();
    // The command's own chunk and the GGUF reader's, at least: named after the chunks they hold.
    expect(names.some((name) => /^cli-.*\.cjs\.v8$/.test(name))).toBe(true);
    expect(names.some((name) => /^readGguf-.*\.cjs\.v8$/.test(name))).toBe(true);
    expect(statSync(folder()).mode & 0o777).toBe(0o700);
    for (const name of names) expect(statSync(join(folder(), name)).mode & 0o777).toBe(0o600);
    const written = names.map((name) => readFileSync(join(folder(), name)));

    // A run that found every chunk's code writes nothing.
    const second = convert({}, join(dir, "again.safetensors"));
    expect(second.equals(first)).toBe(true);
    expect(readdirSync(folder()).sort()).toEqual(names);
    names.forEach((name, k) => expect(readFileSync(join(folder(), name)).equals(written[k]!)).toBe(true));
  });

  it("replaces code V8 rejects, and runs as usual", () => {
    const first = convert({});
    const name = readdirSync(folder()).find((n) => n.startsWith("cli-"))!;
    writeFileSync(join(folder(), name), "not V8's code cache");
    expect(convert({}, join(dir, "again.safetensors")).equals(first)).toBe(true);
    expect(readFileSync(join(folder(), name)).toString("latin1")).not.toBe("not V8's code cache");
  });

  it("is off where another user could write the folder, where it is a link or cannot be made, or when asked", () => {
    mkdirSync(folder(), { recursive: true });
    chmodSync(folder(), 0o777);
    convert({});
    expect(readdirSync(folder())).toEqual([]);

    const linked = join(dir, "linked");
    mkdirSync(join(linked, "st-convert"), { recursive: true });
    mkdirSync(join(dir, "elsewhere"), { mode: 0o700 });
    symlinkSync(join(dir, "elsewhere"), join(linked, "st-convert", `code-${process.version}-${process.arch}`));
    convert({ XDG_CACHE_HOME: linked });
    expect(readdirSync(join(dir, "elsewhere"))).toEqual([]);

    convert({ XDG_CACHE_HOME: join(dir, "off"), ST_CONVERT_CODE_CACHE: "0" });
    expect(existsSync(join(dir, "off"))).toBe(false);

    // A file where the folder would be made: the cache cannot be made, the command runs all the same.
    writeFileSync(join(dir, "file"), "");
    convert({ XDG_CACHE_HOME: join(dir, "file") });
    expect(readFileSync(join(dir, "file"))).toHaveLength(0);
  });

  it("compiles a chunk that imports a module by name as usual (Node 20 loses its import() with cached code)", () => {
    const chunks = join(dir, "chunks");
    mkdirSync(chunks);
    writeFileSync(join(chunks, "imports.cjs"), 'module.exports = () => import("node:path").then((path) => path.sep);\n');
    writeFileSync(join(chunks, "plain.cjs"), "module.exports = () => 6 * 7;\n");
    const codeCache = fileURLToPath(new URL("../dist/codeCache.js", import.meta.url));
    const script = `
      import { createRequire } from "node:module";
      import { enableCodeCache } from ${JSON.stringify(codeCache)};
      enableCodeCache(${JSON.stringify(chunks)});
      const require = createRequire(${JSON.stringify(join(chunks, "x.cjs"))});
      console.log(require("./plain.cjs")(), await require("./imports.cjs")());`;
    for (let run = 0; run < 2; run++) {
      const ran = spawnSync(process.execPath, ["--input-type=module", "-e", script], {
        encoding: "utf8",
        env: { ...process.env, XDG_CACHE_HOME: join(dir, "cache") },
      });
      expect(ran.stderr).toBe("");
      expect(ran.stdout).toBe("42 /\n");
    }
    expect(readdirSync(folder())).toEqual(["plain.cjs.v8"]);
  });
});
