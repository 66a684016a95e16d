import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { readSafetensors, readTensorBytes } from "@st-convert/core";
import { fixturePath, makeTempDir, runCli } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const mixed = fixturePath("safetensors", "mixed.safetensors");
const infoOf = (path: string) =>
  JSON.parse(runCli(["info", path, "--json"]).stdout) as { metadata: Record<string, string> | null; tensors: { name: string }[] };

describe("--metadata, --rename, --filter, --exclude", () => {
  it("adds and overrides metadata entries", () => {
    const out = join(dir, "o.safetensors");
    expect(runCli([mixed, out, "--metadata", "format=flax", "--metadata", "note=a=b", "--metadata", "empty="]).status).toBe(0);
    expect(infoOf(out).metadata).toEqual({ format: "flax", note: "a=b", empty: "" });
  });

  it("renames with a regular expression and keeps the bytes", async () => {
    const out = join(dir, "o.safetensors");
    expect(runCli([mixed, out, "--rename", "^model\\.=", "--rename", "layers\\.(\\d+)=h.$1"]).status).toBe(0);
    const names = infoOf(out)
      .tensors.map((t) => t.name)
      .sort();
    expect(names).toEqual([
      "embed_tokens.weight",
      "h.0.mlp.gate.weight",
      "h.0.self_attn.q_proj.bias",
      "h.0.self_attn.q_proj.weight",
      "lm_head.weight",
      "mask",
      "norm.weight",
      "step",
    ]);
    const before = await readSafetensors(readFileSync(mixed));
    const after = await readSafetensors(readFileSync(out));
    expect(await readTensorBytes(after.tensor("h.0.self_attn.q_proj.weight"))).toEqual(
      await readTensorBytes(before.tensor("model.layers.0.self_attn.q_proj.weight")),
    );
  });

  it("keeps only matching tensors with --filter, drops with --exclude", () => {
    const out = join(dir, "o.safetensors");
    expect(runCli([mixed, out, "--filter", "weight$", "--exclude", "^lm_head"]).status).toBe(0);
    expect(
      infoOf(out)
        .tensors.map((t) => t.name)
        .sort(),
    ).toEqual(["model.embed_tokens.weight", "model.layers.0.mlp.gate.weight", "model.layers.0.self_attn.q_proj.weight", "model.norm.weight"]);
  });

  it("applies to info too", () => {
    const run = runCli(["info", mixed, "--filter", "^step$", "--json"]);
    expect(JSON.parse(run.stdout).tensors).toEqual([{ name: "step", dtype: "I64", shape: [], bytes: 8 }]);
  });

  it("refuses a rename that merges two tensors, with exit 1 and both names", () => {
    const run = runCli([mixed, join(dir, "o.safetensors"), "--rename", "weight|bias=x"]);
    expect(run.status).toBe(1);
    expect(run.stderr).toMatch(/--rename maps both ".*" and ".*" to ".*x"/);
  });

  it("refuses malformed options as usage errors", () => {
    expect(runCli([mixed, join(dir, "o.safetensors"), "--metadata", "novalue"]).status).toBe(2);
    expect(runCli([mixed, join(dir, "o.safetensors"), "--rename", "noequals"]).status).toBe(2);
    expect(runCli([mixed, join(dir, "o.safetensors"), "--filter", "("]).status).toBe(2);
  });
});
