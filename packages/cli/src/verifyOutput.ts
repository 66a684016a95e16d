/**
 * `convert --verify` and a batch's manifest: each tensor's SHA-256 taken while the writer pulls its
 * bytes (one read of the input), and the output read back and compared with them.
 */
import { createHash } from "node:crypto";
import { rm } from "node:fs/promises";
import { type ChunkOptions, StConvertError, type TensorEntry, type TensorFormat, type TensorSource, quoteName } from "@st-convert/core";
import { type TensorDigest, checkpointDigest, hash } from "./hash.js";
import type { InspectOptions } from "./inspect.js";

/** A source whose tensors are hashed as they are pulled, and their digests once every one was pulled whole. */
export interface DigestingSource {
  readonly source: TensorSource;
  /**
   * Each tensor's digest, from the last pass that delivered all its bytes.
   * @throws StConvertError `VerifyFailed` naming a tensor the writer never pulled whole.
   */
  digests(): TensorDigest[];
}

/**
 * Wraps `source` so that each tensor's bytes are hashed on their way to the writer. The wrapped
 * tensors have no extent: their bytes must pass through this process to be hashed, so a
 * conversion that verifies copies through memory rather than in the kernel.
 */
export function digestingSource(source: TensorSource): DigestingSource {
  const entries = source.tensors.map((entry) => new DigestingEntry(entry));
  return {
    source: { metadata: source.metadata, tensors: entries },
    digests: () =>
      entries.map((e) => {
        if (e.sha256 === undefined) {
          throw new StConvertError("VerifyFailed", "the writer did not write this tensor's bytes, so they cannot be verified", { tensor: e.name });
        }
        return { name: e.name, dtype: e.dtype, shape: [...e.shape], sha256: e.sha256 };
      }),
  };
}

const EMPTY_SHA256 = createHash("sha256").digest("hex");

class DigestingEntry implements TensorEntry {
  readonly name: string;
  readonly dtype: TensorEntry["dtype"];
  readonly shape: readonly number[];
  readonly byteLength: number;
  sha256: string | undefined;

  constructor(readonly entry: TensorEntry) {
    this.name = entry.name;
    this.dtype = entry.dtype;
    this.shape = entry.shape;
    this.byteLength = entry.byteLength;
    this.sha256 = entry.byteLength === 0 ? EMPTY_SHA256 : undefined;
  }

  async *chunks(options?: ChunkOptions): AsyncGenerator<Uint8Array> {
    const hasher = createHash("sha256");
    let seen = 0;
    for await (const chunk of this.entry.chunks(options)) {
      hasher.update(chunk);
      seen += chunk.byteLength;
      // Taken as soon as the last byte arrives: a consumer may stop without asking for the end.
      if (seen === this.byteLength) this.sha256 = hasher.digest("hex");
      else if (seen > this.byteLength) this.sha256 = undefined;
      yield chunk;
    }
  }
}

/**
 * Reads `output` back (as `format`, with the same format options) and compares its tensors with
 * `expected`: the same names, dtypes, shapes and SHA-256s. A single tensor on each side is
 * compared whatever its name (formats such as `.npy` name it after the file).
 * @throws StConvertError `VerifyFailed` naming the output and the first tensor that differs.
 */
export async function verifyWritten(
  output: string,
  format: TensorFormat | undefined,
  expected: readonly TensorDigest[],
  options: Pick<InspectOptions, "formats" | "formatOptions">,
): Promise<void> {
  const found = await hash(output, { formats: options.formats, formatOptions: options.formatOptions, from: format?.name });
  const single = expected.length === 1 && found.tensors.length === 1;
  const byName = new Map(found.tensors.map((t) => [t.name, t]));
  for (const want of expected) {
    const got = single ? found.tensors[0] : byName.get(want.name);
    const fail = (rule: string) => new StConvertError("VerifyFailed", `read back, ${rule}`, { file: output, tensor: want.name });
    if (got === undefined) throw fail("the output has no such tensor");
    if (got.dtype !== want.dtype) throw fail(`the output has dtype ${got.dtype}, the input ${want.dtype}`);
    if (JSON.stringify(got.shape) !== JSON.stringify(want.shape)) throw fail(`the output has shape [${got.shape}], the input [${want.shape}]`);
    if (got.sha256 !== want.sha256)
      throw fail(`the output's bytes differ from the input's (SHA-256 ${got.sha256.slice(0, 16)}… against ${want.sha256.slice(0, 16)}…)`);
    byName.delete(got.name);
  }
  if (!single && byName.size > 0) {
    const [extra] = byName.keys();
    throw new StConvertError("VerifyFailed", `read back, the output has ${quoteName(extra!)}, which the input did not`, { file: output });
  }
}

/** Removes the files of an output that failed its verification. */
export async function removeOutput(files: readonly string[]): Promise<void> {
  for (const file of files) await rm(file, { force: true });
}

export { checkpointDigest };
