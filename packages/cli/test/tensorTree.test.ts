/** `info --tree`: names grouped by dotted prefixes, repeated numbered groups folded. */
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";
import { type TensorTreeNode, tensorTree } from "@st-convert/core";

const { dir, cleanup } = makeTempDir();
afterAll(cleanup);

type T = { name: string; dtype: string; shape: number[]; byteLength: number };
const bf16 = (name: string, shape: number[]): T => ({ name, dtype: "BF16", shape, byteLength: 2 * shape.reduce((a, b) => a * b, 1) });

function layers(count: number, width = 8): T[] {
  return Array.from({ length: count }, (_, i) => [
    bf16(`model.layers.${i}.attn.q.weight`, [width, width]),
    bf16(`model.layers.${i}.mlp.weight`, [width, 2 * width]),
  ]).flat();
}

/** name → [tensors, params, bytes, repeat] over the tree, depth first. */
function flat(node: TensorTreeNode, out: string[] = [], depth = 0): string[] {
  for (const c of node.children) {
    out.push(`${"  ".repeat(depth)}${c.name} ${c.tensors} ${c.params} ${c.bytes}${c.repeat === undefined ? "" : ` x${c.repeat}`}`);
    flat(c, out, depth + 1);
  }
  return out;
}

describe("tensorTree", () => {
  it("folds a run of numbered groups holding the same tensors, joining single-group chains", () => {
    expect(flat(tensorTree([...layers(32), bf16("lm_head.weight", [4, 8])]))).toEqual([
      "lm_head.weight 1 32 64",
      "model.layers.{0..31} 64 6144 12288 x32",
      "  attn.q.weight 1 64 128",
      "  mlp.weight 1 128 256",
    ]);
  });

  it("does not fold groups whose shapes or names differ, or numbers that do not follow", () => {
    const tensors = [...layers(2), ...layers(3).slice(4), bf16("model.layers.3.attn.q.weight", [9, 9]), bf16("model.layers.3.mlp.weight", [8, 16])];
    tensors.push(bf16("model.layers.5.attn.q.weight", [8, 8]), bf16("model.layers.5.mlp.weight", [8, 16]));
    expect(flat(tensorTree(tensors)).filter((l) => !l.startsWith("    "))).toEqual([
      "model.layers 10 977 1954",
      "  {0..2} 6 576 1152 x3",
      "  3 2 209 418",
      "  5 2 192 384",
    ]);
  });

  it("keeps a tensor whose name is also a group's prefix", () => {
    const tree = tensorTree([bf16("a", [2]), bf16("a.b", [3])]);
    expect(tree.children[0]).toMatchObject({ name: "a", dtype: "BF16", shape: [2], tensors: 2, children: [{ name: "b", shape: [3] }] });
  });
});

it("info --tree prints the groups, and --json has the tree", () => {
  const header: Record<string, unknown> = {};
  let at = 0;
  for (const t of layers(4)) {
    header[t.name] = { dtype: t.dtype, shape: t.shape, data_offsets: [at, at + t.byteLength] };
    at += t.byteLength;
  }
  const file = join(dir, "m.safetensors");
  writeFileSync(file, safetensorsFile(JSON.stringify(header), at));
  const text = runCli(["info", file, "--tree"]);
  expect(text.status, text.stderr).toBe(0);
  expect(text.stdout).toMatch(/^model\.layers\.\{0\.\.3\} +×4 \(8 tensors\) +768 +1\.5 KiB$/m);
  expect(text.stdout).toMatch(/^ {2}attn\.q\.weight +BF16 \[8, 8\] +64 +128 B$/m);
  const json = JSON.parse(runCli(["info", file, "--tree", "--json"]).stdout) as { tree: TensorTreeNode };
  expect(json.tree.children[0]).toMatchObject({ name: "model.layers.{0..3}", repeat: 4, tensors: 8, params: 768, bytes: 1536 });
});
