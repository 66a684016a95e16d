/**
 * The st-convert command with distributed checkpoints: a folder torch saved from several ranks →
 * one safetensors file holding dcp_to_torch_save's bytes (given as the folder or its .metadata),
 * info, the selection, renames, casts and shards on the way; a safetensors file → a DCP folder
 * that reads back, which is never written over without --force; refusals as exit 1 with one line.
 */
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes } from "@st-convert/core";
import { fixturePath, makeTempDir, runCli, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

interface Item {
  name: string;
  dtype?: string;
  shape?: number[];
  hex?: string;
  value?: string;
}
const manifest = JSON.parse(readFileSync(fixturePath("dcp", "manifest.json"), "utf8")) as Record<string, { items: Item[] }>;
const ranks2 = fixturePath("dcp", "ranks2");

async function tensorsOf(path: string): Promise<Map<string, { dtype: string; shape: number[]; hex: string }>> {
  const file = await readSafetensors(readFileSync(path));
  const out = new Map<string, { dtype: string; shape: number[]; hex: string }>();
  for (const t of file.tensors) out.set(t.name, { dtype: t.dtype, shape: [...t.shape], hex: Buffer.from(await readTensorBytes(t)).toString("hex") });
  return out;
}

describe("st-convert with distributed checkpoints", () => {
  for (const input of ["ranks2", "ranks2/", "ranks2/.metadata", "ranks4"]) {
    it(`${input} → model.safetensors: every tensor is dcp_to_torch_save's, plain items in the metadata`, async () => {
      const name = input.split("/")[0]!;
      const out = join(dir, "model.safetensors");
      const run = runCli([fixturePath("dcp", ...input.split("/")).concat(input.endsWith("/") ? "/" : ""), out]);
      expect(run.status, run.stderr).toBe(0);
      const tensors = await tensorsOf(out);
      const expected = manifest[name]!.items.filter((i) => i.hex !== undefined);
      expect([...tensors.keys()].sort()).toEqual(expected.map((i) => i.name).sort());
      for (const item of expected) expect(tensors.get(item.name), item.name).toEqual({ dtype: item.dtype, shape: item.shape, hex: item.hex });
      const metadata = (await readSafetensors(readFileSync(out))).metadata ?? {};
      if (name === "ranks2") expect(metadata).toMatchObject({ step: "7", "run.name": "fixture-run", "run.loss": "1.25", "optim.param_groups.0.lr": "0.001" });
    });
  }

  it("info lists the tensors and names the items skipped", () => {
    const run = runCli(["info", ranks2, "--json"]);
    expect(run.status, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout) as { input: { format: string }; tensors: { name: string }[]; warnings: { message: string }[] };
    expect(report.tensors.map((t) => t.name)).toContain("optim.state.model.embed.weight.exp_avg");
    expect(report.warnings.map((w) => w.message).join("\n")).toMatch(/skipped "optim.param_groups.0.betas": a tuple/);
  });

  it("--filter, --rename and --cast apply, and sharded output splits the consolidated tensors", async () => {
    const out = join(dir, "model.safetensors");
    const run = runCli([ranks2, out, "--filter", "^model\\.", "--rename", "^model\\.=", "--cast", "F32=BF16"]);
    expect(run.status, run.stderr).toBe(0);
    const tensors = await tensorsOf(out);
    expect([...tensors.keys()].sort()).toEqual(["bias", "cube", "embed.weight", "mask", "norm.weight", "proj.weight", "scale", "uneven"]);
    expect(tensors.get("embed.weight")!.dtype).toBe("BF16");
    const shards = join(dir, "shards");
    const sharded = runCli([ranks2, join(shards, "/"), "--max-shard-size", "200"]);
    expect(sharded.status, sharded.stderr).toBe(0);
    expect(readdirSync(shards).filter((f) => f.endsWith(".safetensors")).length).toBeGreaterThan(2);
  });

  it("model.safetensors → ckpt_dir --to dcp: a folder that reads back; never written over without --force", async () => {
    const model = join(dir, "model.safetensors");
    expect(runCli([ranks2, model]).status).toBe(0);
    const ckpt = join(dir, "ckpt_dir");
    const run = runCli([model, ckpt, "--to", "dcp"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(ckpt).sort()).toEqual([".metadata", "__0_0.distcp"]);
    const back = join(dir, "back.safetensors");
    expect(runCli([ckpt, back]).status).toBe(0);
    expect(await tensorsOf(back)).toEqual(await tensorsOf(model));
    const before = readFileSync(join(ckpt, ".metadata"));
    oneLineRefusal([model, ckpt, "--to", "dcp"], "OutputExists");
    expect(readFileSync(join(ckpt, ".metadata"))).toEqual(before);
    expect(runCli([model, ckpt, "--to", "dcp", "--force", "--exclude", "mask"]).status).toBe(0);
    expect(readFileSync(join(ckpt, ".metadata"))).not.toEqual(before);
  });

  it("a batch --to dcp writes a folder per input, named after its stem; a model folder --to dcp is refused as a usage error", async () => {
    const model = join(dir, "model.safetensors");
    expect(runCli([ranks2, model]).status).toBe(0);
    const run = runCli([model, "--out-dir", join(dir, "batch"), "--to", "dcp"]);
    expect(run.status, run.stderr).toBe(0);
    expect(readdirSync(join(dir, "batch", "model")).sort()).toEqual([".metadata", "__0_0.distcp"]);
    const folder = join(dir, "models");
    mkdirSync(folder);
    copyFileSync(model, join(folder, "model.safetensors"));
    const refused = runCli([folder, join(dir, "out"), "--to", "dcp"]);
    expect(refused.status).toBe(2);
    expect(refused.stderr).toMatch(/convert one checkpoint at a time/);
  });

  it("a failed write leaves no folder behind", () => {
    const ckpt = join(dir, "never");
    // BOOL bytes other than 0 and 1 cannot be written as a torch tensor: refused before the folder appears.
    const bad = join(dir, "bad.safetensors");
    const header = Buffer.from(JSON.stringify({ b: { dtype: "BOOL", shape: [2], data_offsets: [0, 2] } }));
    const length = Buffer.alloc(8);
    length.writeBigUInt64LE(BigInt(header.byteLength));
    writeFileSync(bad, Buffer.concat([length, header, Buffer.from([1, 7])]));
    oneLineRefusal([bad, ckpt, "--to", "dcp"], "Unsupported");
    expect(existsSync(ckpt)).toBe(false);
  });

  it("a chunk missing from a rank file: one line, exit 1, nothing written", () => {
    const broken = join(dir, "broken");
    mkdirSync(broken);
    for (const f of readdirSync(ranks2)) copyFileSync(join(ranks2, f), join(broken, f));
    const rank1 = readFileSync(join(broken, "__1_0.distcp"));
    writeFileSync(join(broken, "__1_0.distcp"), rank1.subarray(0, rank1.byteLength - 100));
    const out = join(dir, "out.safetensors");
    const line = oneLineRefusal([broken, out], "StoragePastEnd");
    expect(line).toMatch(/tensor "/);
    expect(existsSync(out)).toBe(false);
  });
});
