/**
 * `@st-convert/core/node`: byte sources and sinks over files, for Node. The rest of core never
 * touches `node:fs`, so it runs in browsers too.
 */
import { readSync } from "node:fs";
import { type FileHandle, link, open, rename, stat, unlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { type ByteSink, type ByteSource, type ScratchSpace, checkRange } from "./ByteSource.js";
import { StConvertError, isStConvertError, withContext } from "./StConvertError.js";

/** A {@link ByteSource} over an open file; `close()` releases the descriptor. */
export interface FileSource extends ByteSource {
  readonly name: string;
  close(): Promise<void>;
}

/**
 * Opens a file for reading ranges. The file is opened read-only and never modified.
 * @throws StConvertError `Io` when it cannot be opened (missing, a directory, no permission).
 */
export async function openFileSource(path: string): Promise<FileSource> {
  let handle: FileHandle;
  try {
    handle = await open(path, "r");
  } catch (error) {
    throw ioError(error, path, "cannot open for reading");
  }
  let size: number;
  try {
    const info = await handle.stat();
    if (info.isDirectory()) throw new StConvertError("Io", "is a directory, not a file", { file: path });
    size = info.size;
  } catch (error) {
    await handle.close();
    throw ioError(error, path, "cannot read the file's size");
  }
  return handleSource(handle, path, size);
}

/** A {@link FileSource} over an open handle holding `size` bytes; `close()` closes the handle. */
function handleSource(handle: FileHandle, path: string, size: number): FileSource {
  const source: FileSource = {
    name: path,
    size,
    async read(offset, length) {
      // A plain Uint8Array, not a Buffer: consumers may call slice() expecting a copy, which on a
      // Buffer is a view.
      const bytes = new Uint8Array(length);
      await source.readInto!(offset, bytes);
      return bytes;
    },
    async readInto(offset, target) {
      checkRange(source, offset, target.byteLength);
      try {
        for (let filled = 0; filled < target.byteLength; ) {
          const { bytesRead } = await handle.read(target, filled, target.byteLength - filled, offset + filled);
          filled = advance(bytesRead, offset, filled, target.byteLength);
        }
      } catch (error) {
        throw ioError(error, path, "read failed");
      }
    },
    readIntoSync(offset, target) {
      checkRange(source, offset, target.byteLength);
      try {
        for (let filled = 0; filled < target.byteLength; ) {
          filled = advance(readSync(handle.fd, target, filled, target.byteLength - filled, offset + filled), offset, filled, target.byteLength);
        }
      } catch (error) {
        throw ioError(error, path, "read failed");
      }
    },
    async close() {
      await handle.close();
    },
  };
  return source;
}

/** The position after a read of `bytesRead` bytes; a read of none means the file shrank under us. */
function advance(bytesRead: number, offset: number, filled: number, length: number): number {
  if (bytesRead === 0) {
    throw new StConvertError(
      "UnexpectedEof",
      `the file ended at byte ${offset + filled} while ${offset + length} were expected (was it truncated while being read?)`,
    );
  }
  return filled + bytesRead;
}

/** Options of {@link createFileSink}. */
export interface FileSinkOptions {
  /** Replace an existing file at the target. Default false: an existing target is never touched. */
  force?: boolean;
}

/** A {@link ByteSink} that writes a file atomically; `path` is the target. */
export interface FileSink extends ByteSink {
  readonly name: string;
  /** The temporary file beside the target that receives the bytes until `close()`. */
  readonly tempPath: string;
}

/**
 * A sink that writes to a temporary file beside `path` and puts it in place on `close()`; `abort()`
 * removes it. A failed or interrupted conversion therefore leaves no partial file, and an existing
 * target is replaced only with `force` (without it, the final step is a hard link, which fails if
 * the target appeared meanwhile).
 * @throws StConvertError `OutputExists` when the target exists and `force` is not set; `Io`.
 */
export async function createFileSink(path: string, options: FileSinkOptions = {}): Promise<FileSink> {
  const force = options.force ?? false;
  if (!force && (await exists(path))) {
    throw new StConvertError("OutputExists", "the output exists; pass --force (or { force: true }) to replace it", { file: path });
  }
  const tempPath = join(dirname(path), `.${basename(path)}.${uniqueTag()}.tmp`);
  let handle: FileHandle | undefined;
  try {
    handle = await open(tempPath, "wx");
  } catch (error) {
    throw ioError(error, path, "cannot create the output");
  }
  let state: "open" | "closed" | "aborted" = "open";

  const release = async (): Promise<void> => {
    const h = handle;
    handle = undefined;
    await h?.close();
  };

  const sink: FileSink = {
    name: path,
    tempPath,
    async write(chunk) {
      if (state !== "open" || handle === undefined) throw new StConvertError("Io", `write to a ${state} sink`, { file: path });
      try {
        await writeAll(handle, chunk);
      } catch (error) {
        throw ioError(error, path, "write failed");
      }
    },
    async close() {
      if (state !== "open") throw new StConvertError("Io", `close of a ${state} sink`, { file: path });
      try {
        await release();
        if (force) await rename(tempPath, path);
        else await linkIntoPlace(tempPath, path);
        state = "closed";
      } catch (error) {
        await sink.abort();
        throw ioError(error, path, "cannot put the output in place");
      }
    },
    async abort() {
      if (state === "closed") return;
      state = "aborted";
      try {
        await release();
      } catch {
        // Closing a descriptor we are discarding can only fail in ways that do not matter here.
      }
      await unlink(tempPath).catch(() => {});
    },
  };
  return sink;
}

/** Moves the temporary file to the target only if no file is there (link fails with EEXIST). */
async function linkIntoPlace(tempPath: string, path: string): Promise<void> {
  try {
    await link(tempPath, path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new StConvertError("OutputExists", "the output appeared while converting; pass --force to replace it", { file: path });
    // File systems without hard links: check, then rename (a small race, but no worse than most tools).
    if (code === "EPERM" || code === "ENOTSUP" || code === "EOPNOTSUPP" || code === "EXDEV" || code === "ENOSYS") {
      if (await exists(path)) throw new StConvertError("OutputExists", "the output appeared while converting", { file: path });
      await rename(tempPath, path);
      return;
    }
    throw error;
  }
  await unlink(tempPath);
}

/** Options of {@link createScratchFile}. */
export interface ScratchFileOptions {
  /** Folder of the file. Default: the system's temporary folder (`os.tmpdir()`, which honours `TMPDIR`). */
  dir?: string;
}

/**
 * A {@link ScratchSpace} in a temporary file. The file is unlinked as soon as it is open where the
 * system allows it (POSIX), so its bytes vanish with the descriptor even if the process is killed;
 * elsewhere `dispose()` removes it.
 * @throws StConvertError `Io` when the file cannot be made or written (the folder is missing or
 *   read-only, the disk is full).
 */
export async function createScratchFile(options: ScratchFileOptions = {}): Promise<ScratchSpace> {
  const path = join(options.dir ?? tmpdir(), `st-convert-scratch-${uniqueTag()}.tmp`);
  let handle: FileHandle | undefined;
  try {
    handle = await open(path, "wx+", 0o600);
  } catch (error) {
    throw ioError(error, path, "cannot create a scratch file");
  }
  let linked = true;
  try {
    await unlink(path);
    linked = false;
  } catch {
    // Windows may refuse to remove an open file: dispose() does it.
  }
  let size = 0;
  return {
    name: path,
    async write(chunk) {
      if (handle === undefined) throw new StConvertError("Io", "write to a disposed scratch file", { file: path });
      try {
        await writeAll(handle, chunk, size);
      } catch (error) {
        throw ioError(error, path, "scratch file write failed");
      }
      size += chunk.byteLength;
    },
    source() {
      if (handle === undefined) throw new StConvertError("Io", "read from a disposed scratch file", { file: path });
      const source = handleSource(handle, path, size);
      // The handle is the scratch file's, closed by dispose(), not by whoever reads.
      return { ...source, close: async () => {} };
    },
    async dispose() {
      const h = handle;
      handle = undefined;
      await h?.close().catch(() => {});
      if (linked) {
        linked = false;
        await unlink(path).catch(() => {});
      }
    },
  };
}

/**
 * A part of a temporary file's name: the process id and a random tag. Unique enough, since files
 * are created with "wx", which refuses an existing name rather than reuse it. (node:crypto would add
 * about 4 ms of start-up to every conversion.)
 */
function uniqueTag(): string {
  return `${process.pid}-${Math.random().toString(36).slice(2, 10)}`;
}

/** Writes all of `chunk`: at `position` when given, else at the file's own position. */
async function writeAll(handle: FileHandle, chunk: Uint8Array, position?: number): Promise<void> {
  for (let done = 0; done < chunk.byteLength; ) {
    const { bytesWritten } = await handle.write(chunk, done, chunk.byteLength - done, position === undefined ? null : position + done);
    done += bytesWritten;
  }
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw ioError(error, path, "cannot check the output");
  }
}

/** Wraps an operating-system error in an `Io` StConvertError with a readable rule; passes our own errors through. */
function ioError(error: unknown, file: string, what: string): unknown {
  if (isStConvertError(error)) return withContext(error, { file });
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  const reason =
    code === "ENOENT"
      ? "no such file or directory"
      : code === "EACCES" || code === "EPERM"
        ? "permission denied"
        : code === "EISDIR"
          ? "is a directory"
          : code === "ENOSPC"
            ? "no space left on the device"
            : code === "EROFS"
              ? "read-only file system"
              : ((error as Error | undefined)?.message ?? String(error));
  return new StConvertError("Io", `${what}: ${reason}`, { file, cause: error });
}
