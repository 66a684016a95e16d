/**
 * The executable as npm installs it: dist/st-convert.cjs (a CommonJS bundle, scripts/bundle.mjs)
 * copied into a node_modules folder of its own finds the native helpers in the @st-convert/native
 * package installed beside it, runs without them when that package is missing, and gives the same
 * bytes either way. Every file of the bundle is strict code, as its ES module sources are.
 */
import { spawnSync } from "node:child_process";
import { cpSync, existsSync, mkdirSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT, fixturePath, makeTempDir } from "@st-convert/testing";

const cliDir = join(REPO_ROOT, "packages", "cli");
const nativeDir = join(REPO_ROOT, "packages", "native");
const nativeBuilt = existsSync(join(nativeDir, "dist", "fastio.node"));
if (!nativeBuilt && process.env.ST_CONVERT_REQUIRE_NATIVE === "1")
  throw new Error("the native module is required here, and packages/native/dist/fastio.node is missing");

/** A copy of the CLI package's manifest and dist/ under `root`/node_modules/st-convert. */
function installCli(root: string): string {
  const dir = join(root, "node_modules", "st-convert");
  mkdirSync(dir, { recursive: true });
  cpSync(join(cliDir, "package.json"), join(dir, "package.json"));
  cpSync(join(cliDir, "dist"), join(dir, "dist"), { recursive: true, filter: (from) => !from.endsWith(".map") });
  return join(dir, "dist", "st-convert.cjs");
}

function run(cli: string, args: readonly string[], env: Record<string, string> = {}) {
  // Without NODE_PATH, which pnpm's scripts point at its store, where every workspace package is found.
  const { ST_CONVERT_NATIVE: _, NODE_PATH: __, ...rest } = process.env;
  return spawnSync(process.execPath, [cli, ...args], { encoding: "utf8", env: { ...rest, NO_COLOR: "1", ...env }, timeout: 60_000 });
}

describe("the bundled executable, installed", () => {
  let dir: string;
  let cleanup: () => void;
  // A checkpoint torch.save wrote (fixtures/gen_torch.py): its members' CRC-32s are checked.
  const input = fixturePath("torch", "dtypes.pt");
  beforeAll(() => {
    ({ dir, cleanup } = makeTempDir("st-convert-bundle-layout-"));
  });
  afterAll(() => cleanup());

  const reference = () => {
    const out = join(dir, "reference.safetensors");
    const made = run(join(cliDir, "dist", "st-convert.cjs"), [input, out, "--force", "--quiet"]);
    expect(made.stderr).toBe("");
    return readFileSync(out);
  };

  it.skipIf(!nativeBuilt)("finds @st-convert/native installed beside it (npm's flat node_modules) and uses it", () => {
    const root = join(dir, "flat");
    const cli = installCli(root);
    const native = join(root, "node_modules", "@st-convert", "native");
    mkdirSync(native, { recursive: true });
    cpSync(join(nativeDir, "package.json"), join(native, "package.json"));
    cpSync(join(nativeDir, "dist"), join(native, "dist"), { recursive: true });
    const version = run(cli, ["--version", "--debug"]);
    expect(version.status).toBe(0);
    expect(version.stdout).toMatch(/^st-convert \d+\.\d+\.\d+ \(native\)\nnative helpers: loaded\n$/);
    const out = join(dir, "flat.safetensors");
    const converted = run(cli, [input, out, "--quiet"]);
    expect(converted.stderr).toBe("");
    expect(converted.status).toBe(0);
    expect(readFileSync(out).equals(reference())).toBe(true);
  });

  it("runs without the native helpers when @st-convert/native is not installed, with the same bytes", () => {
    const root = join(dir, "alone");
    const cli = installCli(root);
    const version = run(cli, ["--version", "--debug"]);
    expect(version.status).toBe(0);
    expect(version.stdout).toMatch(/^st-convert \d+\.\d+\.\d+ \(javascript\)\nnative helpers: not loaded: .+\n$/);
    const out = join(dir, "alone.safetensors");
    const converted = run(cli, [input, out, "--quiet"]);
    expect(converted.stderr).toBe("");
    expect(converted.status).toBe(0);
    expect(readFileSync(out).equals(reference())).toBe(true);
  });

  it("is strict CommonJS in every file, the entries starting with a shebang", () => {
    const dist = join(cliDir, "dist");
    const files = [
      ...["st-convert.cjs", "st-convert-worker.cjs", "st-convert-kernels.cjs"].map((f) => join(dist, f)),
      ...readdirSync(join(dist, "chunks"))
        .filter((f) => f.endsWith(".cjs"))
        .map((f) => join(dist, "chunks", f)),
    ];
    expect(files.length).toBeGreaterThan(5);
    for (const file of files) {
      const head = readFileSync(file, "utf8").split("\n", 2);
      const first = head[0]!.startsWith("#!") ? head[1] : head[0];
      expect(`${file}: ${first}`).toBe(`${file}: "use strict";`);
    }
    expect(readFileSync(join(dist, "st-convert.cjs"), "utf8").startsWith("#!/usr/bin/env node\n")).toBe(true);
    expect(existsSync(join(dist, "st-convert.js"))).toBe(false);
  });
});
