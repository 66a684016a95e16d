/**
 * `-` as a file name: stdin as an input (stdout as an output is core's descriptor sink). Readers
 * need random access and the size up front, so stdin is read where it lies when it is a regular
 * file (`< model.npz`) and otherwise (a pipe) spooled to a scratch file first: disk the size of
 * the input, memory bounded.
 */
import { fstatSync } from "node:fs";
import { type ByteSource, StConvertError, isStConvertError } from "@st-convert/core";
import { createScratchFile, openFileSource } from "@st-convert/core/node";

/** How stdin and stdout are named in messages. */
export const STDIN_NAME = "<stdin>";
export const STDOUT_NAME = "<stdout>";

/** A source the caller closes. */
export type ClosableSource = ByteSource & { close(): Promise<void> };

/** Bytes gathered before one scratch-file write while spooling a pipe (stdin yields 64 KiB pieces). */
const SPOOL_BATCH_BYTES = 1024 * 1024;

/**
 * Stdin as a source: the file itself when stdin is redirected from one, else a scratch copy.
 * @throws StConvertError `Io` when stdin is a terminal (nothing to read) or the spool fails.
 */
export async function openStdinSource(stdin: NodeJS.ReadableStream & { isTTY?: boolean } = process.stdin): Promise<ClosableSource> {
  if (stdin.isTTY === true) throw new StConvertError("Io", "stdin is a terminal; pipe a tensor file into it or name a file", { file: STDIN_NAME });
  let isFile = false;
  try {
    isFile = fstatSync(0).isFile();
  } catch {
    // No descriptor 0 to look at (closed stdin): read the stream, which then ends at once.
  }
  if (isFile) {
    const file = await openFileSource("/dev/stdin");
    return { ...file, name: STDIN_NAME };
  }
  const scratch = await createScratchFile();
  try {
    let batch: Uint8Array[] = [];
    let batched = 0;
    const flush = async () => {
      if (batched === 0) return;
      const joined = new Uint8Array(batched);
      let at = 0;
      for (const part of batch) {
        joined.set(part, at);
        at += part.byteLength;
      }
      batch = [];
      batched = 0;
      await scratch.write(joined);
    };
    for await (const chunk of stdin) {
      const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : (chunk as Uint8Array);
      batch.push(bytes);
      batched += bytes.byteLength;
      if (batched >= SPOOL_BATCH_BYTES) await flush();
    }
    await flush();
  } catch (error) {
    await scratch.dispose();
    if (isStConvertError(error)) throw error;
    throw new StConvertError("Io", `reading stdin failed: ${(error as Error).message}`, { file: STDIN_NAME, cause: error });
  }
  const source = scratch.source();
  return { ...source, name: STDIN_NAME, close: () => scratch.dispose() };
}
