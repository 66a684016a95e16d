/**
 * The reader under fuzzing (random bytes, mutated flax files, every truncation), and differential
 * tests against msgpackr, an independent msgpack codec: what msgpackr encodes, our scanner reads
 * the same; what our writer encodes, msgpackr decodes to the tree the names describe.
 */
import { readFileSync, readdirSync } from "node:fs";
import fc from "fast-check";
import { Packr, Unpackr, addExtension } from "msgpackr";
import { describe, expect, it } from "vitest";
import { readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { readFlax, serializeFlax } from "@st-convert/flax";
import { fixturePath, fuzzReader, fuzzRuns, fuzzSeed, fuzzTimeout, toHex } from "@st-convert/testing";
import { payload } from "./msgpackBytes.js";

const seeds = readdirSync(fixturePath("flax"))
  .filter((f) => f.endsWith(".msgpack"))
  .map((f) => readFileSync(fixturePath("flax", f)))
  .filter((bytes) => bytes.byteLength < 4096);

async function readAll(bytes: Uint8Array): Promise<void> {
  const file = await readFlax(bytes, { keepScalars: true });
  for (const t of file.tensors) await readTensorBytes(t);
}

describe("flax reader under fuzzing", () => {
  it("has a seed corpus from flax", () => expect(seeds.length).toBeGreaterThan(10));
  fuzzReader({ name: "flax", seeds, read: readAll });

  it(
    "whatever the reader accepts, the writer writes back, and reading that gives the same tensors and tree",
    async () => {
      const view = async (file: Awaited<ReturnType<typeof readFlax>>) => ({
        metadata: file.metadata,
        tensors: await Promise.all(file.tensors.map(async (t) => [t.name, t.dtype, t.shape, toHex(await readTensorBytes(t))])),
      });
      const edits = fc.array(fc.tuple(fc.nat(), fc.nat({ max: 255 })), { maxLength: 4 });
      await fc.assert(
        fc.asyncProperty(fc.nat({ max: seeds.length - 1 }), edits, fc.boolean(), async (which, changes, keepScalars) => {
          const bytes = seeds[which]!.slice();
          for (const [at, value] of changes) bytes[at % bytes.byteLength] = value;
          let first: Awaited<ReturnType<typeof readFlax>>;
          try {
            first = await readFlax(bytes, { keepScalars, rootName: "root" });
            for (const t of first.tensors) await readTensorBytes(t);
          } catch {
            return; // refused: the fuzz targets above check how
          }
          const written = await serializeFlax(first);
          const again = await readFlax(written, { keepScalars, rootName: "root" });
          expect(await view(again)).toEqual(await view(first));
          expect(toHex(await serializeFlax(again))).toBe(toHex(written));
        }),
        { numRuns: fuzzRuns() * 4, seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );
});

/** A uint8 ndarray leaf: msgpackr packs it as flax's ext 1 (the payload built by the test's own helper). */
class Nd {
  constructor(readonly bytes: Uint8Array) {}
}

// Test-only: msgpackr's extension registry is global. A payload is decoded by a second Unpackr,
// never by a nested unpack() of the same instance.
const inner = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "bigint" });
addExtension({
  Class: Nd,
  type: 1,
  pack: (nd: Nd) => Buffer.from(payload([nd.bytes.byteLength], "uint8", nd.bytes)),
  unpack: (bytes) => ({ ndarray: inner.unpack(bytes) as unknown }),
});

/** A JSON-like tree msgpackr can encode: Maps keep key order, leaves are numbers, bools, null, strings, bytes. */
type Tree = Map<string, Tree> | Tree[] | number | bigint | boolean | null | string | Uint8Array | Nd;

const key = fc.string({ maxLength: 8 }).filter((k) => !k.includes("/") && k !== "__msgpack_chunked_array__");
const leaf: fc.Arbitrary<Tree> = fc.oneof(
  fc.integer({ min: -(2 ** 31), max: 2 ** 32 - 1 }),
  fc.bigInt({ min: -(2n ** 63n), max: 2n ** 64n - 1n }),
  fc.double({ noNaN: true }).filter((x) => !Number.isInteger(x)),
  fc.boolean(),
  fc.constant(null),
  fc.string({ maxLength: 40 }),
  fc.uint8Array({ maxLength: 8 }),
  fc.uint8Array({ maxLength: 8 }).map((bytes) => new Nd(bytes)),
);
const tree = fc.letrec<{ node: Tree; map: Tree; list: Tree }>((tie) => ({
  node: fc.oneof({ depthSize: "small", withCrossShrink: true }, leaf, tie("map"), tie("list")),
  map: fc.uniqueArray(fc.tuple(key, tie("node")), { selector: ([k]) => k, maxLength: 5 }).map((entries) => new Map(entries)),
  list: fc.array(tie("node"), { maxLength: 4 }),
})).map;
/** Trees with any double besides (NaN, infinities, -0, integral values past 2^32 that msgpackr writes as floats). */
const anyTree = fc.letrec<{ node: Tree; map: Tree; list: Tree }>((tie) => ({
  node: fc.oneof({ depthSize: "small", withCrossShrink: true }, leaf, fc.double(), tie("map"), tie("list")),
  map: fc.uniqueArray(fc.tuple(key, tie("node")), { selector: ([k]) => k, maxLength: 5 }).map((entries) => new Map(entries)),
  list: fc.array(tie("node"), { maxLength: 4 }),
})).map;

/** What our reader should list with keepScalars: [name, dtype, bytes hex] of every number and bool leaf, and the count of the rest. */
function expectedLeaves(root: Tree): { tensors: string[]; skipped: number } {
  const tensors: string[] = [];
  let skipped = 0;
  const walk = (value: Tree, path: string[]): void => {
    const name = path.join("/");
    if (value instanceof Nd) tensors.push(`${name}|U8|${toHex(value.bytes)}`);
    else if (value instanceof Map) for (const [k, v] of value) walk(v, [...path, k]);
    else if (Array.isArray(value)) value.forEach((v, i) => walk(v, [...path, String(i)]));
    else if (typeof value === "boolean") tensors.push(`${name}|BOOL|${value ? "01" : "00"}`);
    else if (typeof value === "number" || typeof value === "bigint") {
      const bytes = new DataView(new ArrayBuffer(8));
      if (typeof value === "number" && !Number.isInteger(value)) {
        bytes.setFloat64(0, value, true);
        tensors.push(`${name}|F64|${toHex(new Uint8Array(bytes.buffer))}`);
      } else if (BigInt(value) >= 2n ** 63n) {
        bytes.setBigUint64(0, BigInt(value), true);
        tensors.push(`${name}|U64|${toHex(new Uint8Array(bytes.buffer))}`);
      } else {
        bytes.setBigInt64(0, BigInt(value), true);
        tensors.push(`${name}|I64|${toHex(new Uint8Array(bytes.buffer))}`);
      }
    } else skipped++;
  };
  walk(root, []);
  return { tensors, skipped };
}

/** A tree as msgpackr decodes it, comparable: maps as ordered entries, bytes as hex, exact ints as numbers. */
function comparable(value: unknown): unknown {
  if (value instanceof Nd) return { ndarray: [[value.bytes.byteLength], "uint8", toHex(value.bytes)] };
  if (value instanceof Map) return { map: [...value.entries()].map(([k, v]) => [k, comparable(v)]) };
  if (Array.isArray(value)) return value.map(comparable);
  if (value instanceof Uint8Array) return { bytes: toHex(value) };
  if (typeof value === "bigint") return value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value.toString();
  if (typeof value === "object" && value !== null && "ndarray" in value) {
    const [shape, dtype, bytes] = (value as { ndarray: [number[], string, Uint8Array] }).ndarray;
    return { ndarray: [shape, dtype, toHex(bytes)] };
  }
  return value;
}

describe("differential tests with msgpackr", () => {
  it(
    "msgpackr's encoding of any tree → read → written back → msgpackr decodes the same tree, keys in order",
    async () => {
      const packr = new Packr({ useRecords: false, variableMapSize: true });
      const outer = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "bigint" });
      await fc.assert(
        fc.asyncProperty(anyTree, fc.boolean(), async (root, keepScalars) => {
          const bytes = packr.pack(root);
          const file = await readFlax(bytes, { keepScalars, sep: "/" });
          // Against msgpackr's own reading of its bytes (it writes -0 as the int 0, for one).
          expect(comparable(outer.unpack(await serializeFlax(file)))).toEqual(comparable(outer.unpack(bytes)));
        }),
        { numRuns: fuzzRuns(), seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );

  it(
    "msgpackr's encoding of any tree → our reader lists its number and bool leaves, skips the rest",
    async () => {
      const packr = new Packr({ useRecords: false, variableMapSize: true });
      await fc.assert(
        fc.asyncProperty(tree, async (root) => {
          const bytes = packr.pack(root);
          const file = await readFlax(bytes, { keepScalars: true, sep: "/" });
          const ours = await Promise.all(file.tensors.map(async (t) => `${t.name}|${t.dtype}|${toHex(await readTensorBytes(t))}`));
          const expected = expectedLeaves(root);
          expect(ours).toEqual(expected.tensors);
          expect(file.skipped).toBe(expected.skipped);
        }),
        { numRuns: fuzzRuns(), seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );

  it(
    "our writer's output → msgpackr decodes the nested dicts the names describe",
    async () => {
      const outer = new Unpackr({ useRecords: false, mapsAsObjects: false, int64AsType: "bigint" });
      const segment = fc.constantFrom("a", "b", "0", "1", "10", "é", "😀", "k".repeat(40));
      await fc.assert(
        fc.asyncProperty(fc.uniqueArray(fc.array(segment, { minLength: 1, maxLength: 3 }), { selector: (p) => p.join("."), maxLength: 6 }), async (paths) => {
          const names = paths.map((p) => p.join("."));
          fc.pre(!names.some((a) => names.some((b) => b.startsWith(`${a}.`))));
          const tensors = names.map((name, i) => tensorFromBytes({ name, dtype: "U8", shape: [i] }, new Uint8Array(i).fill(i)));
          const decoded = outer.unpack(await serializeFlax({ metadata: null, tensors })) as Map<string, unknown>;
          const expected = new Map<string, unknown>();
          paths.forEach((path, i) => {
            let node = expected;
            for (const k of path.slice(0, -1)) {
              if (!node.has(k)) node.set(k, new Map());
              node = node.get(k) as Map<string, unknown>;
            }
            node.set(path[path.length - 1]!, { ndarray: [[i], "uint8", new Uint8Array(i).fill(i)] });
          });
          const normalize = (value: unknown): unknown =>
            value instanceof Map
              ? [...value.entries()].sort(([a], [b]) => (a < b ? -1 : 1)).map(([k, v]) => [k, normalize(v)])
              : value instanceof Uint8Array
                ? toHex(value)
                : Array.isArray(value)
                  ? value.map(normalize)
                  : typeof value === "object" && value !== null
                    ? Object.fromEntries(Object.entries(value).map(([k, v]) => [k, normalize(v)]))
                    : value;
          expect(normalize(decoded)).toEqual(normalize(expected));
        }),
        { numRuns: fuzzRuns(), seed: fuzzSeed() },
      );
    },
    fuzzTimeout(),
  );
});
