/**
 * The safetensors writer's `matchSourcePages`: the header padded with spaces so that the tensors
 * copied from a file lie at their source's offset within 64 KiB (the conversion of a GGUF, which
 * no reference writes byte for byte), and the reference's layout wherever that is not asked for or
 * would place too little. The expected paddings are worked out here from the offsets, not taken
 * from the writer.
 */
import { describe, expect, it } from "vitest";
import {
  type Dtype,
  SOURCE_ALIGNED_FROM,
  SOURCE_ALIGNMENT,
  type SafetensorsWriteOptions,
  type TensorEntry,
  readSafetensors,
  readTensorBytes,
  serializeSafetensors,
  tensorFromBytes,
  toByteSource,
} from "@st-convert/core";

const MiB = 1024 * 1024;
/** Stands for the input file: only the extents' offsets matter to the layout. */
const source = toByteSource(new Uint8Array(0), "input");

/** A tensor of `bytes` bytes (marked, so a misplaced copy shows) whose bytes lie at `offset` of the input. */
function placed(name: string, dtype: Dtype, bytes: number, offset: number | undefined): TensorEntry {
  const size = dtype === "F32" ? 4 : 2;
  const data = new Uint8Array(bytes);
  for (let at = 0; at < bytes; at += 4093) data[at] = (at / 4093 + name.length) & 0xff;
  const entry = tensorFromBytes({ name, dtype, shape: [bytes / size] }, data);
  if (offset === undefined) return entry;
  return {
    name,
    dtype,
    shape: entry.shape,
    byteLength: entry.byteLength,
    chunks: (options) => entry.chunks(options),
    extent: () => ({ source, offset }),
  };
}

interface Written {
  /** N, the header's length after its 8 bytes. */
  n: number;
  /** The header's JSON without its padding. */
  json: string;
  /** Where each tensor's data starts in the file. */
  starts: Record<string, number>;
  file: Uint8Array;
}

async function write(tensors: TensorEntry[], options: SafetensorsWriteOptions = { matchSourcePages: true }): Promise<Written> {
  const file = await serializeSafetensors({ metadata: null, tensors }, options);
  const n = Number(new DataView(file.buffer, file.byteOffset).getBigUint64(0, true));
  const text = new TextDecoder().decode(file.subarray(8, 8 + n));
  const json = text.trimEnd();
  expect(text.slice(json.length)).toMatch(/^ *$/);
  expect(n % 8).toBe(0);
  const header = JSON.parse(json) as Record<string, { data_offsets: [number, number] }>;
  const starts = Object.fromEntries(Object.entries(header).map(([name, entry]) => [name, 8 + n + entry.data_offsets[0]]));
  // Every reader reads it as the tensors given.
  const read = await readSafetensors(file);
  for (const t of tensors) {
    const entry = read.tensors.find((e) => e.name === t.name)!;
    expect(Buffer.from(await readTensorBytes(entry)).equals(Buffer.from(await readTensorBytes(t)))).toBe(true);
  }
  return { n, json, starts, file };
}

const within = (offset: number) => offset % SOURCE_ALIGNMENT;

describe("safetensors laid out on the source's offsets (matchSourcePages)", () => {
  it("places the most bytes where their source holds them, modulo 64 KiB", async () => {
    expect(SOURCE_ALIGNMENT).toBe(64 * 1024);
    expect(SOURCE_ALIGNED_FROM).toBe(16 * MiB);
    // In the input, `b` comes first at 320 and `a` after it; the output puts F32 `a` first.
    const a = 16 * MiB + 4096;
    const b = 8 * MiB;
    const first = await write([placed("a", "F32", a, 320 + b), placed("b", "F16", b, 320)]);
    expect(within(first.starts.a!)).toBe(within(320 + b));
    // The two cannot both be placed (they lie 4 KiB apart otherwise): the smaller one is not.
    expect(within(first.starts.b!)).not.toBe(within(320));

    const bigger = 20 * MiB;
    const second = await write([placed("a", "F32", a, 320 + bigger), placed("b", "F16", bigger, 320)]);
    expect(within(second.starts.b!)).toBe(320);
    expect(within(second.starts.a!)).not.toBe(within(320 + bigger));

    // The same JSON as the reference layout's: only the padding differs.
    const reference = await write([placed("a", "F32", a, 320 + b), placed("b", "F16", b, 320)], {});
    expect(first.json).toBe(reference.json);
    expect(first.n).toBeGreaterThan(reference.n);
    expect(first.n - reference.n).toBeLessThan(SOURCE_ALIGNMENT);
  });

  it("keeps the reference's layout when not asked, below 16 MiB placed, or without extents", async () => {
    const reference = await write([placed("a", "F32", 20 * MiB, 4000)], {});
    // The reference pads its JSON to a multiple of 8, no more.
    expect(reference.n).toBe(Math.ceil(reference.json.length / 8) * 8);
    // Two tensors of 8 MiB that want different paddings: 8 MiB placed at most.
    const halves = [placed("a", "F32", 8 * MiB, 4000), placed("b", "F16", 8 * MiB, 4000 + 8 * MiB + 4096)];
    expect(Buffer.from((await write(halves)).file).equals(Buffer.from((await write(halves, {})).file))).toBe(true);
    const bare = [placed("a", "F32", 20 * MiB, undefined)];
    expect(Buffer.from((await write(bare)).file).equals(Buffer.from((await write(bare, {})).file))).toBe(true);
    // Tensors under 1 MiB are not copied by the kernel and place nothing, however many bytes they hold.
    const small = Array.from({ length: 20 }, (_, k) => placed(`s${k}`, "F32", MiB - 4, 4000 + k * MiB));
    expect(Buffer.from((await write(small)).file).equals(Buffer.from((await write(small, {})).file))).toBe(true);
  });

  it("gives a tie to the least padding, and places no offset that is not a multiple of 8 away", async () => {
    const tensors = [placed("a", "F32", 16 * MiB, 8000), placed("b", "F32", 16 * MiB, 40000)];
    const reference = await write(tensors, {});
    const wanted = ["a", "b"].map((name, k) => {
      const from = [8000, 40000][k]!;
      return (((from - reference.starts[name]!) % SOURCE_ALIGNMENT) + SOURCE_ALIGNMENT) % SOURCE_ALIGNMENT;
    });
    expect(wanted[0]).not.toBe(wanted[1]);
    expect((await write(tensors)).n).toBe(reference.n + Math.min(...wanted));

    const odd = [placed("a", "F32", 20 * MiB, 4001)];
    expect(Buffer.from((await write(odd)).file).equals(Buffer.from((await write(odd, {})).file))).toBe(true);
  });

  it("never pads a header past the limit asked for", async () => {
    const tensors = [placed("a", "F32", 20 * MiB, 60000)];
    const reference = await write(tensors, {});
    const limited = await write(tensors, { matchSourcePages: true, maxHeaderSize: reference.n + 8 });
    expect(limited.n).toBe(reference.n);
    expect((await write(tensors)).n).toBeGreaterThan(reference.n + 8);
  });
});
