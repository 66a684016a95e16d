/**
 * Batches over many machines: `--shard K/N` (the parts together are the batch, once),
 * `--skip-existing` (a re-run after a crash finishes only what is missing, never trusting a
 * half-written output) and `--manifest` (one JSON line per input, with the checkpoint digest).
 */
import { copyFileSync, mkdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface ManifestLine {
  input: string;
  output: string | null;
  status: string;
  tensors: number | null;
  bytes: number | null;
  digest: string | null;
}

/** `count` one-tensor safetensors files in `in/`, each with different bytes; returns the folder. */
function inputs(count: number, size = 64): string {
  const folder = join(dir, "in");
  mkdirSync(folder, { recursive: true });
  for (let i = 0; i < count; i++) {
    const data = new Uint8Array(size * 4).map((_, k) => (i * 31 + k) & 0xff);
    writeFileSync(
      join(folder, `m${String(i).padStart(3, "0")}.safetensors`),
      safetensorsFile(JSON.stringify({ w: { dtype: "F32", shape: [size], data_offsets: [0, size * 4] } }), data),
    );
  }
  return folder;
}

/** A manifest's lines, sorted by input (they are appended as jobs finish, in any order). */
function manifest(path: string): ManifestLine[] {
  return readFileSync(path, "utf8")
    .trimEnd()
    .split("\n")
    .map((line) => JSON.parse(line) as ManifestLine)
    .sort((a, b) => (a.input < b.input ? -1 : a.input > b.input ? 1 : 0));
}

function digestOf(file: string): string {
  const run = runCli(["hash", file, "--json"]);
  expect(run.status, run.stderr).toBe(0);
  return (JSON.parse(run.stdout) as { digest: string }).digest;
}

describe("--shard K/N", () => {
  it("N runs with K = 1..N convert every input exactly once, in disjoint parts of sorted consecutive inputs", () => {
    const folder = inputs(10);
    const parts: ManifestLine[][] = [];
    for (let k = 1; k <= 3; k++) {
      const run = runCli([folder, "--out-dir", join(dir, "out"), "--to", "npz", "--shard", `${k}/3`, "--manifest", join(dir, `part${k}.jsonl`)]);
      expect(run.status, run.stderr).toBe(0);
      parts.push(manifest(join(dir, `part${k}.jsonl`)));
    }
    expect(parts.map((p) => p.length)).toEqual([3, 3, 4]);
    // Consecutive runs of the sorted inputs: every input of part 1 sorts before every one of part 2.
    const inputsDone = parts.flat().map((line) => line.input);
    expect(inputsDone).toEqual([...inputsDone].sort());
    expect(new Set(inputsDone).size).toBe(10);
    for (const line of parts.flat()) {
      expect(line.status).toBe("converted");
      expect(line.digest).toBe(digestOf(line.input));
      expect(digestOf(line.output!)).toBe(line.digest);
    }
  });

  it("more parts than inputs leaves some parts empty; a wrong K/N is a usage error", () => {
    const folder = inputs(2);
    const done = [1, 2, 3].map((k) => runCli([folder, "--out-dir", join(dir, "out"), "--to", "npz", "--shard", `${k}/3`, "--json"]));
    expect(done.map((r) => (JSON.parse(r.stdout) as { totals: { converted: number } }).totals.converted)).toEqual([0, 1, 1]);
    for (const bad of ["0/3", "4/3", "1/0", "x", "1/2/3"])
      expect(runCli([folder, "--out-dir", join(dir, "o"), "--to", "npz", "--shard", bad]).status, bad).toBe(2);
  });
  it("a file st-convert does not convert (a TorchScript .pt) is reported skipped by one part only", () => {
    const folder = inputs(4);
    copyFileSync(fixturePath("foreign", "torchscript.pt"), join(folder, "m001b.pt"));
    const skipped = [1, 2, 3].map((k) => {
      const run = runCli([folder, "--out-dir", join(dir, "out"), "--to", "npz", "--shard", `${k}/3`, "--json"]);
      expect(run.status, run.stderr).toBe(0);
      return (JSON.parse(run.stdout) as { files: { input: { file: string }; status: string }[] }).files
        .filter((f) => f.status === "skipped")
        .map((f) => f.input.file);
    });
    expect(skipped.flat()).toEqual([join(folder, "m001b.pt")]);
  });
});

describe("--skip-existing", () => {
  it("skips outputs that read back whole and converts again over a half-written one", () => {
    const folder = inputs(4, 100_000);
    const out = join(dir, "out");
    expect(runCli([folder, "--out-dir", out, "--to", "safetensors"]).status).toBe(0);
    // A node pre-empted mid-write by a tool that writes in place: one output cut short, one missing.
    truncateSync(join(out, "m001.safetensors"), 5000);
    rmSync(join(out, "m002.safetensors"));
    const run = runCli([folder, "--out-dir", out, "--to", "safetensors", "--skip-existing", "--manifest", join(dir, "m.jsonl"), "--json"]);
    expect(run.status, run.stderr).toBe(0);
    const lines = manifest(join(dir, "m.jsonl"));
    expect(lines.map((l) => [l.input.slice(-16), l.status])).toEqual([
      ["m000.safetensors", "skipped"],
      ["m001.safetensors", "converted"],
      ["m002.safetensors", "converted"],
      ["m003.safetensors", "skipped"],
    ]);
    for (const line of lines) {
      expect(line).toMatchObject({ tensors: 1, bytes: 400_000 });
      expect(line.digest).toBe(digestOf(line.input));
    }
    const report = JSON.parse(run.stdout) as { warnings: { file: string; message: string }[]; totals: { skipped: number; converted: number } };
    expect(report.totals).toMatchObject({ skipped: 2, converted: 2 });
    expect(report.warnings).toEqual([{ file: join(out, "m001.safetensors"), message: expect.stringContaining("does not read back whole") }]);
    // Without --skip-existing, existing outputs are skipped unread, as before.
    const plain = runCli([folder, "--out-dir", out, "--to", "safetensors", "--manifest", join(dir, "plain.jsonl")]);
    expect(plain.status).toBe(0);
    expect(manifest(join(dir, "plain.jsonl")).map((l) => [l.status, l.digest])).toEqual(Array(4).fill(["skipped", null]));
  });
});

describe("--manifest", () => {
  it("has one line per input with worker threads too, failures included", () => {
    const folder = inputs(140, 4);
    writeFileSync(join(folder, "m999.safetensors"), safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}', 8));
    const run = runCli([folder, "--out-dir", join(dir, "out"), "--to", "npz", "--jobs", "2", "--manifest", join(dir, "m.jsonl")]);
    expect(run.status).toBe(1);
    const lines = manifest(join(dir, "m.jsonl"));
    expect(lines).toHaveLength(141);
    expect(lines.filter((l) => l.status === "converted" && /^[0-9a-f]{64}$/.test(l.digest ?? ""))).toHaveLength(140);
    expect(lines.find((l) => l.status === "failed")).toMatchObject({ input: join(folder, "m999.safetensors"), digest: null });
  });
});

describe("--verify in a batch", () => {
  it("reads every output back; each file of the report carries the digest hash gives", () => {
    const folder = inputs(3);
    const run = runCli([folder, "--out-dir", join(dir, "out"), "--to", "npz", "--verify", "--json"]);
    expect(run.status, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout) as { files: { input: { file: string }; output: { file: string }; digest?: string }[] };
    expect(report.files).toHaveLength(3);
    for (const item of report.files) {
      expect(item.digest).toBe(digestOf(item.input.file));
      expect(digestOf(item.output.file)).toBe(item.digest);
    }
  });
});
