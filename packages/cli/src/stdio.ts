/**
 * `-` as a file name: stdin as an input (stdout as an output is core's descriptor sink). Readers
 * need random access and the size up front, so stdin is read where it lies when it is a regular
 * file (`< model.npz`) and otherwise (a pipe) spooled to a scratch file first: disk the size of
 * the input, memory bounded. The same spool takes the whole-file download of a URL whose server
 * ignores ranges (remoteInput.ts).
 */
import { fstatSync } from "node:fs";
import { type ByteSource, StConvertError, isStConvertError } from "@st-convert/core";
import { createScratchFile, openFileSource } from "@st-convert/core/node";

/** How stdin and stdout are named in messages. */
export const STDIN_NAME = "<stdin>";
export const STDOUT_NAME = "<stdout>";

/** A source the caller closes. */
export type ClosableSource = ByteSource & { close(): Promise<void> };

/** Bytes gathered before one scratch-file write while spooling (stdin yields 64 KiB pieces, fetch about 16 KiB). */
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
  try {
    return await spoolToScratchFile(stdin as AsyncIterable<Uint8Array | string>, STDIN_NAME);
  } catch (error) {
    if (isStConvertError(error)) throw error;
    throw new StConvertError("Io", `reading stdin failed: ${(error as Error).message}`, { file: STDIN_NAME, cause: error });
  }
}

/** Options of {@link spoolToScratchFile}. */
export interface SpoolOptions {
  /** Folder of the scratch file. Default: the system's temporary folder (TMPDIR). */
  dir?: string;
  /** Called after each write to the scratch file with the bytes spooled so far. */
  onSpooled?: (bytes: number) => void;
}

/**
 * Copies `chunks` in order into a scratch file (in writes of about a megabyte: memory stays
 * bounded whatever the size) and returns a source over it, named `name`, whose `close()` removes
 * it. The file is unlinked as soon as it is made (see `createScratchFile`), so it is gone on
 * every path, a kill included; a failure while spooling disposes of it at once and passes the
 * error on.
 * @throws what `chunks` throws, and StConvertError `Io` when the scratch file cannot be made or written.
 */
export async function spoolToScratchFile(chunks: AsyncIterable<Uint8Array | string>, name: string, options: SpoolOptions = {}): Promise<ClosableSource> {
  const scratch = await createScratchFile(options.dir === undefined ? {} : { dir: options.dir });
  try {
    let batch: Uint8Array[] = [];
    let batched = 0;
    let spooled = 0;
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
      spooled += joined.byteLength;
      options.onSpooled?.(spooled);
    };
    for await (const chunk of chunks) {
      const bytes = typeof chunk === "string" ? new TextEncoder().encode(chunk) : chunk;
      batch.push(bytes);
      batched += bytes.byteLength;
      if (batched >= SPOOL_BATCH_BYTES) await flush();
    }
    await flush();
  } catch (error) {
    await scratch.dispose();
    throw error;
  }
  const source = scratch.source();
  return { ...source, name, close: () => scratch.dispose() };
}
