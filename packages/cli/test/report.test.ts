/**
 * `--json`: every command prints one object on one line, valid against the package's
 * report.schema.json, whether it succeeded or failed.
 */
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv2020 } from "ajv/dist/2020.js";
import { afterAll, describe, expect, it } from "vitest";
import { CLI_PATH, fixturePath, makeTempDir, runCli, safetensorsFile, servedBytes, startRangeServer } from "@st-convert/testing";
import { main } from "st-convert";

const schema = JSON.parse(readFileSync(new URL("../report.schema.json", import.meta.url), "utf8")) as object;
const validate = new Ajv2020({ allErrors: true, strict: true, strictRequired: false }).compile(schema);

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);
const mixed = fixturePath("safetensors", "mixed.safetensors");
const broken = join(dir, "broken.safetensors");
writeFileSync(broken, safetensorsFile('{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}', 4));
const tree = join(dir, "tree");
mkdirSync(tree);
writeFileSync(join(tree, "a.safetensors"), readFileSync(mixed));
writeFileSync(join(tree, "b.safetensors"), readFileSync(broken));

/** The one line a command printed on `stream`, parsed and checked against the schema. */
function reportOf(text: string): Record<string, unknown> {
  expect(text.endsWith("\n")).toBe(true);
  expect(text.slice(0, -1)).not.toContain("\n");
  const report = JSON.parse(text) as Record<string, unknown>;
  const valid = validate(report);
  expect(valid, JSON.stringify(validate.errors, null, 2)).toBe(true);
  return report;
}

describe("the --json report", () => {
  it.each([
    [
      "convert",
      [mixed, join(dir, "ok.npz")],
      0,
      { command: "convert", ok: true, input: { file: mixed, format: "safetensors" }, output: { format: "npz" }, tensors: 8 },
    ],
    [
      "convert, refused input",
      [broken, join(dir, "no.npz")],
      1,
      { command: "convert", ok: false, error: { code: "TensorInvalidInfo", file: broken, tensor: "w" } },
    ],
    ["convert, existing output", [mixed, join(dir, "ok.npz")], 1, { command: "convert", ok: false, error: { code: "OutputExists" } }],
    ["convert, usage error", [mixed], 2, { command: "convert", ok: false, error: { code: "Usage" } }],
    [
      "convert, with a warning",
      [mixed, join(dir, "one.npy"), "--filter", "^lm_head"],
      0,
      { ok: true, warnings: [{ file: join(dir, "one.npy") }, { file: join(dir, "one.npy") }] },
    ],
    ["info", ["info", mixed], 0, { command: "info", ok: true, input: { format: "safetensors" }, metadata: { format: "pt" }, totals: { tensors: 8 } }],
    ["info, refused", ["info", broken], 1, { command: "info", ok: false, error: { code: "TensorInvalidInfo" } }],
    ["info, missing file", ["info", join(dir, "missing")], 1, { command: "info", ok: false, error: { code: "Io" } }],
    ["batch", [tree, "--out-dir", join(dir, "out"), "--to", "npz"], 1, { command: "batch", ok: false, totals: { converted: 1, failed: 1 } }],
    [
      "batch, dry run",
      [tree, "--out-dir", join(dir, "out2"), "--to", "npz", "--dry-run"],
      0,
      { command: "batch", ok: true, dryRun: true, totals: { planned: 2 } },
    ],
    ["batch, usage error", [tree, "--out-dir", join(dir, "out3")], 2, { command: "batch", ok: false, error: { code: "Usage" } }],
    ["hash", ["hash", mixed], 0, { command: "hash", ok: true, input: { format: "safetensors" }, totals: { tensors: 8 } }],
    ["hash, refused", ["hash", broken], 1, { command: "hash", ok: false, digest: null, error: { code: "TensorInvalidInfo" } }],
    ["stats", ["stats", mixed], 0, { command: "stats", ok: true, input: { format: "safetensors" } }],
    ["stats, usage error", ["stats"], 2, { command: "stats", ok: false, error: { code: "Usage" } }],
    ["info, tree", ["info", mixed, "--tree"], 0, { command: "info", ok: true, tree: { tensors: 8, params: 373, bytes: 860 } }],
    ["convert, verified", [mixed, join(dir, "verified.npz"), "--verify"], 0, { command: "convert", ok: true, digest: expect.stringMatching(/^[0-9a-f]{64}$/) }],
    [
      "batch, with a manifest",
      [tree, "--out-dir", join(dir, "out4"), "--to", "npz", "--manifest", join(dir, "manifest.jsonl")],
      1,
      { command: "batch", ok: false, files: expect.arrayContaining([expect.objectContaining({ status: "converted", digest: expect.any(String) })]) },
    ],
    ["diff, same", ["diff", mixed, mixed], 0, { command: "diff", ok: true, same: true, totals: { same: 8 } }],
    ["diff, different", ["diff", mixed, broken], 1, { command: "diff", ok: false, same: null, error: { code: "TensorInvalidInfo" } }],
    ["diff, tolerances", ["diff", mixed, mixed, "--atol", "0.1"], 0, { command: "diff", ok: true, tolerance: { atol: 0.1, rtol: 0 } }],
  ] as const)("%s: one valid line on stdout", (_name, args, status, expected) => {
    const run = runCli([...args, "--json"]);
    expect(run.status, run.stderr).toBe(status);
    expect(reportOf(run.stdout)).toMatchObject(expected);
  });

  it("info lists each tensor's byte length and the totals the table shows", () => {
    const report = reportOf(runCli(["info", mixed, "--json"]).stdout) as { tensors: { bytes: number }[]; totals: { bytes: number; parameters: number } };
    const table = runCli(["info", mixed]).stdout;
    expect(report.totals.bytes).toBe(report.tensors.reduce((n, t) => n + t.bytes, 0));
    expect(table).toContain(`(${report.totals.bytes.toLocaleString("en-US")} bytes)`);
    expect(table).toContain(`${report.totals.parameters.toLocaleString("en-US")} parameters`);
  });

  it("goes to stderr when stdout carries the converted data", () => {
    const run = spawnSync(process.execPath, [CLI_PATH, mixed, "-", "--to", "safetensors", "--json"], { encoding: "buffer" });
    expect(run.status).toBe(0);
    expect(Buffer.compare(run.stdout, readFileSync(mixed))).toBe(0);
    expect(reportOf(run.stderr.toString())).toMatchObject({ ok: true, output: { file: "<stdout>", format: "safetensors" } });
  });

  it("counts the bytes fetched for a URL input (fetched), and has no such field for a local one", async () => {
    // In this process (main(), not a child): the server this test starts must answer while the command runs.
    const server = await startRangeServer();
    try {
      server.files.set("/mixed.safetensors", servedBytes(readFileSync(mixed)));
      const runs: Record<string, unknown>[] = [];
      for (const args of [
        ["info", server.url("/mixed.safetensors")],
        [server.url("/mixed.safetensors"), join(dir, "from-url.npz")],
      ]) {
        server.reset();
        let stdout = "";
        const status = await main([...args, "--json"], { stdout: (text) => (stdout += text), stderr: () => {} });
        expect(status).toBe(0);
        runs.push(reportOf(stdout));
        expect(runs.at(-1)!.fetched).toBe(server.bytesServed());
      }
      expect(runs.map((r) => r.command)).toEqual(["info", "convert"]);
      expect(reportOf(runCli(["info", mixed, "--json"]).stdout)).not.toHaveProperty("fetched");
    } finally {
      await server.close();
    }
  });

  it("the schema rejects what is not a report (the validator is not a no-op)", () => {
    expect(validate({ version: 1, command: "convert", ok: false, warnings: [], input: null, output: null, files: [], tensors: 0, bytes: 0 })).toBe(false);
    expect(validate({ version: 2, command: "info", ok: true, warnings: [] })).toBe(false);
    const info = reportOf(runCli(["info", mixed, "--json"]).stdout);
    expect(validate({ ...info, fetched: -1 })).toBe(false);
  });
});
