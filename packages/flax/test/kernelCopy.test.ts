// A tensor past the writer's chunk size, read from a file: each of flax's chunks is copied in the
// kernel (the native module's copy_file_range) from its part of the file, with the same bytes as
// the chunks written through memory, and the extent's check still decides.
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { StConvertError, type TensorEntry, kernels, readSafetensors, serializeSafetensors, tensorFromBytes } from "@st-convert/core";
import { type AtomicFileSink, createFileSink, openFileSource } from "@st-convert/core/node";
import { serializeFlax, writeFlax } from "@st-convert/flax";
import { makeTempDir, pseudoRandomBytes } from "@st-convert/testing";

// core/node installs the native module's kernels when it loads them; without them there is no kernel copy.
const present = kernels.crc32Range !== undefined;
if (!present && process.env.ST_CONVERT_REQUIRE_NATIVE === "1") throw new Error("the native module is required here");
const withNative = present ? describe : describe.skip;

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const MiB = 1024 * 1024;

async function fileSink(path: string): Promise<AtomicFileSink> {
  const sink = await createFileSink(path);
  if (sink.kind !== "file") throw new Error(`expected an atomic file sink, got ${sink.kind}`);
  return sink;
}

withNative("flax's chunk dict from a file", () => {
  const bytes = pseudoRandomBytes(5, 3 * MiB + 12);
  const tensor = tensorFromBytes({ name: "w", dtype: "F32", shape: [bytes.byteLength / 4] }, bytes);

  it("copies each chunk of a tensor past maxChunkSize in the kernel, with the bytes of the chunks written through memory", async () => {
    const input = join(dir, "in.safetensors");
    writeFileSync(input, await serializeSafetensors({ metadata: null, tensors: [tensor] }));
    const expected = await serializeFlax({ metadata: null, tensors: [tensor] }, { maxChunkSize: MiB });
    const source = await openFileSource(input);
    try {
      const sink = await fileSink(join(dir, "out.msgpack"));
      await writeFlax(await readSafetensors(source), sink, { maxChunkSize: MiB });
      // Three whole chunks of 1 MiB copied in the kernel; the last, 12 bytes, through the buffer.
      expect(sink.kernelCopied).toBe(3 * MiB);
      await sink.close();
    } finally {
      await source.close();
    }
    expect(Buffer.from(readFileSync(join(dir, "out.msgpack"))).equals(expected)).toBe(true);
  });

  it("fails with the extent's check (a stored member's CRC), naming the tensor, and leaves no output", async () => {
    const input = join(dir, "in.safetensors");
    writeFileSync(input, await serializeSafetensors({ metadata: null, tensors: [tensor] }));
    const source = await openFileSource(input);
    try {
      const file = await readSafetensors(source);
      const inner = file.tensors[0]!;
      const checked: TensorEntry = {
        ...inner,
        chunks: (options) => inner.chunks(options),
        extent: () => ({ ...inner.extent!()!, check: () => Promise.reject(new StConvertError("BadCrc", "bad CRC of the member")) }),
      };
      const sink = await fileSink(join(dir, "out.msgpack"));
      const error = await writeFlax({ metadata: null, tensors: [checked] }, sink, { maxChunkSize: MiB }).catch((e: unknown) => e);
      await sink.abort();
      expect(String(error)).toMatch(/bad CRC of the member/);
      expect((error as { tensor?: string }).tensor).toBe("w");
      expect(readdirSync(dir)).toEqual(["in.safetensors"]);
    } finally {
      await source.close();
    }
  });
});
