import { copyFileSync, existsSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli, safetensorsFile, safetensorsHostileCases } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const manifest = JSON.parse(readFileSync(fixturePath("safetensors", "manifest.json"), "utf8")) as Record<
  string,
  { metadata: Record<string, string> | null; tensors: { name: string; dtype: string; shape: number[]; data_offsets: [number, number] }[] }
>;

describe("st-convert basics", () => {
  it("--help lists the usage, the options and every registered format", () => {
    const run = runCli(["--help"]);
    expect(run.status).toBe(0);
    expect(run.stdout).toContain("st-convert <input> <output>");
    expect(run.stdout).toContain("st-convert info <file>");
    expect(run.stdout).toContain("st-convert help <command>");
    expect(run.stdout).toMatch(/safetensors\s+\.safetensors/);
  });

  it("--version prints the package version and, in one word, whether the native helpers are in use", () => {
    const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
    const native = existsSync(new URL("../../native/dist/fastio.node", import.meta.url));
    expect(runCli(["--version"])).toMatchObject({ status: 0, stdout: `st-convert ${pkg.version} (${native ? "native" : "javascript"})\n` });
    expect(runCli(["-V"], { env: { ST_CONVERT_NATIVE: "0" } })).toMatchObject({ status: 0, stdout: `st-convert ${pkg.version} (javascript)\n` });
  });

  it.each([
    [[] as string[], /expected an input and an output/],
    [["a.safetensors"], /expected an input and an output/],
    [["a", "b", "c"], /expected two files/],
    [["--bogus", "a", "b"], /bogus/],
    [["info"], /info takes one file/],
  ])("usage error %j exits 2", (args, message) => {
    const run = runCli(args);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(message);
    expect(run.stderr).toContain("--help");
  });

  it("an output whose format it cannot tell is a usage error", () => {
    const run = runCli([fixturePath("safetensors", "mixed.safetensors"), join(dir, "out.weird")]);
    expect(run.status).toBe(2);
    expect(run.stderr).toMatch(/--to/);
  });

  it("an unknown --to format is a usage error", () => {
    expect(runCli([fixturePath("safetensors", "mixed.safetensors"), join(dir, "o"), "--to", "tflite"]).status).toBe(2);
  });
});

describe("st-convert info", () => {
  it.each(Object.entries(manifest))("--json agrees with the reference reader on %s", (name, expected) => {
    const run = runCli(["info", fixturePath("safetensors", name), "--json"]);
    expect(run.status).toBe(0);
    const report = JSON.parse(run.stdout) as { input: { format: string }; metadata: unknown; tensors: { name: string; bytes?: number }[] };
    expect(report.input.format).toBe("safetensors");
    expect(report.metadata).toEqual(expected.metadata);
    const sort = (ts: { name: string }[]) => [...ts].sort((a, b) => (a.name < b.name ? -1 : 1));
    expect(sort(report.tensors)).toEqual(
      sort(expected.tensors.map(({ name, dtype, shape, data_offsets }) => ({ name, dtype, shape, bytes: data_offsets[1] - data_offsets[0] }))),
    );
  });

  it("prints a table with totals and the parameter count", () => {
    const run = runCli(["info", fixturePath("safetensors", "mixed.safetensors")]);
    expect(run.status).toBe(0);
    expect(run.stdout).toMatch(/model\.embed_tokens\.weight\s+BF16\s+\[16, 8\]\s+256/);
    expect(run.stdout).toContain('metadata: format="pt"');
    // 128 + 64 + 8 + 32 + 8 + 128 + 1 + 4 parameters
    expect(run.stdout).toMatch(/8 tensors, 373 parameters/);
  });

  it.each(safetensorsHostileCases.filter(([, , code]) => code !== "ok"))("refuses %s with exit 1 and one line naming the rule", (_attack, bytes, code) => {
    const path = join(dir, "bad.safetensors");
    writeFileSync(path, bytes);
    const run = runCli(["info", path]);
    expect(run.status).toBe(1);
    expect(run.stdout).toBe("");
    const lines = run.stderr.trimEnd().split("\n");
    expect(lines).toHaveLength(1);
    expect(lines[0]).toContain(path);
    expect(lines[0]).toContain(`[${code}]`);
    expect(lines[0]).not.toMatch(/\bat .*\.js:\d+/);
  });

  it("names the tensor in the message", () => {
    const path = join(dir, "bad.safetensors");
    writeFileSync(path, safetensorsFile('{"w":{"dtype":"I32","shape":[2,2],"data_offsets":[0,4]}}', 4));
    expect(runCli(["info", path]).stderr).toBe(
      `st-convert: ${path}: tensor "w": invalid shape, data type, or offset: I32 [2, 2] needs 16 bytes, data_offsets [0, 4] hold 4 [TensorInvalidInfo]\n`,
    );
  });

  it("shows a stack trace only with --debug", () => {
    const path = join(dir, "bad.safetensors");
    writeFileSync(path, new Uint8Array(3));
    expect(runCli(["info", path]).stderr.split("\n")).toHaveLength(2);
    expect(runCli(["info", path, "--debug"]).stderr).toMatch(/\n\s+at /);
  });

  it("a missing file is exit 1 with the file named", () => {
    const run = runCli(["info", join(dir, "missing.safetensors")]);
    expect(run.status).toBe(1);
    expect(run.stderr).toContain("missing.safetensors");
    expect(run.stderr).toContain("no such file");
  });
});

describe("st-convert safetensors -> safetensors", () => {
  it.each(Object.keys(manifest))("rewrites the reference's %s to the same bytes", (name) => {
    const out = join(dir, "out.safetensors");
    const run = runCli([fixturePath("safetensors", name), out]);
    expect(run.status, run.stderr).toBe(0);
    expect(readFileSync(out).equals(readFileSync(fixturePath("safetensors", name)))).toBe(true);
  });

  it("normalizes a valid file laid out differently into the reference's layout", () => {
    const input = join(dir, "odd.safetensors");
    const data = Uint8Array.of(1, 2, 3, 4, 5, 6, 7, 8, 9);
    // U8 before F32 in the buffer, keys reversed, whitespace padding, array-form info, map-form dtype.
    writeFileSync(input, safetensorsFile(' {"f":{"dtype":{"F32":null},"shape":[2],"data_offsets":[1,9]}, "u":["U8",[1],[0,1]]}\n\n', data));
    const out = join(dir, "out.safetensors");
    expect(runCli([input, out]).status).toBe(0);
    const bytes = readFileSync(out);
    const header = '{"f":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"u":{"dtype":"U8","shape":[1],"data_offsets":[8,9]}}';
    expect(bytes.subarray(8, 8 + header.length).toString()).toBe(header);
    expect([...bytes.subarray(bytes.length - 9)]).toEqual([2, 3, 4, 5, 6, 7, 8, 9, 1]);
  });

  it("never replaces an existing output without --force, and does with it", () => {
    const out = join(dir, "out.safetensors");
    writeFileSync(out, "precious");
    const refused = runCli([fixturePath("safetensors", "mixed.safetensors"), out]);
    expect(refused.status).toBe(1);
    expect(refused.stderr).toMatch(/exists.*--force/);
    expect(readFileSync(out, "utf8")).toBe("precious");
    expect(runCli([fixturePath("safetensors", "mixed.safetensors"), out, "--force"]).status).toBe(0);
    expect(readFileSync(out).equals(readFileSync(fixturePath("safetensors", "mixed.safetensors")))).toBe(true);
  });

  it("leaves nothing behind when the input is refused", () => {
    const input = join(dir, "bad.safetensors");
    writeFileSync(input, safetensorsFile('{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}', 1));
    const run = runCli([input, join(dir, "out.safetensors")]);
    expect(run.status).toBe(1);
    expect(readdirSync(dir)).toEqual(["bad.safetensors"]);
  });

  it("rewrites a file in place with --force", () => {
    const path = join(dir, "same.safetensors");
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), path);
    expect(runCli([path, path, "--force"]).status).toBe(0);
    expect(readFileSync(path).equals(readFileSync(fixturePath("safetensors", "mixed.safetensors")))).toBe(true);
    expect(readdirSync(dir)).toEqual(["same.safetensors"]);
  });

  it("reads a file whose name says nothing, by its content, and --json reports what was done", () => {
    const input = join(dir, "weights.bin");
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), input);
    const run = runCli([input, join(dir, "out.safetensors"), "--json"]);
    expect(run.status).toBe(0);
    expect(JSON.parse(run.stdout)).toMatchObject({ ok: true, input: { format: "safetensors" }, output: { format: "safetensors" }, tensors: 8 });
    expect(existsSync(join(dir, "out.safetensors"))).toBe(true);
  });

  it("reports tensor bytes once even when the writer reads a tensor twice (JSON pre-scans floats)", () => {
    const total = manifest["mixed.safetensors"]!.tensors.reduce((n, t) => n + t.data_offsets[1] - t.data_offsets[0], 0);
    for (const out of ["o.safetensors", "o.json"]) {
      const run = runCli([fixturePath("safetensors", "mixed.safetensors"), join(dir, out), "--json"]);
      expect(JSON.parse(run.stdout)).toMatchObject({ bytes: total });
    }
  });

  it("a missing output directory is exit 1 naming the output", () => {
    const out = join(dir, "no", "such", "dir.safetensors");
    const run = runCli([fixturePath("safetensors", "mixed.safetensors"), out]);
    expect(run.status).toBe(1);
    expect(run.stderr).toContain(out);
  });
});
