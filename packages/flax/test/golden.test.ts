/**
 * flax's own files (fixtures/flax, written by flax 0.12.8): our reader must see what
 * `msgpack_restore` gave back (recorded in manifest.json), and where the file is
 * `msgpack_serialize` of the tree our writer builds, our writer must reproduce it byte for byte.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type Dtype, readSafetensors, readTensorBytes, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { FLAX_TREE_KEY, readFlax, serializeFlax } from "@st-convert/flax";
import { fixturePath, fromHex, toHex } from "@st-convert/testing";

interface ManifestTensor {
  name: string;
  dtype: string;
  shape: number[];
  hex: string;
}
interface ManifestFile {
  writer: string;
  max_chunk_size: number;
  identical: boolean;
  tensors: ManifestTensor[];
  skipped: { name: string; kind: string; scalar: { dtype: string; hex: string } | null }[];
}

const manifest = JSON.parse(readFileSync(fixturePath("flax", "manifest.json"), "utf8")) as Record<string, ManifestFile>;
const files = Object.entries(manifest);
const read = (name: string) => readFileSync(fixturePath("flax", name));

/** A recorded tree with every dict's entries in one order (lists keep theirs). */
function sortedTree(node: unknown): unknown {
  if (Array.isArray(node)) {
    const pairs: [string, unknown][] = [];
    for (let i = 0; i < node.length; i += 2) pairs.push([JSON.stringify(node[i]), sortedTree(node[i + 1])]);
    return pairs.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
  }
  if (typeof node === "object" && node !== null && "l" in node) return { l: (node as { l: unknown[] }).l.map(sortedTree) };
  return node;
}

/** The record the reader would make of tensors written without one: nested dicts of ndarrays. */
function treeOfNames(tensors: readonly { name: string }[]): unknown[] {
  const root: unknown[] = [];
  for (const { name } of tensors) {
    const keys = name.split(".");
    let dict = root;
    for (const key of keys.slice(0, -1)) {
      let at = dict.findIndex((k, i) => i % 2 === 0 && k === key);
      if (at < 0) at = dict.push(key, []) - 2;
      dict = dict[at + 1] as unknown[];
    }
    dict.push(keys[keys.length - 1], 1);
  }
  return root;
}

const byName = (a: { name: string }, b: { name: string }) => (a.name < b.name ? -1 : 1);

async function view(file: Awaited<ReturnType<typeof readFlax>>): Promise<ManifestTensor[]> {
  return Promise.all(file.tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: [...t.shape], hex: toHex(await readTensorBytes(t)) })));
}

describe("reading files written by flax", () => {
  it("has fixtures from both writers, chunked ones among them", () => {
    expect(files.length).toBeGreaterThan(15);
    expect(files.some(([, f]) => f.writer === "to_bytes")).toBe(true);
    expect(files.some(([, f]) => f.max_chunk_size < 2 ** 30)).toBe(true);
  });

  it.each(files)("%s: names, dtypes, shapes and bytes as msgpack_restore gives them, in file order", async (name, expected) => {
    const warnings: string[] = [];
    // The manifest names a top-level array after the file stem; so does the reader (from the source name).
    const file = await readFlax(read(name), { onWarning: (m) => warnings.push(m), rootName: name.replace(/\.msgpack$/, "") });
    expect(await view(file)).toEqual(expected.tensors);
    expect(file.skipped).toBe(expected.skipped.length);
    // Nothing is lost, so nothing is reported: the leaves that are not arrays are in the tree.
    expect(warnings).toEqual([]);
    // The tree is recorded unless the names alone rebuild the file (msgpack_serialize of dicts, flax's chunk size).
    const canonical = expected.identical && expected.max_chunk_size === 2 ** 30;
    expect(file.metadata === null, String(file.metadata?.[FLAX_TREE_KEY])).toBe(canonical);
  });

  it.each(files.filter(([, f]) => f.skipped.length > 0))("%s: the tree records each skipped leaf at its place", async (name, expected) => {
    const file = await readFlax(read(name), { rootName: name.replace(/\.msgpack$/, "") });
    const { tree } = JSON.parse(file.metadata![FLAX_TREE_KEY]!) as { tree: unknown };
    for (const leaf of expected.skipped) {
      let node: unknown = tree;
      for (const key of leaf.name.split(".")) {
        // A dict is [key, value, …]; a list is {"l": [...]}.
        node = Array.isArray(node) ? node[node.findIndex((k, i) => i % 2 === 0 && k === key) + 1] : (node as { l: unknown[] }).l[Number(key)];
      }
      const form = { None: null, bool: "boolean", str: "string", int: "i", float: "f", complex: "c", bytes: "b", dict: "empty" }[leaf.kind];
      if (form === null) expect(node, leaf.name).toBeNull();
      else if (form === "boolean" || form === "string") expect(typeof node, leaf.name).toBe(form);
      else if (form === "empty") expect(node, leaf.name).toEqual([]);
      else expect(Object.keys(node as object), leaf.name).toEqual([form]);
    }
  });

  it.each(files.filter(([, f]) => f.skipped.some((s) => s.scalar !== null)))(
    "%s with keepScalars: numbers and bools as 0-d tensors, as numpy makes them",
    async (name, expected) => {
      const file = await readFlax(read(name), { keepScalars: true, rootName: name.replace(/\.msgpack$/, "") });
      const ours = await view(file);
      const scalars = expected.skipped.filter((s) => s.scalar !== null).map((s) => ({ name: s.name, dtype: s.scalar!.dtype, shape: [], hex: s.scalar!.hex }));
      expect(ours.sort(byName)).toEqual([...expected.tensors, ...scalars].sort(byName));
      expect(file.skipped).toBe(expected.skipped.length - scalars.length);
    },
  );

  it("reads insertion order (to_bytes) and sorted order (msgpack_serialize) of the same Linen tree alike", async () => {
    const a = await view(await readFlax(read("linen_to_bytes.msgpack")));
    const b = await view(await readFlax(read("linen_serialize.msgpack")));
    expect(a.map((t) => t.name)).toEqual([
      "params.Embed_0.embedding",
      "params.Dense_0.kernel",
      "params.Dense_0.bias",
      "params.LayerNorm_0.scale",
      "params.LayerNorm_0.bias",
      "params.head.kernel",
      "params.head.bias",
    ]);
    expect(b.map((t) => t.name)).toEqual([...a.map((t) => t.name)].sort());
    expect(new Set(a.map((t) => JSON.stringify(t)))).toEqual(new Set(b.map((t) => JSON.stringify(t))));
  });

  it("reassembles chunked arrays into one tensor whose bytes come from each chunk's range", async () => {
    const file = await readFlax(read("chunked.msgpack"));
    const big = file.tensors.find((t) => t.name === "big")!;
    expect(big.shape).toEqual([2, 5]);
    expect(big.ranges.map(([, length]) => length)).toEqual([16, 16, 8]);
    expect(toHex(await readTensorBytes(big))).toBe(toHex(new Uint8Array(Float32Array.from({ length: 10 }, (_, i) => i).buffer)));
  });

  it("names a top-level array after the file unless told", async () => {
    expect((await readFlax(read("array_top.msgpack"))).tensors.map((t) => t.name)).toEqual(["tensor"]);
    expect((await readFlax(read("chunked_top.msgpack"), { rootName: "w" })).tensors.map((t) => [t.name, t.shape])).toEqual([["w", [2, 5]]]);
  });
});

describe("writing flax's bytes", () => {
  const identical = files.filter(([, f]) => f.identical);

  it("covers the encodings and chunking", () => {
    expect(identical.map(([name]) => name)).toEqual(
      expect.arrayContaining(["sizes.msgpack", "unicode_keys.msgpack", "chunked.msgpack", "chunked_many.msgpack", "all_dtypes.msgpack"]),
    );
  });

  it.each(identical)("%s: identical to msgpack_serialize of the same tree", async (name, expected) => {
    const tensors = expected.tensors.map((t) => tensorFromBytes({ name: t.name, dtype: t.dtype as Dtype, shape: t.shape }, fromHex(t.hex)));
    // Reverse the input order: the writer must order keys itself.
    const bytes = await serializeFlax({ metadata: null, tensors: tensors.reverse() }, { maxChunkSize: expected.max_chunk_size });
    expect(toHex(bytes)).toBe(toHex(read(name)));
  });

  // flax itself never writes a chunk dict in sorted key order; this fixture's "ok" is one (made by
  // passing `_chunk`'s output through msgpack_serialize's sort): read as one array, it is written
  // back in flax's own order (marker, shape, chunks), which restores to the same tree.
  const reordered = ["chunked_in_list.msgpack"];

  it.each(files.filter(([name]) => !reordered.includes(name)))("%s: read and written back as flax is the file, byte for byte", async (name) => {
    const file = await readFlax(read(name), { rootName: "root" });
    expect(toHex(await serializeFlax(file))).toBe(toHex(read(name)));
  });

  it.each(files.filter(([name]) => !reordered.includes(name)))("%s: through safetensors and back is the file, byte for byte", async (name) => {
    const file = await readFlax(read(name), { rootName: "root" });
    const safetensors = await readSafetensors(await serializeSafetensors(file));
    expect(toHex(await serializeFlax(safetensors))).toBe(toHex(read(name)));
  });

  it.each(files)("%s: with keepScalars, read and written back restores the same tree", async (name) => {
    const file = await readFlax(read(name), { rootName: "root", keepScalars: true });
    const bytes = await serializeFlax(file);
    if (!reordered.includes(name)) expect(toHex(bytes)).toBe(toHex(read(name)));
    const again = await readFlax(bytes, { rootName: "root" });
    expect(await view(again)).toEqual(await view(await readFlax(read(name), { rootName: "root" })));
  });

  it.each(files)("%s: with only what the names cannot say recorded (no key order), written back holds the same tree", async (name) => {
    const full = await readFlax(read(name), { rootName: "root" });
    const partial = await readFlax(read(name), { rootName: "root", maxOrderedTreeBytes: 0 });
    const again = await readFlax(await serializeFlax(partial), { rootName: "root" });
    // Without a record, the tree is the names split into dicts.
    const sorted = (file: typeof full) => sortedTree(file.metadata === null ? treeOfNames(file.tensors) : JSON.parse(file.metadata[FLAX_TREE_KEY]!).tree);
    expect(sorted(again)).toEqual(sorted(full));
    expect((await view(again)).sort(byName)).toEqual((await view(full)).sort(byName));
  });

  it.each(files)("%s: read, written and read again gives the same tensors", async (name) => {
    const first = await readFlax(read(name), { rootName: "root" });
    const again = await readFlax(await serializeFlax(first), { rootName: "root" });
    expect(await view(again)).toEqual(expect.arrayContaining(await view(first)));
    expect(again.tensors.length).toBe(first.tensors.length);
  });
});
