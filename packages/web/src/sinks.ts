/**
 * Where a conversion's bytes go in a browser: a `Blob` assembled as they come (then offered as a
 * download), or a file on disk through the File System Access API, written as it streams.
 */
import { type ByteSink, StConvertError } from "@st-convert/core";

/**
 * Bytes gathered before they are folded into a `Blob`: the page's own memory holds at most this
 * much of the output; the rest lives in the browser's blob storage (which may keep it on disk).
 */
export const BLOB_FOLD_BYTES = 16 * 1024 * 1024;

/** A sink that builds a `Blob`; `blob()` gives it once the sink is closed. */
export class BlobSink implements ByteSink {
  readonly name: string | undefined;
  readonly #type: string;
  #parts: Blob[] = [];
  #pending: Uint8Array[] = [];
  #pendingBytes = 0;
  #size = 0;
  #state: "open" | "closed" | "aborted" = "open";
  #blob: Blob | undefined;

  constructor(name?: string, type = "application/octet-stream") {
    this.name = name;
    this.#type = type;
  }

  async write(chunk: Uint8Array): Promise<void> {
    if (this.#state !== "open") throw new StConvertError("Io", `write to a ${this.#state} output`, { file: this.name });
    // A copy: the writer may reuse its buffer once the promise settles.
    this.#pending.push(new Uint8Array(chunk));
    this.#pendingBytes += chunk.byteLength;
    this.#size += chunk.byteLength;
    if (this.#pendingBytes >= BLOB_FOLD_BYTES) this.#fold();
  }

  async close(): Promise<void> {
    if (this.#state === "aborted") throw new StConvertError("Io", "close of an aborted output", { file: this.name });
    this.#fold();
    this.#blob = new Blob(this.#parts as BlobPart[], { type: this.#type });
    this.#parts = [];
    this.#state = "closed";
  }

  async abort(): Promise<void> {
    this.#state = "aborted";
    this.#parts = [];
    this.#pending = [];
    this.#pendingBytes = 0;
  }

  /** Bytes written so far. */
  get size(): number {
    return this.#size;
  }

  /**
   * The output.
   * @throws StConvertError `Io` before the sink was closed.
   */
  blob(): Blob {
    if (this.#blob === undefined) throw new StConvertError("Io", "the output is not complete", { file: this.name });
    return this.#blob;
  }

  #fold(): void {
    if (this.#pending.length === 0) return;
    this.#parts.push(new Blob(this.#pending as BlobPart[]));
    this.#pending = [];
    this.#pendingBytes = 0;
  }
}

/** The part of `FileSystemWritableFileStream` a {@link writableSink} uses. */
export interface WritableFile {
  write(data: Uint8Array): Promise<void>;
  close(): Promise<void>;
  abort(reason?: unknown): Promise<void>;
}

/**
 * A sink over a file opened for writing with the File System Access API. The browser writes to a
 * temporary file and puts it in place on `close()` only, so a failed conversion (`abort()`) leaves
 * the chosen file as it was.
 * @throws StConvertError `Io` (from `write`/`close`) when the browser refuses the write.
 */
export function writableSink(file: WritableFile, name?: string): ByteSink {
  let done = false;
  const io = (what: string, error: unknown) =>
    new StConvertError("Io", `${what} failed: ${error instanceof Error ? error.message : String(error)}`, { file: name, cause: error });
  return {
    name,
    async write(chunk) {
      try {
        // The write is awaited: the stream has taken the bytes before the writer may reuse them.
        await file.write(chunk);
      } catch (error) {
        throw io("writing", error);
      }
    },
    async close() {
      done = true;
      try {
        await file.close();
      } catch (error) {
        throw io("saving", error);
      }
    },
    async abort() {
      if (done) return;
      done = true;
      await file.abort().catch(() => {});
    },
  };
}
