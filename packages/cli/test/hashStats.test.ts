/**
 * `hash()` and `stats()` on files built byte by byte in the test, the expected values worked out
 * here from the bytes (node:crypto over the raw data; the statistics by hand).
 */
import { createHash } from "node:crypto";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { expectOneLineRefusal, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";
import { checkpointDigest, hash, stats } from "st-convert";

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);

const sha256 = (bytes: Uint8Array | string) => createHash("sha256").update(bytes).digest("hex");

function f32(values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}

// Two tensors out of name order; "é" sorts after "z" by code point.
const wBytes = f32([1, 2, 3, 4, Number.NaN, 0]);
const eBytes = new Uint8Array([0x80, 0x3f, 0x00, 0xc0, 0x80, 0x7f]); // BF16 1, -2, +Inf
const data = new Uint8Array([...wBytes, ...eBytes]);
const file = join(dir, "two.safetensors");
writeFileSync(
  file,
  safetensorsFile(
    JSON.stringify({
      é: { dtype: "BF16", shape: [3], data_offsets: [24, 30] },
      z: { dtype: "F32", shape: [2, 3], data_offsets: [0, 24] },
    }),
    data,
  ),
);

describe("hash", () => {
  it("hashes each tensor's bytes and the sorted lines of name, dtype, shape and digest", async () => {
    const result = await hash(file);
    expect(result.tensors.map((t) => [t.name, t.sha256])).toEqual([
      ["z", sha256(wBytes)],
      ["é", sha256(eBytes)],
    ]);
    expect(result.digest).toBe(sha256(`z\tF32\t[2,3]\t${sha256(wBytes)}\né\tBF16\t[3]\t${sha256(eBytes)}\n`));
    expect(checkpointDigest([...result.tensors].reverse())).toBe(result.digest);
    expect(result.bytes).toBe(30);
  });

  it("prints one line per tensor and the digest; --json has the same", () => {
    const text = runCli(["hash", file]);
    expect(text.status, text.stderr).toBe(0);
    expect(text.stdout.split("\n")[0]).toBe(`${sha256(wBytes)}  z`);
    const json = JSON.parse(runCli(["hash", file, "--json"]).stdout) as { digest: string };
    expect(text.stdout).toContain(`${json.digest}  ${file} (checkpoint digest)`);
  });

  it("refuses a truncated file in one line naming it", () => {
    const broken = join(dir, "broken.safetensors");
    writeFileSync(broken, safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', 8));
    expect(expectOneLineRefusal(["hash", broken], "MetadataIncompleteBuffer")).toContain(broken);
    expect(runCli(["hash"]).status).toBe(2);
  });
});

describe("stats", () => {
  it("computes min, max, mean, population std over the non-NaN values, and the counts", async () => {
    const [z, e] = (await stats(file)).tensors;
    // 1, 2, 3, 4, 0: mean 2, variance (1 + 0 + 1 + 4 + 4) / 5 = 2.
    expect(z).toEqual({ name: "z", dtype: "F32", shape: [2, 3], count: 5, min: 0, max: 4, mean: 2, std: Math.sqrt(2), nan: 1, posinf: 0, neginf: 0, zeros: 1 });
    expect(e).toMatchObject({ min: -2, max: Number.POSITIVE_INFINITY, mean: Number.POSITIVE_INFINITY, nan: 0, posinf: 1, zeros: 0 });
    expect(e!.std).toBeNaN();
  });

  it("spells NaN and infinities as strings in --json, and prints a table", () => {
    const run = runCli(["stats", file, "--json"]);
    const report = JSON.parse(run.stdout) as { tensors: Record<string, unknown>[] };
    expect(report.tensors[1]).toMatchObject({ max: "Infinity", mean: "Infinity", std: "NaN" });
    const table = runCli(["stats", file]).stdout;
    expect(table).toMatch(/^z +F32 +\[2, 3\] +0 +4 +2 +1\.414214 +1 +0 +0 +1$/m);
  });

  it("keeps mean and std accurate far from zero (a naive sum of squares would lose them)", async () => {
    const n = 100_000;
    const values = new Float64Array(n);
    for (let i = 0; i < n; i++) values[i] = 1e8 + (i % 2 === 0 ? 1 : -1);
    const path = join(dir, "far.safetensors");
    writeFileSync(path, safetensorsFile(JSON.stringify({ x: { dtype: "F64", shape: [n], data_offsets: [0, 8 * n] } }), new Uint8Array(values.buffer)));
    const [x] = (await stats(path)).tensors;
    expect(x!.mean).toBe(1e8);
    expect(Math.abs(x!.std! - 1)).toBeLessThan(1e-9);
  });
});
