/**
 * Sharded checkpoints read through their index. The checkpoint is huggingface_hub's own
 * (`save_torch_state_dict`, fixtures/sharded/hub); the manifest is what the reference loader reads
 * from it. Broken indexes are built here from those shards.
 */
import { createHash } from "node:crypto";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { type ByteSource, StConvertError, bytesSource, readSafetensorsIndex, readTensorBytes } from "@st-convert/core";
import { fixturePath, safetensorsFile } from "@st-convert/testing";

interface Manifest {
  index_metadata: Record<string, unknown>;
  shards: string[];
  tensors: { name: string; dtype: string; shape: number[]; sha256: string }[];
}

const hub = fixturePath("sharded", "hub");
const manifest = JSON.parse(readFileSync(fixturePath("sharded", "manifest.json"), "utf8")) as Manifest;
const indexText = readFileSync(join(hub, "model.safetensors.index.json"), "utf8");
const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");

/** Opens shards from the fixture folder, or from `extra` (name → bytes) first; records what was opened. */
function shardOpener(extra: Record<string, Uint8Array> = {}) {
  const opened: string[] = [];
  const open = async (name: string): Promise<ByteSource> => {
    opened.push(name);
    if (name in extra) return bytesSource(extra[name]!, name);
    return bytesSource(readFileSync(join(hub, name)), join(hub, name));
  };
  return { open, opened };
}

const index = (text: string) => bytesSource(new TextEncoder().encode(text), "model.safetensors.index.json");
const withMap = (weightMap: Record<string, unknown>, metadata: unknown = { total_size: 0 }) => index(JSON.stringify({ metadata, weight_map: weightMap }));
const realMap = () => (JSON.parse(indexText) as { weight_map: Record<string, string> }).weight_map;

async function refusal(promise: Promise<unknown>): Promise<StConvertError> {
  const error = await promise.then(
    () => undefined,
    (e: unknown) => e,
  );
  expect(error).toBeInstanceOf(StConvertError);
  return error as StConvertError;
}

describe("readSafetensorsIndex on huggingface_hub's checkpoint", () => {
  it("has several shards, as the fixture intends", () => {
    expect(manifest.shards.length).toBeGreaterThan(2);
    expect(readdirSync(hub).sort()).toEqual([...manifest.shards, "model.safetensors.index.json"].sort());
  });

  it("lists the tensors the reference loads, in weight_map order, with their bytes", async () => {
    const { open, opened } = shardOpener();
    const warnings: string[] = [];
    const file = await readSafetensorsIndex(index(indexText), open, { onWarning: (m) => warnings.push(m) });
    expect(file.tensors.map((t) => [t.name, t.dtype, [...t.shape]])).toEqual(manifest.tensors.map((t) => [t.name, t.dtype, t.shape]));
    for (const [i, tensor] of file.tensors.entries()) expect(sha256(await readTensorBytes(tensor)), tensor.name).toBe(manifest.tensors[i]!.sha256);
    expect(file.shards).toEqual(manifest.shards);
    expect(opened).toEqual(manifest.shards);
    expect({ ...file.metadata }).toEqual({ format: "pt" });
    expect(file.indexMetadata).toEqual(manifest.index_metadata);
    expect(warnings).toEqual([]);
  });
});

describe("readSafetensorsIndex refuses an index that does not hold together", () => {
  it.each([
    ["not JSON", index("{"), "InvalidIndex", /not a JSON index/],
    ["JSON but not an object", index("[1]"), "InvalidIndex", /a JSON object with a "weight_map"/],
    ["no weight_map", index('{"metadata": {}}'), "InvalidIndex", /"weight_map" must be an object/],
    ["a shard name that is not a string", withMap({ w: 3 }), "InvalidIndex", /maps "w" to 3, not to a file name/],
    ["an absolute shard name", withMap({ w: "/etc/passwd.safetensors" }), "InvalidIndex", /absolute path/],
    ["a Windows drive", withMap({ w: "C:model.safetensors" }), "InvalidIndex", /absolute path/],
    ["a shard name climbing out", withMap({ w: "../../secret/model.safetensors" }), "InvalidIndex", /climbs out/],
    ["a backslash climbing out", withMap({ w: "sub\\..\\..\\model.safetensors" }), "InvalidIndex", /climbs out/],
    ["a shard that is not a .safetensors", withMap({ w: "model.bin" }), "InvalidIndex", /does not end in \.safetensors/],
    ["a UTF-8 byte order mark (Python's json.load refuses it)", index(`\ufeff${indexText}`), "InvalidIndex", /byte order mark/],
    [
      "nesting 5,000 deep (Python's json.load: RecursionError)",
      index(`{"metadata": ${"[".repeat(5000)}${"]".repeat(5000)}, "weight_map": {}}`),
      "LimitExceeded",
      /deeper than 990 levels/,
    ],
    ["a trailing comma", index('{"weight_map": {},}'), "InvalidIndex", /not a JSON index/],
  ])("%s", async (_label, source, code, message) => {
    const { open, opened } = shardOpener();
    const error = await refusal(readSafetensorsIndex(source, open));
    expect(error.code).toBe(code);
    expect(error.message).toMatch(message);
    expect(error.file).toBe("model.safetensors.index.json");
    // Nothing was opened on the strength of a bad index.
    expect(opened).toEqual([]);
  });

  it("refuses an index past maxIndexSize before reading it", async () => {
    const error = await refusal(readSafetensorsIndex(index(indexText), shardOpener().open, { maxIndexSize: 100 }));
    expect(error.code).toBe("LimitExceeded");
  });

  it("refuses a tensor its shard does not hold, naming it", async () => {
    const map = { ...realMap(), "model.ghost": manifest.shards[0]! };
    const error = await refusal(readSafetensorsIndex(withMap(map), shardOpener().open));
    expect(error.code).toBe("TensorNotFound");
    expect(error.tensor).toBe("model.ghost");
    expect(error.message).toMatch(new RegExp(`maps it to "${manifest.shards[0]!}", which does not hold it`));
  });

  it("refuses a shard holding a tensor the index does not list", async () => {
    const map = realMap();
    const dropped = manifest.tensors[manifest.tensors.length - 1]!.name;
    delete map[dropped];
    const error = await refusal(readSafetensorsIndex(withMap(map), shardOpener().open));
    expect(error.code).toBe("InvalidIndex");
    expect(error.tensor).toBe(dropped);
    expect(error.message).toMatch(/holds a tensor the index does not list/);
  });

  it("refuses a tensor mapped to another shard than the one holding it", async () => {
    const map = realMap();
    // From a shard that keeps other tensors (so it is still opened) to another one.
    const [, first, second] = manifest.shards as [string, string, string];
    const moved = Object.keys(map).find((name) => map[name] === first)!;
    map[moved] = second;
    const error = await refusal(readSafetensorsIndex(withMap(map), shardOpener().open));
    expect(error.code).toBe("InvalidIndex");
    expect(error.tensor).toBe(moved);
    expect(error.message).toMatch(new RegExp(`holds a tensor the index maps to "${second}"`));
  });

  it("names the shard when a shard itself is broken", async () => {
    const broken = new Uint8Array(4);
    const { open } = shardOpener({ "broken.safetensors": broken });
    const error = await refusal(readSafetensorsIndex(withMap({ w: "broken.safetensors" }), open));
    expect(error.code).toBe("HeaderTooSmall");
    expect(error.file).toBe("broken.safetensors");
  });
});

describe("readSafetensorsIndex notices", () => {
  /** A one-tensor shard, byte by byte. */
  const shard = (name: string, metadata: Record<string, string>) =>
    safetensorsFile(JSON.stringify({ __metadata__: metadata, [name]: { dtype: "U8", shape: [2], data_offsets: [0, 2] } }), Uint8Array.of(1, 2));

  it("warns when total_size is not what the tensors hold", async () => {
    const warnings: string[] = [];
    const { open } = shardOpener({ "a.safetensors": shard("a", { format: "pt" }) });
    await readSafetensorsIndex(withMap({ a: "a.safetensors" }, { total_size: 999 }), open, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual(["the index's total_size is 999, but its tensors hold 2 bytes"]);
  });

  it("keeps the metadata every shard agrees on and drops, with a notice, what they do not", async () => {
    const warnings: string[] = [];
    const { open } = shardOpener({
      "a.safetensors": shard("a", { format: "pt", step: "1" }),
      "b.safetensors": shard("b", { format: "pt", step: "2" }),
    });
    const file = await readSafetensorsIndex(withMap({ a: "a.safetensors", b: "b.safetensors" }, { total_size: 4 }), open, {
      onWarning: (m) => warnings.push(m),
    });
    expect({ ...file.metadata }).toEqual({ format: "pt" });
    expect(warnings).toEqual(['metadata "step" differs between shards (or some lack it); dropped']);
    expect(file.tensors.map((t) => t.name)).toEqual(["a", "b"]);
  });

  it("merges the index's own metadata after the shards' (the shards win a clash, with a notice), leaving out total_size", async () => {
    const warnings: string[] = [];
    const { open } = shardOpener({ "a.safetensors": shard("a", { format: "pt", step: "1" }) });
    // As huggingface_hub's save_torch_state_dict(..., metadata={"note": "hub"}) writes it, with a tied name.
    const metadata = { total_size: 2, note: "hub", step: "2", "lm_head.weight": "a", count: 3 };
    const file = await readSafetensorsIndex(withMap({ a: "a.safetensors" }, metadata), open, { onWarning: (m) => warnings.push(m) });
    expect({ ...file.metadata }).toEqual({ format: "pt", step: "1", note: "hub", "lm_head.weight": "a" });
    expect(warnings).toEqual([
      'metadata "step" is "2" in the index but "1" in the shards; the shards\' value is kept',
      "the index's metadata \"count\" is not a string (a file's metadata holds strings only); dropped",
    ]);
  });

  it("takes a safetensors shard's alias entries as tied names, which the index may list or leave out", async () => {
    const { open } = shardOpener({ "a.safetensors": shard("embed", { format: "pt", "lm_head.weight": "embed" }) });
    for (const map of [{ embed: "a.safetensors" }, { embed: "a.safetensors", "lm_head.weight": "a.safetensors" }]) {
      const file = await readSafetensorsIndex(withMap(map, { total_size: 2 }), open);
      expect(file.tensors.map((t) => t.name)).toEqual(["embed"]);
      expect({ ...file.aliases }).toEqual({ "lm_head.weight": "embed" });
      expect({ ...file.metadata }).toEqual({ format: "pt", "lm_head.weight": "embed" });
    }
  });
});

// What Python's json.load and huggingface_hub's loader accept (fixtures/reference_index.py checks
// the same cases against them), st-convert accepts.
describe("readSafetensorsIndex reads what huggingface_hub's loader reads", () => {
  const shard = safetensorsFile(JSON.stringify({ w: { dtype: "U8", shape: [2], data_offsets: [0, 2] } }), Uint8Array.of(1, 2));

  it("takes NaN, Infinity and -Infinity as numbers (Python's json does)", async () => {
    const warnings: string[] = [];
    const text = '{"metadata": {"total_size": NaN, "a": Infinity, "b": -Infinity}, "weight_map": {"w": "a.safetensors"}}';
    const file = await readSafetensorsIndex(index(text), shardOpener({ "a.safetensors": shard }).open, { onWarning: (m) => warnings.push(m) });
    expect(file.indexMetadata).toEqual({ total_size: Number.NaN, a: Number.POSITIVE_INFINITY, b: Number.NEGATIVE_INFINITY });
    expect(warnings).toEqual([
      "the index's total_size is NaN, but its tensors hold 2 bytes",
      "the index's metadata \"a\" is not a string (a file's metadata holds strings only); dropped",
      "the index's metadata \"b\" is not a string (a file's metadata holds strings only); dropped",
    ]);
    expect(file.tensors.map((t) => t.name)).toEqual(["w"]);
  });

  it("ignores, with a notice, a metadata that is not an object (the loader never reads it)", async () => {
    for (const metadata of ["[1, 2]", '"text"', "3"]) {
      const warnings: string[] = [];
      const text = `{"metadata": ${metadata}, "weight_map": {"w": "a.safetensors"}}`;
      const file = await readSafetensorsIndex(index(text), shardOpener({ "a.safetensors": shard }).open, { onWarning: (m) => warnings.push(m) });
      expect(file.indexMetadata).toBeNull();
      expect(warnings).toEqual([expect.stringMatching(/^the index's "metadata" is .*, not an object; ignored/)]);
    }
  });

  it("reads a shard spelled x and ./x once, as one shard", async () => {
    const two = safetensorsFile(
      JSON.stringify({ v: { dtype: "U8", shape: [1], data_offsets: [0, 1] }, w: { dtype: "U8", shape: [1], data_offsets: [1, 2] } }),
      Uint8Array.of(1, 2),
    );
    const { open, opened } = shardOpener({ "a.safetensors": two });
    const file = await readSafetensorsIndex(withMap({ v: "a.safetensors", w: "./a.safetensors" }), open);
    expect(file.shards).toEqual(["a.safetensors"]);
    expect(opened).toEqual(["a.safetensors"]);
    expect(file.tensors.map((t) => t.name)).toEqual(["v", "w"]);
  });

  it("keeps weight_map's order and a repeated key's last value, as a Python dict does", async () => {
    const two = safetensorsFile(
      JSON.stringify({ "1": { dtype: "U8", shape: [1], data_offsets: [0, 1] }, b: { dtype: "U8", shape: [1], data_offsets: [1, 2] } }),
      Uint8Array.of(1, 2),
    );
    const text = '{"weight_map": {"b": "x.safetensors", "1": "a.safetensors", "b": "a.safetensors"}}';
    const file = await readSafetensorsIndex(index(text), shardOpener({ "a.safetensors": two }).open);
    expect(file.tensors.map((t) => t.name)).toEqual(["b", "1"]);
  });
});
