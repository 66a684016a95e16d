/**
 * Interop with the real flax (0.12.8) and safetensors: flax's files become safetensors files the
 * reference reads as flax's tree flattened; our msgpack files restore in flax to the nested arrays
 * bit for bit and equal `msgpack_serialize`'s bytes; real TrainStates taken through st-convert
 * restore with `from_bytes` into their targets; flax's verdict on each hostile file is the one
 * hostileCases records.
 */
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, expect, it } from "vitest";
import {
  DTYPES,
  type Dtype,
  type TensorEntry,
  dtypeInfo,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorByteLength,
  tensorFromBytes,
} from "@st-convert/core";
import { readFlax, serializeFlax } from "@st-convert/flax";
import { describeInterop, fixturePath, fromHex, makeTempDir, runPython, toHex } from "@st-convert/testing";
import { hostileCases } from "./hostileCases.js";

interface FlaxView {
  ok: boolean;
  error?: string;
  message?: string;
  tensors?: { name: string; dtype: string; shape: number[]; hex: string }[];
  skipped?: { name: string; kind: string }[];
}
interface SafetensorsView {
  ok: boolean;
  tensors?: { name: string; dtype: string; shape: number[]; sha256: string }[];
}
type Nested = { dict: Record<string, Nested> } | { list: Nested[] } | { array: { dtype: string; shape: number[]; hex: string } } | { other: string };

/** The `train_state_*.msgpack` fixtures: real flax TrainStates, rebuilt as targets by `reference_flax.py from-bytes`. */
const TRAIN_STATES = ["adam", "sgd_momentum", "batch_norm"];

const sha256 = (bytes: Uint8Array) => createHash("sha256").update(bytes).digest("hex");
const lines = <T>(text: string) =>
  text
    .trim()
    .split("\n")
    .map((line) => JSON.parse(line) as T);

/** Deterministic tensor sets: every dtype flax can hold, nested names with list-like and unicode segments. */
function tensorSet(seed: number, size: number): TensorEntry[] {
  const dtypes = DTYPES.filter((d) => d.numpyName !== undefined).map((d) => d.code);
  const shapes = [[], [3], [2, 4], [0, 5], [1, 2, 2], [17], [300], [0, 70000]];
  const names = [
    "params.Dense_0.kernel",
    "params.Dense_0.bias",
    "params.LayerNorm_0.scale",
    "blocks.0.w",
    "blocks.1.w",
    "blocks.10.w",
    "blocks.2.w",
    "é.😀",
    "\uffff",
    "k".repeat(40),
    "emb.embedding",
    "opt.0.mu",
    "opt.1.nu",
    "step",
  ];
  let x = seed * 2654435761 || 1;
  const next = () => ((x = (x * 1103515245 + 12345) >>> 0), x);
  return Array.from({ length: size }, (_, i) => {
    const dtype = dtypes[(seed + i * 5) % dtypes.length]! as Dtype;
    const shape = shapes[(seed + i) % shapes.length]!;
    const raw = new Uint8Array(tensorByteLength(dtype, shape)).map(() => next() & 0xff);
    return tensorFromBytes({ name: names[(seed * 3 + i) % names.length]!, dtype, shape }, dtype === "BOOL" ? raw.map((b) => b & 1) : raw);
  }).filter((t, i, all) => all.findIndex((u) => u.name === t.name) === i);
}

async function spec(tensors: readonly TensorEntry[], maxChunkSize: number | null): Promise<string> {
  return JSON.stringify({
    sep: ".",
    max_chunk_size: maxChunkSize,
    tensors: await Promise.all(tensors.map(async (t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, hex: toHex(await readTensorBytes(t)) }))),
  });
}

async function expectedTree(tensors: readonly TensorEntry[]): Promise<Nested> {
  const root: { dict: Record<string, Nested> } = { dict: {} };
  for (const t of tensors) {
    const keys = t.name.split(".");
    let node = root;
    for (const key of keys.slice(0, -1)) node = (node.dict[key] ??= { dict: {} }) as { dict: Record<string, Nested> };
    node.dict[keys[keys.length - 1]!] = { array: { dtype: dtypeInfo(t.dtype).numpyName!, shape: [...t.shape], hex: toHex(await readTensorBytes(t)) } };
  }
  return root;
}

describeInterop("flax interop with flax.serialization", (python) => {
  const { dir, cleanup } = makeTempDir();
  afterAll(cleanup);
  const fixtures = readdirSync(fixturePath("flax")).filter((f) => f.endsWith(".msgpack"));

  it("flax's files → our safetensors: the reference reads the tensors msgpack_restore gave, byte for byte", { timeout: 60_000 }, async () => {
    const views = lines<FlaxView>(runPython(python, "reference_flax.py", ["read", ...fixtures.map((f) => fixturePath("flax", f))]));
    const outputs: string[] = [];
    for (const name of fixtures) {
      const file = await readFlax(readFileSync(fixturePath("flax", name)), { rootName: name.replace(/\.msgpack$/, "") });
      const path = join(dir, name.replace(/\.msgpack$/, ".safetensors"));
      writeFileSync(path, await serializeSafetensors(file));
      outputs.push(path);
    }
    const read = lines<SafetensorsView>(runPython(python, "reference_safetensors.py", ["read", ...outputs]));
    fixtures.forEach((name, i) => {
      const byName = (ts: { name: string }[]) => Object.fromEntries(ts.map((t) => [t.name, t]));
      const expected = views[i]!.tensors!.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, sha256: sha256(fromHex(t.hex)) }));
      const got = read[i]!.tensors!.map(({ name: n, dtype, shape, sha256: s }) => ({ name: n, dtype, shape, sha256: s }));
      expect(byName(got), name).toEqual(byName(expected));
    });
  });

  it("our msgpack → msgpack_restore gives back the nested arrays bit for bit, chunked or not", async () => {
    const expected: Nested[] = [];
    const paths: string[] = [];
    for (let seed = 0; seed < 6; seed++) {
      const tensors = tensorSet(seed, 12);
      const maxChunkSize = seed % 2 === 0 ? 2 ** 30 : 16 + seed;
      const path = join(dir, `ours-${seed}.msgpack`);
      writeFileSync(path, await serializeFlax({ metadata: null, tensors: [...tensors].reverse() }, { maxChunkSize }));
      paths.push(path);
      expected.push(await expectedTree(tensors));
    }
    expect(lines<Nested>(runPython(python, "reference_flax.py", ["restore", ...paths]))).toEqual(expected);
  }, 60_000);

  it("our msgpack for a tree is byte-identical to msgpack_serialize's, with flax's chunk size and patched ones", async () => {
    const args: string[] = [];
    const ours: Uint8Array[] = [];
    for (let seed = 0; seed < 8; seed++) {
      const tensors = tensorSet(seed + 100, 14);
      const maxChunkSize = [null, 16, 40, 7][seed % 4]!;
      const specPath = join(dir, `spec-${seed}.json`);
      writeFileSync(specPath, await spec(tensors, maxChunkSize));
      args.push(specPath, join(dir, `theirs-${seed}.msgpack`));
      ours.push(await serializeFlax({ metadata: null, tensors }, { maxChunkSize: maxChunkSize ?? undefined }));
    }
    runPython(python, "reference_flax.py", ["serialize", ...args]);
    ours.forEach((bytes, seed) => expect(toHex(bytes), `seed ${seed}`).toBe(toHex(readFileSync(args[2 * seed + 1]!))));
  }, 60_000);

  it("real TrainStates (adam, sgd with momentum, BatchNorm batch_stats) → our flax, directly and through safetensors, with the key order recorded or not: from_bytes restores each into the original's target, leaf for leaf", async () => {
    const args: string[] = ["from-bytes"];
    for (const kind of TRAIN_STATES) {
      const fixture = fixturePath("flax", `train_state_${kind}.msgpack`);
      const original = readFileSync(fixture);
      const file = await readFlax(original);
      const ours = {
        direct: await serializeFlax(file),
        viaSafetensors: await serializeFlax(await readSafetensors(await serializeSafetensors(file))),
        keepScalars: await serializeFlax(await readSafetensors(await serializeSafetensors(await readFlax(original, { keepScalars: true })))),
      };
      // As a big model's state is recorded: only what the names cannot say, not the key order.
      const namesOnly = await readFlax(original, { maxOrderedTreeBytes: 0 });
      const unordered = await serializeFlax(await readSafetensors(await serializeSafetensors(namesOnly)));
      const paths = Object.entries(ours).map(([how, bytes]) => {
        const path = join(dir, `${kind}.${how}.msgpack`);
        writeFileSync(path, bytes);
        // Byte for byte what flax wrote, key order included.
        expect(toHex(bytes), `${kind} ${how}`).toBe(toHex(original));
        return path;
      });
      const unorderedPath = join(dir, `${kind}.unordered.msgpack`);
      writeFileSync(unorderedPath, unordered);
      args.push(...(args.length > 1 ? ["--"] : []), kind, fixture, ...paths, unorderedPath);
    }
    const results = lines<{ ok: boolean; error?: string; differences?: string[]; to_bytes_identical?: boolean }>(runPython(python, "reference_flax.py", args));
    expect(results).toEqual(
      Array.from({ length: 4 * TRAIN_STATES.length }, () => ({ ok: true, leaves: expect.any(Number), differences: [], to_bytes_identical: true })),
    );
  }, 120_000);

  it("flax accepts or refuses each hostile file as recorded", { timeout: 60_000 }, () => {
    const cases = hostileCases.filter(([, , , reference]) => reference !== null);
    const paths = cases.map(([, bytes], i) => {
      const path = join(dir, `hostile-${i}.msgpack`);
      writeFileSync(path, bytes);
      return path;
    });
    const views = lines<FlaxView>(runPython(python, "reference_flax.py", ["read", ...paths]));
    const disagreements = cases
      .map(([attack, , , reference], i) => ({ attack, recorded: reference, flax: views[i]!.ok ? "accepts" : "refuses", error: views[i]!.error }))
      .filter(({ recorded, flax }) => recorded !== flax);
    expect(disagreements).toEqual([]);
  });
});
