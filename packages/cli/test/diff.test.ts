/**
 * `diff()` and `st-convert diff` on files built byte by byte here: exit statuses, the per-tensor
 * report, the tolerance rule's edge cases (NaN, infinities, −0), metadata, refusals.
 */
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli, safetensorsFile, servedBytes, startRangeServer } from "@st-convert/testing";
import { diff, hash } from "st-convert";

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);

/** A safetensors file of F32 tensors (in name order) and metadata. */
function f32File(name: string, tensors: Record<string, number[]>, metadata?: Record<string, string>): string {
  const header: Record<string, unknown> = metadata === undefined ? {} : { __metadata__: metadata };
  const parts: Uint8Array[] = [];
  let at = 0;
  for (const [key, values] of Object.entries(tensors)) {
    const bytes = new Uint8Array(new Float32Array(values).buffer);
    header[key] = { dtype: "F32", shape: [2, values.length / 2], data_offsets: [at, at + bytes.byteLength] };
    parts.push(bytes);
    at += bytes.byteLength;
  }
  const path = join(dir, name);
  writeFileSync(path, safetensorsFile(JSON.stringify(header), Buffer.concat(parts)));
  return path;
}

const nan = Number.NaN;
const inf = Number.POSITIVE_INFINITY;
const a = f32File("a.safetensors", { w: [1, 2, 3, 4], n: [nan, inf, -inf, 0], only_a: [0, 0] }, { format: "pt" });
const b = f32File("b.safetensors", { w: [1, 2.5, 3, 4.001], n: [nan, inf, -inf, -0], only_b: [1, 1] }, { format: "np" });

describe("diff", () => {
  it("exactly: reports each tensor, the differing count, the largest differences and the first index", async () => {
    const result = await diff(a, b);
    expect(result.same).toBe(false);
    expect(result.tensors.map((t) => [t.name, t.status])).toEqual([
      ["n", "values"], // 0 against −0: the bytes differ
      ["only_a", "onlyInA"],
      ["only_b", "onlyInB"],
      ["w", "values"],
    ]);
    const w = result.tensors[3]!;
    expect(w.differing).toBe(2);
    expect(w.firstIndex).toEqual([0, 1]);
    expect(w.maxAbsDiff).toBeCloseTo(0.5, 6);
    expect(w.maxRelDiff).toBeCloseTo(0.2, 6);
    expect(result.tensors[0]).toMatchObject({ differing: 1, maxAbsDiff: 0, maxRelDiff: 0, firstIndex: [1, 1] });
    expect(result.metadata).toEqual({ onlyInA: [], onlyInB: [], differ: ["format"] });
  });

  it("with tolerances: NaN equals NaN, infinities equal themselves, −0 equals 0, |a − b| ≤ atol + rtol·|b|", async () => {
    const options = { exclude: ["^only"] };
    expect((await diff(a, b, { ...options, atol: 0.5 })).same).toBe(true);
    expect((await diff(a, b, { ...options, atol: 0.49, rtol: 0.004 })).same).toBe(true); // 0.49 + 0.004 · 2.5 = 0.5
    const tight = await diff(a, b, { ...options, atol: 0.49, rtol: 0.003 });
    expect(tight.tensors.find((t) => t.name === "w")).toMatchObject({ status: "values", differing: 1, firstIndex: [0, 1] });
    const infinite = f32File("inf.safetensors", { n: [nan, -inf, -inf, 0], w: [1, 2.5, 3, 4.001] });
    expect((await diff(a, infinite, { ...options, atol: 1e300 })).tensors.find((t) => t.name === "n")).toMatchObject({ status: "values", differing: 1 });
  });

  it("exits 0 when the same, 1 when not, 2 on a usage error; metadata counts with --metadata", () => {
    const mixed = fixturePath("safetensors", "mixed.safetensors");
    expect(runCli(["diff", mixed, mixed]).status).toBe(0);
    const copy = f32File("c.safetensors", { w: [1, 2, 3, 4] }, { format: "pt" });
    const other = f32File("d.safetensors", { w: [1, 2, 3, 4] }, { format: "np" });
    const lenient = runCli(["diff", copy, other]);
    expect(lenient.status).toBe(0);
    expect(lenient.stdout).toContain('metadata "format": values differ');
    expect(runCli(["diff", copy, other, "--metadata"]).status).toBe(1);
    const differing = runCli(["diff", a, b]);
    expect(differing.status).toBe(1);
    expect(differing.stdout).toMatch(/^! w: 2 elements differ, max abs diff 0\.5, max rel diff 0\.2, first at \[0, 1\]$/m);
    expect(runCli(["diff", a]).status).toBe(2);
    expect(runCli(["diff", a, b, "--atol", "x"]).status).toBe(2);
    expect(runCli(["diff", a, b, "--rtol", "-1"]).status).toBe(2);
  });

  it("reports an unreadable input in the JSON report (ok: false) and exits 1", () => {
    const broken = join(dir, "broken.safetensors");
    writeFileSync(broken, safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', 8));
    const run = runCli(["diff", a, broken, "--json"]);
    expect(run.status).toBe(1);
    expect(JSON.parse(run.stdout)).toMatchObject({ command: "diff", ok: false, same: null, error: { file: broken } });
  });

  it("dtypes differ: a difference when exact, compared as values with tolerances", async () => {
    const f64 = join(dir, "w64.safetensors");
    const values = new Float64Array([1, 2, 3, 4]);
    writeFileSync(f64, safetensorsFile(JSON.stringify({ w: { dtype: "F64", shape: [2, 2], data_offsets: [0, 32] } }), new Uint8Array(values.buffer)));
    const f32 = f32File("w32.safetensors", { w: [1, 2, 3, 4] });
    expect((await diff(f32, f64)).tensors[0]).toMatchObject({ status: "dtype", dtype: { a: "F32", b: "F64" }, differing: null });
    expect((await diff(f32, f64, { atol: 0 })).tensors[0]).toMatchObject({ status: "same", differing: 0 });
  });
});

it("reads URLs as any input: a served file hashes and compares like the local one", async () => {
  const server = await startRangeServer();
  try {
    server.files.set("/a.safetensors", servedBytes(readFileSync(a)));
    const url = server.url("/a.safetensors");
    expect((await diff(url, a)).same).toBe(true);
    expect((await diff(url, b)).same).toBe(false);
    expect((await hash(url)).digest).toBe((await hash(a)).digest);
  } finally {
    await server.close();
  }
});

it("reads a sharded checkpoint through its index, and its merged copy compares the same", async () => {
  const index = fixturePath("sharded", "hub", "model.safetensors.index.json");
  const merged = join(dir, "merged.npz");
  expect(runCli([index, merged]).status).toBe(0);
  const found = await diff(index, merged);
  expect(found.same).toBe(true);
  expect(found.a.format).toBe("safetensors-index");
  expect((await hash(index)).digest).toBe((await hash(merged)).digest);
});
