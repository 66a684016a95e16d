/**
 * Every published package is publishable: publint finds nothing, and the manifest has what the
 * project promises (an exports map with types first, files, engines, sideEffects, a README and a
 * license). Changesets are set up for independent versions.
 */
import { existsSync, readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { publint } from "publint";
import { formatMessage } from "publint/utils";
import { describe, expect, it } from "vitest";
import { REPO_ROOT } from "@st-convert/testing";

interface Manifest {
  name: string;
  private?: boolean;
  version: string;
  license?: string;
  type?: string;
  sideEffects?: boolean;
  engines?: { node?: string };
  files?: string[];
  exports?: Record<string, unknown>;
  description?: string;
  dependencies?: Record<string, string>;
}

const packages = readdirSync(join(REPO_ROOT, "packages"))
  .map((folder) => ({ folder, dir: join(REPO_ROOT, "packages", folder) }))
  .map((p) => ({ ...p, manifest: JSON.parse(readFileSync(join(p.dir, "package.json"), "utf8")) as Manifest }))
  .filter((p) => p.manifest.private !== true);

describe("published packages", () => {
  it("are the eight the project ships", () => {
    expect(packages.map((p) => p.manifest.name).sort()).toEqual([
      "@st-convert/core",
      "@st-convert/flax",
      "@st-convert/gguf",
      "@st-convert/json",
      "@st-convert/native",
      "@st-convert/npy",
      "@st-convert/torch",
      "st-convert",
    ]);
  });

  it.each(packages.map((p) => [p.manifest.name, p] as const))("%s has a complete manifest", (_name, { dir, manifest }) => {
    expect(manifest.type).toBe("module");
    expect(manifest.sideEffects).toBe(false);
    expect(manifest.engines?.node).toMatch(/^>=20/);
    expect(manifest.license).toBe("MIT");
    expect(manifest.description).toBeTruthy();
    expect(manifest.files).toEqual(expect.arrayContaining(["dist", "!dist/.tsbuildinfo", "README.md"]));
    const root = manifest.exports?.["."] as Record<string, string>;
    expect(Object.keys(root)[0]).toBe("types");
    expect(existsSync(join(dir, "README.md"))).toBe(true);
    expect(existsSync(join(dir, "LICENSE"))).toBe(true);
    for (const [dep, range] of Object.entries(manifest.dependencies ?? {})) {
      if (dep.startsWith("@st-convert/")) expect(range).toBe("workspace:*");
      else expect(range).toMatch(/^\d+\.\d+\.\d+$/); // third-party runtime deps are pinned
    }
  });

  it.each(packages.map((p) => [p.manifest.name, p] as const))("%s passes publint (strict)", async (_name, { dir, manifest }) => {
    const { messages } = await publint({ pkgDir: dir, strict: true, pack: "pnpm" });
    expect(messages.map((m) => `${m.type} ${m.code}: ${formatMessage(m, manifest)}`)).toEqual([]);
  });
});

describe("changesets", () => {
  it("versions packages independently, publicly, from main", () => {
    const config = JSON.parse(readFileSync(join(REPO_ROOT, ".changeset", "config.json"), "utf8")) as Record<string, unknown>;
    expect(config).toMatchObject({ access: "public", baseBranch: "main", fixed: [], linked: [] });
    expect(readdirSync(join(REPO_ROOT, ".changeset")).some((f) => f.endsWith(".md"))).toBe(true);
  });
});
