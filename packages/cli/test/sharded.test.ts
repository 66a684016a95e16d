/**
 * The command on a sharded checkpoint (huggingface_hub's own, fixtures/sharded/hub): the index
 * given as the input merges the shards; folder walks take the shards one by one.
 */
import { execFileSync } from "node:child_process";
import { cpSync, existsSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readNpz } from "@st-convert/npy";
import { expectOneLineRefusal, fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const index = fixturePath("sharded", "hub", "model.safetensors.index.json");
const manifest = JSON.parse(readFileSync(fixturePath("sharded", "manifest.json"), "utf8")) as {
  shards: string[];
  tensors: { name: string; dtype: string; shape: number[] }[];
};

describe("a sharded checkpoint, through its index", () => {
  it("converts to one safetensors file, byte for byte what safetensors writes for the merged tensors", () => {
    const out = join(dir, "model.safetensors");
    const run = runCli([index, out, "--quiet"]);
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(readFileSync(out).equals(readFileSync(fixturePath("sharded", "merged.safetensors")))).toBe(true);
  });

  it("converts to .npz in the index's order", async () => {
    const out = join(dir, "model.npz");
    const run = runCli([index, out, "--quiet"]);
    expect(run.status).toBe(0);
    const npz = await readNpz(readFileSync(out));
    expect(npz.tensors.map((t) => [t.name, t.dtype, [...t.shape]])).toEqual(manifest.tensors.map((t) => [t.name, t.dtype, t.shape]));
  });

  it("is listed by info", () => {
    const run = runCli(["info", index, "--json"]);
    expect(run.status).toBe(0);
    const report = JSON.parse(run.stdout) as { input: { format: string }; metadata: unknown; tensors: { name: string; dtype: string; shape: number[] }[] };
    expect(report.input.format).toBe("safetensors-index");
    expect(report.metadata).toEqual({ format: "pt" });
    expect(report.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape }))).toEqual(
      manifest.tensors.map(({ name, dtype, shape }) => ({ name, dtype, shape })),
    );
  });

  it("names a missing shard in one line, exits 1 and leaves no output", () => {
    const copy = join(dir, "ckpt");
    cpSync(fixturePath("sharded", "hub"), copy, { recursive: true });
    const missing = manifest.shards[1]!;
    rmSync(join(copy, missing));
    const out = join(dir, "model.safetensors");
    const run = runCli([join(copy, "model.safetensors.index.json"), out]);
    expect(run.status).toBe(1);
    expect(run.stderr.trim().split("\n")).toHaveLength(1);
    expect(run.stderr).toContain(`${join(copy, missing)}: cannot open for reading: no such file or directory [Io]`);
    expect(existsSync(out)).toBe(false);
    expect(readdirSync(dir).sort()).toEqual(["ckpt"]);
  });

  it("is written when named as the output: shards at huggingface_hub's 5GB default (one file here, so no index)", () => {
    const out = join(dir, "model.safetensors.index.json");
    const run = runCli([fixturePath("sharded", "merged.safetensors"), out]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(dir)).toEqual(["model.safetensors"]);
    expect(readFileSync(join(dir, "model.safetensors")).equals(readFileSync(fixturePath("sharded", "merged.safetensors")))).toBe(true);
  });

  it("is left out of folder walks, whose batch converts each shard on its own", () => {
    const out = join(dir, "out");
    const run = runCli([fixturePath("sharded", "hub"), "--out-dir", out, "--to", "npz", "--quiet"]);
    expect(run.status).toBe(0);
    expect(readdirSync(out).sort()).toEqual(manifest.shards.map((s) => s.replace(/\.safetensors$/, ".npz")).sort());
  });

  // No timing involved: a FIFO is refused by its type before anything opens it for reading, so
  // the commands end; today's code opened it and waited for a writer forever.
  it.skipIf(process.platform === "win32")("refuses a shard that is a FIFO, in info, a conversion and the folder form, without opening it", () => {
    const copy = join(dir, "ckpt");
    cpSync(fixturePath("sharded", "hub"), copy, { recursive: true });
    const shard = join(copy, manifest.shards[1]!);
    rmSync(shard);
    execFileSync("mkfifo", [shard]);
    const indexCopy = join(copy, "model.safetensors.index.json");
    const rule = `${shard}: is a FIFO, not a regular file; an index's shards must be regular files [Io]`;
    expect(expectOneLineRefusal(["info", indexCopy], "Io")).toContain(rule);
    expect(expectOneLineRefusal([indexCopy, join(dir, "model.safetensors")], "Io")).toContain(rule);
    expect(readdirSync(dir)).toEqual(["ckpt"]);
    const out = join(dir, "out");
    expect(expectOneLineRefusal([copy, out, "--to", "torch"], "Io")).toContain(rule);
    expect(existsSync(out) ? readdirSync(out) : []).toEqual([]);
  });
});
