/**
 * End to end, as a new user: pack every published package, install the tarballs with npm into an
 * empty folder, and run `npx st-convert` there. Outputs are checked with the reference Python
 * where one is present.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { REPO_ROOT, fixturePath, makeTempDir, referencePython, runPython, safetensorsFile } from "@st-convert/testing";

const { dir, cleanup } = makeTempDir("st-convert-e2e-");
const app = join(dir, "app");

function sh(command: string, args: string[], cwd: string): { status: number; stdout: string; stderr: string } {
  const result = spawnSync(command, args, {
    cwd,
    encoding: "utf8",
    env: { ...process.env, NO_COLOR: "1", npm_config_update_notifier: "false", npm_config_fund: "false", npm_config_audit: "false" },
  });
  return { status: result.status ?? -1, stdout: result.stdout, stderr: result.stderr };
}

const npx = (...args: string[]) => sh("npx", ["--no-install", "st-convert", ...args], app);

describe("installed from the packed tarballs", () => {
  beforeAll(() => {
    const tarballs = join(dir, "tarballs");
    const pack = sh("pnpm", ["-r", "--filter", "!@st-convert/testing", "--filter", "!st-convert-monorepo", "pack", "--pack-destination", tarballs], REPO_ROOT);
    if (pack.status !== 0) throw new Error(`pnpm pack failed:\n${pack.stderr}`);
    mkdirSync(app);
    writeFileSync(join(app, "package.json"), JSON.stringify({ name: "e2e-app", version: "1.0.0", private: true, type: "module" }));
    const files = readdirSync(tarballs).map((f) => join(tarballs, f));
    const install = sh("npm", ["install", "--no-audit", "--no-fund", ...files], app);
    if (install.status !== 0) throw new Error(`npm install failed:\n${install.stderr}`);
  }, 180_000);
  afterAll(cleanup);

  it("packs every published package with exact versions instead of workspace ranges", () => {
    const lock = JSON.parse(readFileSync(join(app, "node_modules", "st-convert", "package.json"), "utf8")) as { dependencies: Record<string, string> };
    const source = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { dependencies: Record<string, string> };
    expect(Object.keys(lock.dependencies).sort()).toEqual(Object.keys(source.dependencies).sort());
    expect(Object.keys(lock.dependencies)).toContain("@st-convert/core");
    for (const range of Object.values(lock.dependencies)) expect(range).toMatch(/^\d+\.\d+\.\d+$/);
  });

  it("npx st-convert --help", () => {
    const run = npx("--help");
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("st-convert <input> <output>");
  });

  it("npx st-convert in.npz out.safetensors gives the reference's bytes, and info reads every format", () => {
    copyFileSync(fixturePath("npy", "sample_model.npz"), join(app, "in.npz"));
    const run = npx("in.npz", "from-npz.safetensors");
    expect(run.status, run.stderr).toBe(0);
    for (const [file, format] of [
      ["from-npz.msgpack", "flax"],
      ["from-npz.json", "json"],
      ["from-npz.npz", "npz"],
    ] as const) {
      expect(npx("from-npz.safetensors", file).status).toBe(0);
      const info = JSON.parse(npx("info", file, "--json").stdout) as { input: { format: string }; tensors: unknown[] };
      expect(info).toMatchObject({ input: { format } });
      expect(info.tensors).toHaveLength(8);
    }
    const table = npx("info", "in.npz");
    expect(table.stdout).toMatch(/8 tensors, 1,705 parameters/);
    const python = referencePython();
    if (python !== undefined) {
      // The reference pipeline: np.load + safetensors.numpy.save, byte for byte.
      const theirs = join(app, "reference.safetensors");
      writeFileSync(join(app, "jobs.json"), JSON.stringify([{ in: join(app, "in.npz"), out: theirs }]));
      runPython(python, "reference_npy.py", ["to_safetensors", join(app, "jobs.json")]);
      expect(readFileSync(join(app, "from-npz.safetensors")).equals(readFileSync(theirs))).toBe(true);
    }
  });

  it("converts a file and lists it with info", () => {
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), join(app, "in.safetensors"));
    const run = npx("in.safetensors", "out.safetensors");
    expect(run.status, run.stderr).toBe(0);
    expect(readFileSync(join(app, "out.safetensors")).equals(readFileSync(fixturePath("safetensors", "mixed.safetensors")))).toBe(true);
    const info = npx("info", "out.safetensors", "--json");
    expect(JSON.parse(info.stdout)).toMatchObject({ input: { format: "safetensors" }, metadata: { format: "pt" } });
    const python = referencePython();
    if (python !== undefined) {
      const view = JSON.parse(runPython(python, "reference_safetensors.py", ["read", join(app, "out.safetensors")])) as { ok: boolean; tensors: unknown[] };
      expect(view).toMatchObject({ ok: true });
      expect(view.tensors).toHaveLength(8);
    }
  });

  it("converts a folder in a batch, naming the broken file and exiting 1", () => {
    const folder = join(app, "checkpoints");
    mkdirSync(join(folder, "a"), { recursive: true });
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), join(folder, "a", "m.safetensors"));
    copyFileSync(fixturePath("safetensors", "all_dtypes.safetensors"), join(folder, "all.safetensors"));
    copyFileSync(fixturePath("npy", "sample_model.npz"), join(folder, "a", "numpy.npz"));
    copyFileSync(fixturePath("npy", "dtype_f32_be.npy"), join(folder, "big_endian.npy"));
    writeFileSync(join(folder, "config.json"), JSON.stringify({ hidden_size: 8 }));
    writeFileSync(join(folder, "broken.safetensors"), safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}', 8));
    const run = npx("checkpoints", "--out-dir", "converted", "--to", "safetensors");
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/failed: .*broken\.safetensors: tensor "w"/);
    expect(run.stderr).toMatch(/converted 4, skipped 0, failed 1/);
    expect(readdirSync(join(app, "converted"), { recursive: true }).map(String).sort()).toEqual([
      "a",
      "a/m.safetensors",
      "a/numpy.safetensors",
      "all.safetensors",
      "big_endian.safetensors",
    ]);
    const python = referencePython();
    if (python !== undefined) {
      const views = runPython(python, "reference_safetensors.py", [
        "read",
        ...["a/m", "a/numpy", "all", "big_endian"].map((f) => join(app, "converted", `${f}.safetensors`)),
      ])
        .trim()
        .split("\n")
        .map((line) => JSON.parse(line) as { ok: boolean });
      expect(views.every((v) => v.ok)).toBe(true);
    }
  });

  it("every published package loads with require() from CommonJS and with import, every entry of its exports", () => {
    const names = ["st-convert", "@st-convert/core", "@st-convert/flax", "@st-convert/json", "@st-convert/native", "@st-convert/npy", "@st-convert/torch"];
    const specifiers = names.flatMap((name) => {
      const manifest = JSON.parse(readFileSync(join(app, "node_modules", name, "package.json"), "utf8")) as { exports: Record<string, unknown> };
      return Object.keys(manifest.exports).map((key) => (key === "." ? name : `${name}/${key.slice(2)}`));
    });
    expect(specifiers).toContain("@st-convert/core/node");
    // Each line: the specifier and what it gave (a module's export count, a JSON file's keys).
    const describe = '(s, m) => s + " " + (Object.keys(m).length > 0)';
    writeFileSync(join(app, "load.cjs"), `const d = ${describe};\nfor (const s of ${JSON.stringify(specifiers)}) console.log(d(s, require(s)));\n`);
    writeFileSync(
      join(app, "load.mjs"),
      `const d = ${describe};\nfor (const s of ${JSON.stringify(specifiers)}) console.log(d(s, s.endsWith(".json") ? (await import(s, { with: { type: "json" } })).default : await import(s)));\n`,
    );
    const expected = specifiers.map((s) => `${s} true`).join("\n");
    for (const script of ["load.cjs", "load.mjs"]) {
      const run = sh(process.execPath, [script], app);
      expect(run.stderr, script).toBe("");
      expect(run.status, script).toBe(0);
      expect(run.stdout.trim(), script).toBe(expected);
    }
    // The CommonJS API converts, as the ESM one does.
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), join(app, "cjs.safetensors"));
    writeFileSync(join(app, "api.cjs"), `require("st-convert").inspect("cjs.safetensors").then((r) => console.log(r.tensors.length));\n`);
    expect(sh(process.execPath, ["api.cjs"], app)).toMatchObject({ status: 0, stdout: "8\n", stderr: "" });
  });

  it("the library API imports from the installed package", () => {
    writeFileSync(
      join(app, "api.mjs"),
      `import { inspect } from "st-convert";\nimport { DTYPES } from "@st-convert/core";\nconst r = await inspect("in.safetensors");\nconsole.log(r.tensors.length, DTYPES.length);\n`,
    );
    const run = sh(process.execPath, ["api.mjs"], app);
    expect(run.stdout.trim()).toBe("8 22");
  });
});
