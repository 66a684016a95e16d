/**
 * `@st-convert/core/node`: byte sources and sinks over files, for Node. The rest of core never
 * touches `node:fs`, so it runs in browsers too.
 */
import {
  type Stats,
  closeSync,
  constants,
  fchmodSync,
  fchownSync,
  fstatSync,
  linkSync,
  lstatSync,
  openSync,
  read,
  readSync,
  readlinkSync,
  realpathSync,
  renameSync,
  statSync,
  unlinkSync,
  write,
  writeSync,
} from "node:fs";
import { type FileHandle, lstat, open, readdir, unlink } from "node:fs/promises";
import { constants as osConstants, tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { type CopyRangeError, nativeIo } from "@st-convert/native";
import { type ByteSink, type ByteSource, DEFAULT_CHUNK_SIZE, type ScratchSpace, WRITTEN, checkRange } from "./ByteSource.js";
import { kernels } from "./kernels.js";
import { StConvertError, endedEarly, isStConvertError, withContext } from "./StConvertError.js";

/** A {@link ByteSource} over an open file; `close()` releases the descriptor. */
export interface FileSource extends ByteSource {
  readonly name: string;
  /**
   * The open descriptor of a regular file, which a file sink may copy from in the kernel
   * ({@link AtomicFileSink.copyFrom}); undefined for a pipe or a device. The source owns it.
   */
  readonly fd: number | undefined;
  close(): Promise<void>;
}

// The native module's CRC-32 (PCLMULQDQ, about 3× zlib's here), for every zip member checked or
// written under Node, and the JSON form's F32 loops. Installed when this entry point loads: the browser-safe code that computes
// CRCs looks for it in `kernels` and uses zlib's or fflate's otherwise.
const native = nativeIo();
if (native !== undefined) {
  kernels.crc32 = native.crc32;
  kernels.crc32Range = native.crc32Range;
  kernels.readRuns = native.readRuns;
  kernels.formatFloat32s = native.formatFloat32s;
  kernels.formatFloat32sAsync = native.formatFloat32sAsync;
  kernels.storeFloat32Run = native.storeFloat32Run;
  kernels.numberRun = native.numberRun;
  kernels.float32Lossless = native.float32Lossless;
  kernels.readerSplits = native.readerSplits;
  kernels.jsonSimd = native.jsonSimd;
  kernels.castFloats = native.castFloats;
}

/**
 * Reads and writes below this size are made synchronously on regular files, as are the calls that
 * only touch metadata (open, stat, link, rename, close): each takes a few µs that way, where a trip
 * through Node's thread pool costs tens of µs however little it does, which made a batch of 2,000
 * small files spend most of its time waiting on the pool. Larger transfers stay asynchronous, so a
 * big conversion keeps reading while it writes.
 */
export const SYNC_IO_BELOW = 64 * 1024;

/** Options of {@link openFileSource}. */
export interface OpenFileOptions {
  /**
   * Refuse anything but a regular file (a FIFO, a device, a socket), before opening it for
   * reading: what an index names as a shard must be a file, and a FIFO without a writer would
   * block the open or the first read forever. Default false: an input may be a pipe.
   */
  regularOnly?: boolean;
}

/**
 * Opens a file for reading ranges. The file is opened read-only and never modified.
 * @throws StConvertError `Io` when it cannot be opened (missing, a directory, no permission), or
 *   with `regularOnly` when it is not a regular file.
 */
export async function openFileSource(path: string, options: OpenFileOptions = {}): Promise<FileSource> {
  // A regular file is opened synchronously. Non-blocking, so that a FIFO without a writer cannot
  // stop the process (signals included) in open(); a FIFO or device is opened again, in the pool.
  const nonBlocking = constants.O_NONBLOCK;
  if (nonBlocking !== undefined && process.platform !== "win32") {
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDONLY | nonBlocking);
    } catch (error) {
      throw ioError(error, path, "cannot open for reading");
    }
    let info: Stats;
    try {
      info = fstatSync(fd);
    } catch (error) {
      closeSync(fd);
      throw ioError(error, path, "cannot read the file's size");
    }
    if (info.isFile()) return descriptorSource(fd, path, info.size, true, () => closeSync(fd));
    closeSync(fd);
    if (info.isDirectory()) throw new StConvertError("Io", "is a directory, not a file", { file: path });
    if (options.regularOnly === true) throw notRegular(info, path);
  } else if (options.regularOnly === true) {
    // Where a non-blocking open is not available, a stat first (it follows links, as open does).
    let info: Stats;
    try {
      info = statSync(path);
    } catch (error) {
      throw ioError(error, path, "cannot open for reading");
    }
    if (!info.isFile()) throw notRegular(info, path);
  }
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
  return descriptorSource(handle.fd, path, size, false, () => handle.close());
}

function notRegular(info: Stats, path: string): StConvertError {
  const kind = info.isDirectory()
    ? "a directory"
    : info.isFIFO()
      ? "a FIFO"
      : info.isSocket()
        ? "a socket"
        : info.isCharacterDevice() || info.isBlockDevice()
          ? "a device"
          : "not a regular file";
  return new StConvertError("Io", `is ${kind}, not a regular file; an index's shards must be regular files`, { file: path });
}

/** One read into `target` from `offset` of the file; resolves to the bytes read. */
function readAt(fd: number, target: Uint8Array, offset: number, length: number, position: number): Promise<number> {
  return new Promise((resolve, reject) =>
    read(fd, target, offset, length, position, (error, bytesRead) => (error === null ? resolve(bytesRead) : reject(error))),
  );
}

/**
 * A {@link FileSource} over the open descriptor `fd` of a file holding `size` bytes (`regular`: a
 * regular file, which sinks may copy from in the kernel); `close()` calls `release` once. Reads below {@link SYNC_IO_BELOW} are synchronous.
 */
function descriptorSource(fd: number, path: string, size: number, regular: boolean, release: () => void | Promise<void>): FileSource {
  let released = false;
  const source: FileSource = {
    name: path,
    size,
    fd: regular ? fd : undefined,
    async read(offset, length) {
      // A plain Uint8Array, not a Buffer: consumers may call slice() expecting a copy, which on a
      // Buffer is a view.
      const bytes = new Uint8Array(length);
      await source.readInto!(offset, bytes);
      return bytes;
    },
    async readInto(offset, target) {
      if (target.byteLength < SYNC_IO_BELOW) {
        source.readIntoSync!(offset, target);
        return;
      }
      checkRange(source, offset, target.byteLength);
      try {
        for (let filled = 0; filled < target.byteLength; ) {
          const bytesRead = await readAt(fd, target, filled, target.byteLength - filled, offset + filled);
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
          filled = advance(readSync(fd, target, filled, target.byteLength - filled, offset + filled), offset, filled, target.byteLength);
        }
      } catch (error) {
        throw ioError(error, path, "read failed");
      }
    },
    async close() {
      if (released) return;
      released = true;
      await release();
    },
  };
  return source;
}

/** The position after a read of `bytesRead` bytes; a read of none means the file shrank under us. */
function advance(bytesRead: number, offset: number, filled: number, length: number): number {
  if (bytesRead === 0) throw endedEarly(offset + filled, offset + length);
  return filled + bytesRead;
}

/** Options of {@link createFileSink}. */
export interface FileSinkOptions {
  /**
   * Replace an existing regular file at the target (or at the file a symbolic link there points
   * to). Default false: an existing file is never touched. Pipes and character devices are written
   * into with or without it; directories and other kinds of file are refused even with it.
   */
  force?: boolean;
  /**
   * Leave the finished file at its temporary name on `close()`; `place()` then puts it in place.
   * For outputs of several files (a sharded checkpoint) that must all appear or none: close each,
   * then place each, and abort every one if anything failed. Default false.
   */
  deferPlacement?: boolean;
  /**
   * The caller knows that nothing is at `path` and that its folder exists: a batch writing into an
   * output folder it made itself. The path is then not looked at before writing (a look that costs
   * as much as creating the file, in a folder of thousands). Whatever another process puts there
   * meanwhile is still never clobbered without `force`, and never replaced unless it is a regular
   * file: an exclusive create or a link refuses it. Default false.
   */
  absent?: boolean;
}

/**
 * A sink that writes a file atomically: into a temporary file beside the target, put in place on
 * `close()`, removed on `abort()`.
 */
export interface AtomicFileSink extends ByteSink {
  readonly kind: "file";
  /** The path as given. */
  readonly name: string;
  /** Where the file lands: the path itself, or the file a symbolic link there resolves to. */
  readonly targetPath: string;
  /** The temporary file beside `targetPath` that receives the bytes until `close()`. */
  readonly tempPath: string;
  /**
   * Appends bytes of a local regular file ({@link FileSource}) by `copy_file_range`, in the
   * kernel, where the native module is loaded (`@st-convert/native`); undefined otherwise, and for
   * any other source. Where the kernel refuses this pair of files (another file system, one that
   * cannot), this copy and every later one go through memory instead, with the same bytes.
   */
  copyFrom(source: ByteSource, offset: number, length: number): Promise<void> | undefined;
  /**
   * {@link copyFrom} through the native module's buffers, with the CRC-32 of the bytes taken as
   * they pass (`copyRangeCrc32`); undefined where `copyFrom` would be, or once copies here go
   * through memory.
   */
  copyFromCrc32(source: ByteSource, offset: number, length: number, previous: number): Promise<number> | undefined;
  /** Bytes appended by kernel copies (and the native module's buffered copies) so far (tests and benchmarks look at it). */
  readonly kernelCopied: number;
  /**
   * With `deferPlacement`: puts the closed file in place (as `close()` does otherwise), once.
   * @throws StConvertError `OutputExists` when a file appeared there meanwhile and `force` is off.
   */
  place(): Promise<void>;
}

/**
 * A sink that writes straight into a pipe, a character device or an open descriptor: nothing is
 * created, renamed or removed, so what a reader has received stays received even if `abort()` follows.
 */
export interface StreamSink extends ByteSink {
  readonly kind: "stream";
  /** The path or label as given. */
  readonly name: string;
}

/** What {@link createFileSink} makes: `kind` tells whether the output appears atomically. */
export type FileSink = AtomicFileSink | StreamSink;

/**
 * Writes below this size are copied into the sink's buffer instead of making a write each: a copy
 * of 64 KiB takes a few µs, a write through Node's thread pool costs tens of µs however small it is
 * (a checkpoint of 50,000 tiny tensors made 50,000 of them).
 */
export const SINK_COALESCE_BELOW = 64 * 1024;

/**
 * Size of a sink's buffer for small writes, written out when full, before a large write and on
 * `close()`: one write per MiB of small chunks, and little memory for each open sink.
 */
export const SINK_BUFFER_SIZE = 1024 * 1024;

/** The gathering buffer's first size; it doubles up to {@link SINK_BUFFER_SIZE} as writes need. */
const SINK_FIRST_BUFFER = 1024;

/** Symbolic links followed from an output path before giving up: Linux's own limit (MAXSYMLINKS). */
const MAX_SYMLINK_HOPS = 40;

/**
 * Waits after EAGAIN, which a descriptor that another part of the process made non-blocking (Node
 * does that to a pipe on stdout once `process.stdout` is used) returns while the reader is behind.
 * Node cannot wait for such a descriptor to become writable, so the write is retried after a pause
 * that doubles from 1 ms up to 32 ms, short enough to keep a pipe busy, long enough not to spin.
 */
const EAGAIN_FIRST_WAIT_MS = 1;
const EAGAIN_MAX_WAIT_MS = 32;

/**
 * Opens the output at `path`, choosing by what is there:
 * - nothing: a temporary file beside it (mode 0666 less the umask) is hard-linked into place on
 *   `close()`, so a file that appeared meanwhile is not clobbered without `force`;
 * - a regular file: replaced only with `force`; the new file keeps its permission bits (and, where
 *   the process may set them, its owner and group), set before any byte is written;
 * - a symbolic link: followed, and the rules above apply where it leads, so the link stays a link
 *   and the file it points to is replaced (a dangling link: the file it names is created, if its
 *   folder exists);
 * - a FIFO or a character device (`/dev/null`, a terminal): opened and written into, with or without
 *   `force`, never renamed over or removed (`kind: "stream"`; opening a FIFO waits for its reader);
 * - one of this process's own descriptors (`/dev/stdout`, `/dev/fd/N`, `/proc/self/fd/N`): written
 *   into at its position, as {@link createDescriptorSink} does, whatever it is open on.
 * Small writes are gathered into a buffer ({@link SINK_BUFFER_SIZE}); `close()` writes it out.
 * @throws StConvertError `OutputExists` for an existing file without `force`; `Io` for a directory
 *   (also any path ending in a separator), a block device, a socket or another kind of file (even
 *   with `force`, and nothing is touched), for a link loop, or when the output cannot be created.
 */
export async function createFileSink(path: string, options: FileSinkOptions = {}): Promise<FileSink> {
  const force = options.force ?? false;
  if (options.absent === true) return atomicSink(path, path, undefined, force, options.deferPlacement ?? false, true);
  const output = await resolveOutput(path);
  switch (output.kind) {
    case "missing":
      return atomicSink(path, output.path, undefined, force, options.deferPlacement ?? false, false);
    case "file":
      if (!force) {
        const rule = output.path === path ? "the output exists" : `the output's link points to an existing file (${output.path})`;
        throw new StConvertError("OutputExists", `${rule}; pass --force (or { force: true }) to replace it`, { file: path });
      }
      return atomicSink(path, output.path, output.info, force, options.deferPlacement ?? false, false);
    case "device":
      return deviceSink(path, output.path);
    case "descriptor":
      return createDescriptorSink(output.fd, path);
  }
}

/**
 * A sink that writes into an open descriptor at its position (stdout for an output of `-`):
 * nothing is created, renamed or removed, and `close()` writes out the buffered bytes but leaves
 * the descriptor open (it is the caller's). Small writes are gathered as in {@link createFileSink}.
 * A reader that went away (EPIPE, as after `| head`) fails the write with `BrokenPipe`, which a
 * command may treat as a quiet end; a non-blocking descriptor that is full is waited for.
 * @throws StConvertError `Io` when `fd` is not open, or is a directory or a block device.
 */
export function createDescriptorSink(fd: number, name = `descriptor ${fd}`): StreamSink {
  let info: Stats;
  try {
    info = fstatSync(fd);
  } catch (error) {
    throw ioError(error, name, "cannot write to the descriptor");
  }
  // Already open for us (a socket or a redirected file included): only what nothing writes to is refused.
  if (info.isDirectory() || info.isBlockDevice()) throw new StConvertError("Io", refusal(info), { file: name });
  const out = (bytes: Uint8Array, offset: number, length: number) =>
    new Promise<number>((resolve, reject) => write(fd, bytes, offset, length, null, (error, written) => (error === null ? resolve(written) : reject(error))));
  return streamSink(name, out, async () => {});
}

/** Where an output path leads, after following symbolic links. */
type Output =
  | { kind: "missing"; path: string }
  | { kind: "file"; path: string; info: Stats }
  | { kind: "device"; path: string }
  | { kind: "descriptor"; fd: number };

/** Follows `path` through symbolic links to what the output will be; refuses what it must not write. */
async function resolveOutput(path: string): Promise<Output> {
  if (path === "") throw new StConvertError("Io", "an empty path names no file", { file: path });
  if (path.endsWith("/") || (process.platform === "win32" && path.endsWith("\\"))) {
    throw new StConvertError("Io", "is a directory (the path ends with a separator); name a file", { file: path });
  }
  let current = path;
  for (let hops = 0; ; hops++) {
    const fd = ownDescriptor(current);
    if (fd !== undefined) return { kind: "descriptor", fd };
    const through = current === path ? "" : `the link's target ${current} `;
    let info: Stats | undefined;
    try {
      info = lstatSync(current, { throwIfNoEntry: false });
    } catch (error) {
      throw ioError(error, path, `cannot check ${through || "the output"}`.trimEnd());
    }
    if (info === undefined) return { kind: "missing", path: current };
    if (!info.isSymbolicLink()) {
      if (info.isFile()) return { kind: "file", path: current, info };
      if (info.isFIFO() || info.isCharacterDevice()) return { kind: "device", path: current };
      throw new StConvertError("Io", `${through}${refusal(info)}`, { file: path });
    }
    if (hops === MAX_SYMLINK_HOPS) throw new StConvertError("Io", `more than ${MAX_SYMLINK_HOPS} symbolic links in a row (a loop?)`, { file: path });
    try {
      // Relative to the link's real folder, as the system resolves it: a lexical `..` after a
      // linked folder would land elsewhere.
      current = resolve(realpathSync(dirname(current)), readlinkSync(current));
    } catch (error) {
      throw ioError(error, path, "cannot follow the symbolic link");
    }
  }
}

/**
 * The descriptor that a path names when it is one of this process's own (`/dev/fd/N`,
 * `/proc/self/fd/N`; `/dev/stdout` links to one of them): writing to it in place keeps the
 * caller's redirection (`>>` appends), where opening the path anew would start at byte 0.
 */
function ownDescriptor(path: string): number | undefined {
  if (process.platform === "win32") return undefined;
  const match = /^\/(?:dev\/fd|proc\/(?:self|thread-self|(\d+))\/fd)\/(\d+)$/.exec(resolve(path));
  if (match === null || (match[1] !== undefined && Number(match[1]) !== process.pid)) return undefined;
  return Number(match[2]);
}

const WRITABLE_KINDS = "st-convert writes only regular files, pipes (FIFOs) and character devices";

/** Why a file of this kind cannot be written as an output. */
function refusal(info: Stats): string {
  if (info.isDirectory()) return "is a directory; name a file";
  if (info.isBlockDevice()) return `is a block device; ${WRITABLE_KINDS}`;
  if (info.isSocket()) return `is a socket; ${WRITABLE_KINDS}`;
  return `is not a regular file; ${WRITABLE_KINDS}`;
}

/**
 * The sink of {@link createFileSink} for a missing target or a regular file (`existing`).
 *
 * A new output (nothing to replace, placement not deferred, its folder there) gets no temporary
 * file until bytes leave the sink's buffer: one that fits the buffer ({@link SINK_BUFFER_SIZE})
 * whole is created at its own name on `close()`, exclusively (`O_EXCL`: a file that appeared
 * meanwhile is never clobbered), and written and closed by synchronous calls in the same turn, so
 * no signal handler, no abort and no other write runs in between; a failed write removes it. A
 * folder of thousands of small outputs pays one directory operation per file instead of three
 * (create, link, unlink), and only SIGKILL or a power cut between two system calls could leave
 * such a file short.
 */
async function atomicSink(
  name: string,
  targetPath: string,
  existing: Stats | undefined,
  force: boolean,
  defer: boolean,
  folderKnown: boolean,
): Promise<AtomicFileSink> {
  const tempPath = join(dirname(targetPath), `.${basename(targetPath)}.${uniqueTag()}.tmp`);
  const openTemp = (): number => {
    let fd: number | undefined;
    try {
      // Replacing a file: private until it has the replaced file's mode, set before any byte is written.
      fd = openSync(tempPath, "wx", existing === undefined ? 0o666 : 0o600);
      if (existing !== undefined) keepOwnerAndMode(fd, existing);
      return fd;
    } catch (error) {
      if (fd !== undefined) {
        quietly(() => closeSync(fd!));
        quietly(() => unlinkSync(tempPath));
      }
      throw ioError(error, name, cannotCreate(name, targetPath));
    }
  };
  // A missing folder is reported now, as creating the temporary file would (by doing it), not
  // after the conversion.
  const direct = existing === undefined && !defer && (folderKnown || statSync(dirname(targetPath), { throwIfNoEntry: false })?.isDirectory() === true);
  let fd = direct ? undefined : openTemp();
  const file = (): number => (fd ??= openTemp());
  const writer = new CoalescingWriter(
    (bytes, offset, length) => writeAt(file(), bytes, offset, length),
    (bytes, position) => writePositioned(file(), bytes, position),
  );
  let state: "open" | "written" | "closed" | "aborted" = "open";
  let closed = false;
  let kernelCopied = 0;
  /** Set once the kernel refused a copy into this file: the rest go through memory. */
  let throughMemory = false;
  const release = async (): Promise<void> => {
    if (closed || fd === undefined) return;
    closed = true;
    closeSync(fd);
  };

  /** A copy this sink refuses before starting it (it is not open, the range lies past the source), else undefined. */
  const copyRefused = (source: ByteSource, offset: number, length: number): Promise<never> | undefined => {
    if (state !== "open") return Promise.reject(new StConvertError("Io", `write to a ${state} sink`, { file: name }));
    try {
      checkRange(source, offset, length);
    } catch (error) {
      return Promise.reject(error);
    }
    return undefined;
  };

  const sink: AtomicFileSink = {
    kind: "file",
    name,
    targetPath,
    tempPath,
    get kernelCopied() {
      return kernelCopied;
    },
    write: (chunk) => writeWhileOpen(writer, state, name, chunk),
    copyFrom(source, offset, length) {
      const from = (source as Partial<FileSource>).fd;
      const io = native;
      if (typeof from !== "number" || io === undefined || throughMemory) return undefined;
      const refused = copyRefused(source, offset, length);
      if (refused !== undefined) return refused;
      const step = async (): Promise<void> => {
        let copied: number;
        try {
          copied = await io.copyRange(from, offset, file(), -1, length);
        } catch (error) {
          const { errno, copied: before } = error as CopyRangeError;
          if (!COPY_ELSEWHERE.has(errno)) throw systemError(error as CopyRangeError);
          // Another file system, or one that cannot: the rest of this copy, and every later one, through memory.
          throughMemory = true;
          kernelCopied += before;
          await copyFromFile(source, offset + before, length - before, file());
          return;
        }
        kernelCopied += copied;
        if (copied < length) throw endedEarly(offset + copied, offset + length, source.name);
      };
      return writer.copy(step, length).catch((error: unknown) => {
        throw ioError(error, name, "write failed");
      });
    },
    copyFromFile(source, offset, length) {
      const local = typeof (source as Partial<FileSource>).fd === "number" && source.readInto !== undefined;
      if (!local || (native !== undefined && !throughMemory)) return undefined;
      const refused = copyRefused(source, offset, length);
      if (refused !== undefined) return refused;
      return writer
        .copy(() => copyFromFile(source, offset, length, file()), length)
        .catch((error: unknown) => {
          throw ioError(error, name, "write failed");
        });
    },
    copyFromCrc32(source, offset, length, previous) {
      const from = (source as Partial<FileSource>).fd;
      const io = native;
      if (typeof from !== "number" || io === undefined || throughMemory) return undefined;
      const refused = copyRefused(source, offset, length);
      if (refused !== undefined) return refused;
      let crc = previous;
      const step = async (): Promise<void> => {
        try {
          crc = await io.copyRangeCrc32(from, offset, file(), -1, length, previous);
        } catch (error) {
          const { errno, copied } = error as CopyRangeError;
          kernelCopied += copied;
          if (errno === 0) throw endedEarly(offset + copied, offset + length, source.name);
          throw systemError(error as CopyRangeError);
        }
        kernelCopied += length;
      };
      return writer.copy(step, length).then(
        () => crc,
        (error: unknown) => {
          throw ioError(error, name, "write failed");
        },
      );
    },
    async patch(position, bytes) {
      if (state !== "open") throw new StConvertError("Io", `patch of a ${state} sink`, { file: name });
      await writer.patch(position, bytes).catch((error: unknown) => {
        throw ioError(error, name, "write failed");
      });
    },
    async close() {
      if (state !== "open") throw new StConvertError("Io", `close of a ${state} sink`, { file: name });
      try {
        await writer.settled().catch((error: unknown) => {
          throw ioError(error, name, "write failed");
        });
        const whole = fd === undefined ? writer.held() : undefined;
        if (whole !== undefined && createWhole(targetPath, name, whole, force)) {
          state = "closed";
          return;
        }
        await writer.flush().catch((error: unknown) => {
          throw ioError(error, name, "write failed");
        });
        // Nothing written at all still makes an (empty) file.
        file();
        await release();
        if (defer) {
          state = "written";
          return;
        }
        await putInPlace(tempPath, targetPath, name, force);
        state = "closed";
      } catch (error) {
        await sink.abort();
        throw ioError(error, name, "cannot put the output in place");
      }
    },
    async place() {
      if (state !== "written") throw new StConvertError("Io", `place of a ${state} sink (only a closed, deferred one can be placed)`, { file: name });
      try {
        await putInPlace(tempPath, targetPath, name, force);
        state = "closed";
      } catch (error) {
        await sink.abort();
        throw ioError(error, name, "cannot put the output in place");
      }
    },
    async abort() {
      if (state === "closed") return;
      state = "aborted";
      writer.discard();
      if (fd === undefined) return;
      try {
        await release();
      } catch {
        // Closing a descriptor we are discarding can only fail in ways that do not matter here.
      }
      quietly(() => unlinkSync(tempPath));
    },
  };
  return sink;
}

/**
 * Creates the new output `path` holding `bytes`, all by synchronous calls (see {@link atomicSink}).
 * False when a file appeared there meanwhile and `force` allows replacing it: the caller then goes
 * the way of a temporary file and a rename.
 * @throws StConvertError `OutputExists` when a file appeared there meanwhile without `force`;
 *   `Io` when it cannot be created or written (then it is removed).
 */
function createWhole(path: string, name: string, bytes: Uint8Array, force: boolean): boolean {
  let fd: number;
  try {
    fd = openSync(path, constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL, 0o666);
  } catch (error) {
    if ((error as NodeJS.ErrnoException).code !== "EEXIST") {
      throw ioError(error, name, cannotCreate(name, path));
    }
    if (force) return false;
    throw new StConvertError("OutputExists", "the output appeared while converting; pass --force to replace it", { file: name });
  }
  try {
    for (let done = 0; done < bytes.byteLength; ) {
      const written = writeSync(fd, bytes, done, bytes.byteLength - done);
      if (written === 0) throw new StConvertError("Io", `the output took none of ${bytes.byteLength - done} bytes`);
      done += written;
    }
    closeSync(fd);
  } catch (error) {
    quietly(() => closeSync(fd));
    quietly(() => unlinkSync(path));
    throw ioError(error, name, "write failed");
  }
  return true;
}

/** What failed when the output `name` (through a link: the file `path` it leads to) could not be created. */
function cannotCreate(name: string, path: string): string {
  return path === name ? "cannot create the output" : `cannot create the output's link target ${path}`;
}

/** Runs `step`, ignoring its failure (a clean-up that may find nothing to clean). */
function quietly(step: () => void): void {
  try {
    step();
  } catch {
    // Nothing to undo, or nothing more to do about it.
  }
}

/** Writes all of `bytes` at `position` of the file (bytes written before, changed in place). */
async function writePositioned(fd: number, bytes: Uint8Array, position: number): Promise<void> {
  for (let done = 0; done < bytes.byteLength; ) done += await writeAt(fd, bytes, done, bytes.byteLength - done, position + done);
}

/**
 * One write at `position`, or at the descriptor's own position when it is null: synchronous below
 * {@link SYNC_IO_BELOW}, else in the thread pool. Either way a promise, rejected on failure.
 */
function writeAt(fd: number, bytes: Uint8Array, offset: number, length: number, position: number | null = null): Promise<number> {
  if (length < SYNC_IO_BELOW) {
    try {
      return Promise.resolve(writeSync(fd, bytes, offset, length, position));
    } catch (error) {
      return Promise.reject(error);
    }
  }
  return new Promise((resolve, reject) => write(fd, bytes, offset, length, position, (error, written) => (error === null ? resolve(written) : reject(error))));
}

/**
 * Gives a replacement the replaced file's permission bits (as `cp` onto an existing file leaves
 * them), and its owner and group where this process may (root; a group the user is in). The
 * set-user-ID, set-group-ID and sticky bits are not carried over to new bytes. Where the file
 * system refuses, the replacement keeps what it has: 0600 and this process's owner, never wider.
 */
function keepOwnerAndMode(fd: number, existing: Stats): void {
  const mine = fstatSync(fd);
  if (mine.uid !== existing.uid || mine.gid !== existing.gid) {
    // Not ours to give away (EPERM): the file belongs to whoever writes it, as with any new file.
    quietly(() => fchownSync(fd, existing.uid, existing.gid));
  }
  // Refused by a file system without Unix modes (some network and FUSE mounts).
  quietly(() => fchmodSync(fd, existing.mode & 0o777));
}

/**
 * Moves the finished temporary file to the target, deciding on what is there now: anything but a
 * regular file is refused (a directory, a link or a device that appeared while converting is never
 * replaced); with `force`, a rename over whatever regular file or nothing is there; without, a hard
 * link, which fails if a file appears meanwhile.
 */
async function putInPlace(tempPath: string, targetPath: string, name: string, force: boolean): Promise<void> {
  const now = lstatSync(targetPath, { throwIfNoEntry: false });
  if (now !== undefined && !now.isFile()) {
    throw new StConvertError("Io", `${targetPath} became another kind of file while converting; it was left untouched`, { file: name });
  }
  if (force) {
    // A regular file there: swapped out, not renamed over (see replaceFile). Nothing there: one
    // rename (a folder of thousands of small outputs pays for each directory operation, and a
    // link and an unlink are two).
    if (now === undefined || !replaceByExchange(tempPath, targetPath, name)) renameSync(tempPath, targetPath);
    return;
  }
  if (now !== undefined) throw new StConvertError("OutputExists", "the output appeared while converting; pass --force to replace it", { file: name });
  await linkIntoPlace(tempPath, targetPath, name);
}

/**
 * Moves the file `from` to `to` as `rename` does (atomically: `to` names the old file or the new
 * one, never neither), but where `to` is a regular file, by swapping the two names (renameat2's
 * RENAME_EXCHANGE, through the native module) and then removing the old file under `from`'s name.
 * On ext4 a rename over an existing file first allocates and starts writing out the new file's
 * delayed blocks (its `auto_da_alloc` safeguard): 1.5–2.9 s of one rename for a GiB just written
 * here, where the swap takes under a millisecond and removing the old GiB 0.7–0.9 s (this
 * machine's file system discards freed blocks), which the rename pays too. Without the native
 * module, or on a file system that cannot swap, a plain rename.
 * @throws what `rename` throws; StConvertError `Io` when something other than a regular file was
 *   swapped out of `to` meanwhile (it is swapped back).
 */
export function replaceFile(from: string, to: string): void {
  const there = lstatSync(to, { throwIfNoEntry: false });
  if (there === undefined || !there.isFile() || !replaceByExchange(from, to, to)) renameSync(from, to);
}

/**
 * {@link replaceFile}'s swap: false, with nothing changed, when it cannot be done here; true once
 * `to` holds the new file and the old one is removed.
 */
function replaceByExchange(from: string, to: string, name: string): boolean {
  const exchange = native?.exchangePaths;
  if (exchange === undefined) return false;
  try {
    exchange(from, to);
  } catch {
    // EINVAL (a file system without the swap), ENOENT (the target went away meanwhile), ENOSYS: rename instead.
    return false;
  }
  const old = lstatSync(from, { throwIfNoEntry: false });
  if (old !== undefined && !old.isFile()) {
    // What was swapped out appeared after the check (a folder, a link): put back, never removed.
    quietly(() => exchange(from, to));
    throw new StConvertError("Io", `${to} became another kind of file while converting; it was left untouched`, { file: name });
  }
  quietly(() => unlinkSync(from));
  return true;
}

/** Moves the temporary file to the target only if no file is there (link fails with EEXIST). */
async function linkIntoPlace(tempPath: string, path: string, name: string): Promise<void> {
  try {
    linkSync(tempPath, path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException).code;
    if (code === "EEXIST") throw new StConvertError("OutputExists", "the output appeared while converting; pass --force to replace it", { file: name });
    // File systems without hard links: check, then rename (a small race, but no worse than most tools).
    if (code === "EPERM" || code === "ENOTSUP" || code === "EOPNOTSUPP" || code === "EXDEV" || code === "ENOSYS") {
      if (exists(path)) throw new StConvertError("OutputExists", "the output appeared while converting", { file: name });
      renameSync(tempPath, path);
      return;
    }
    throw error;
  }
  unlinkSync(tempPath);
}

/** The sink of {@link createFileSink} for a FIFO or a character device: opened and written into. */
async function deviceSink(name: string, path: string): Promise<StreamSink> {
  let handle: FileHandle | undefined;
  try {
    // Neither O_CREAT nor O_TRUNC: if the device went away, nothing is created in its place.
    handle = await open(path, constants.O_WRONLY | (constants.O_NOCTTY ?? 0));
    const info = await handle.stat();
    if (!info.isFIFO() && !info.isCharacterDevice()) {
      throw new StConvertError("Io", `${path} changed into another kind of file while it was opened; it was left untouched`);
    }
  } catch (error) {
    await handle?.close().catch(() => {});
    throw ioError(error, name, "cannot open the output for writing");
  }
  const device = handle;
  return streamSink(
    name,
    (bytes, offset, length) => device.write(bytes, offset, length, null).then((r) => r.bytesWritten),
    () => device.close(),
  );
}

/** A {@link StreamSink} over `out`, one write of at most `length` bytes; `release` ends it. */
function streamSink(name: string, out: WriteOnce, release: () => Promise<void>): StreamSink {
  const writer = new CoalescingWriter(out);
  let state: "open" | "closed" | "aborted" = "open";
  let released = false;
  const end = async (): Promise<void> => {
    if (released) return;
    released = true;
    await release();
  };
  return {
    kind: "stream",
    name,
    write: (chunk) => writeWhileOpen(writer, state, name, chunk),
    async close() {
      if (state !== "open") throw new StConvertError("Io", `close of a ${state} sink`, { file: name });
      try {
        await writer.flush();
        await end();
        state = "closed";
      } catch (error) {
        state = "aborted";
        await end().catch(() => {});
        throw ioError(error, name, "write failed");
      }
    },
    async abort() {
      if (state === "closed") return;
      state = "aborted";
      writer.discard();
      await end().catch(() => {});
    },
  };
}

/** One write of up to `length` bytes of `bytes` from `offset`; resolves to the count written. */
type WriteOnce = (bytes: Uint8Array, offset: number, length: number) => Promise<number>;

/**
 * Writes in order, gathering chunks below {@link SINK_COALESCE_BELOW} into one buffer. A small
 * chunk is copied, so its promise may settle before it reaches the file (the caller may then reuse
 * it, as `pipeTensor` does); a large chunk is written from the caller's memory, all of it, before
 * its promise settles. Once a write failed, every later one fails with the same error.
 */
class CoalescingWriter {
  readonly #out: WriteOnce;
  readonly #outAt: ((bytes: Uint8Array, position: number) => Promise<void>) | undefined;
  #buffer: Uint8Array | undefined;
  #filled = 0;
  /** Bytes handed to the file so far (the buffer holds the ones after them). */
  #written = 0;
  #queue: Promise<void> = Promise.resolve();
  /** Steps queued and not finished: while there are none, a small chunk is taken at once. */
  #queued = 0;
  #failure: { error: unknown } | undefined;

  constructor(out: WriteOnce, outAt?: (bytes: Uint8Array, position: number) => Promise<void>) {
    this.#out = out;
    this.#outAt = outAt;
  }

  /**
   * Overwrites bytes given before, `position` from the first: in the buffer where they still are,
   * by a positioned write where they reached the file. In order with the writes around it.
   */
  patch(position: number, bytes: Uint8Array): Promise<void> {
    return this.#enqueue(async () => {
      const end = position + bytes.byteLength;
      if (!Number.isSafeInteger(position) || position < 0 || end > this.#written + this.#filled) {
        throw new StConvertError("Io", `a patch of bytes ${position} to ${end} reaches past the ${this.#written + this.#filled} written`);
      }
      const inFile = Math.max(0, Math.min(end, this.#written) - position);
      if (inFile > 0) {
        if (this.#outAt === undefined) throw new StConvertError("Io", "this output cannot seek back to change bytes written");
        await this.#outAt(bytes.subarray(0, inFile), position);
      }
      if (inFile < bytes.byteLength) this.#buffer!.set(bytes.subarray(inFile), position + inFile - this.#written);
    });
  }

  write(chunk: Uint8Array): Promise<void> {
    // Nothing ahead of it and room in the buffer: copied now, with no step queued (a checkpoint of
    // 50,000 tiny tensors made 50,000 trips through the queue, most of a writer's time).
    if (this.#queued === 0 && this.#failure === undefined && chunk.byteLength < SINK_COALESCE_BELOW && this.#filled + chunk.byteLength <= SINK_BUFFER_SIZE) {
      this.#gather(chunk);
      return WRITTEN;
    }
    return this.#enqueue(() => this.#put(chunk));
  }

  /** Settles once every step queued before it has run, rejected if one of them failed. */
  settled(): Promise<void> {
    return this.#enqueue(async () => {});
  }

  /**
   * Every byte given so far, while none has been handed to the output yet (they are all in the
   * buffer); undefined once some have been.
   */
  held(): Uint8Array | undefined {
    if (this.#written > 0) return undefined;
    return this.#buffer === undefined ? new Uint8Array(0) : this.#buffer.subarray(0, this.#filled);
  }

  /**
   * Runs `copy`, which appends `length` bytes to the output on its own (a kernel copy), in order
   * with the writes around it: what is buffered is written out first.
   */
  copy(copy: () => Promise<void>, length: number): Promise<void> {
    return this.#enqueue(async () => {
      await this.#drain();
      await copy();
      this.#written += length;
    });
  }

  /** Writes out what is buffered. */
  flush(): Promise<void> {
    return this.#enqueue(() => this.#drain());
  }

  /** Forgets what is buffered (the output is being abandoned). */
  discard(): void {
    this.#buffer = undefined;
    this.#filled = 0;
  }

  #enqueue(step: () => Promise<void>): Promise<void> {
    this.#queued++;
    const done = this.#queue.then(async () => {
      try {
        if (this.#failure !== undefined) throw this.#failure.error;
        await step();
      } catch (error) {
        this.#failure ??= { error };
        throw error;
      } finally {
        this.#queued--;
      }
    });
    this.#queue = done.catch(() => {});
    return done;
  }

  async #put(chunk: Uint8Array): Promise<void> {
    if (chunk.byteLength >= SINK_COALESCE_BELOW) {
      await this.#drain();
      await writeFully(this.#out, chunk);
      this.#written += chunk.byteLength;
      return;
    }
    if (this.#filled + chunk.byteLength > SINK_BUFFER_SIZE) await this.#drain();
    this.#gather(chunk);
  }

  /** Copies a small chunk into the buffer, which has room for it once grown. */
  #gather(chunk: Uint8Array): void {
    // Grown as needed, not 1 MiB at once: a batch of small files makes one sink each, and a fresh
    // 1 MiB per file kept the garbage collector busy for most of the run.
    const needed = this.#filled + chunk.byteLength;
    if (this.#buffer === undefined || this.#buffer.byteLength < needed) {
      let size = Math.max(this.#buffer?.byteLength ?? SINK_FIRST_BUFFER, SINK_FIRST_BUFFER);
      while (size < needed) size *= 2;
      const grown = new Uint8Array(Math.min(size, SINK_BUFFER_SIZE));
      if (this.#buffer !== undefined) grown.set(this.#buffer.subarray(0, this.#filled));
      this.#buffer = grown;
    }
    this.#buffer.set(chunk, this.#filled);
    this.#filled += chunk.byteLength;
  }

  async #drain(): Promise<void> {
    if (this.#filled === 0 || this.#buffer === undefined) return;
    await writeFully(this.#out, this.#buffer.subarray(0, this.#filled));
    this.#written += this.#filled;
    this.#filled = 0;
  }
}

/** A sink's write: refused unless the sink is open; an operating-system failure named after the sink. */
function writeWhileOpen(writer: CoalescingWriter, state: string, name: string, chunk: Uint8Array): Promise<void> {
  if (state !== "open") return Promise.reject(new StConvertError("Io", `write to a ${state} sink`, { file: name }));
  const written = writer.write(chunk);
  if (written === WRITTEN) return written;
  return written.catch((error: unknown) => {
    throw ioError(error, name, "write failed");
  });
}

/**
 * Errors of `copy_file_range` that mean "not between these two files": another file system (EXDEV),
 * one that cannot (EINVAL, EOPNOTSUPP), a kernel without it (ENOSYS). The copy then goes through memory.
 */
const COPY_ELSEWHERE = new Set(
  ["EXDEV", "EINVAL", "EOPNOTSUPP", "ENOTSUP", "ENOSYS"].flatMap((code) => {
    const errno = (osConstants.errno as Record<string, number | undefined>)[code];
    return errno === undefined ? [] : [errno];
  }),
);

/** A copy's failure as Node reports a system error: `code` (`ENOSPC`) for {@link ioError}'s rules. */
function systemError(error: CopyRangeError): Error {
  const code = Object.entries(osConstants.errno).find(([, errno]) => errno === error.errno)?.[0];
  return Object.assign(new Error(error.message), { code, errno: -error.errno, syscall: "copy_file_range" });
}

/**
 * Copies `length` bytes of the regular file `source` from `offset` to the end of the file `fd`
 * through memory, where the kernel cannot copy between them: each piece of {@link DEFAULT_CHUNK_SIZE}
 * read through the thread pool while the one before it is written by a synchronous write on this
 * thread. 1 GiB in a plain script: a median 0.37 s, against 0.40 s reading synchronously too and
 * 0.44 s reading and writing through the pool, `cp` 0.33 s (10 interleaved runs, 2026-12-07).
 * Neither a read nor a write outlives the call.
 * @throws what the source's reads and the writes throw.
 */
async function copyFromFile(source: ByteSource, offset: number, length: number, fd: number): Promise<void> {
  const size = Math.min(length, DEFAULT_CHUNK_SIZE);
  const buffers = [Buffer.allocUnsafeSlow(size), Buffer.allocUnsafeSlow(size)];
  const piece = (k: number) => buffers[k % 2]!.subarray(0, Math.min(size, length - k * size));
  let reading: Promise<void> | undefined = source.readInto!(offset, piece(0));
  try {
    for (let k = 0, at = 0; at < length; k++) {
      await reading;
      reading = undefined;
      const part = piece(k);
      at += part.byteLength;
      if (at < length) {
        reading = source.readInto!(offset + at, piece(k + 1));
        // Marked handled now: a failing read is reported when awaited.
        reading.catch(() => {});
      }
      for (let done = 0; done < part.byteLength; ) {
        const written = writeSync(fd, part, done, part.byteLength - done);
        // Never for a regular file that works; looping on it would never end.
        if (written === 0) throw new StConvertError("Io", `the output took none of ${part.byteLength - done} bytes`);
        done += written;
      }
    }
  } finally {
    await reading?.catch(() => {});
  }
}

/** Writes all of `bytes` through `out`, waiting out EAGAIN (see {@link EAGAIN_FIRST_WAIT_MS}). */
async function writeFully(out: WriteOnce, bytes: Uint8Array): Promise<void> {
  let wait = EAGAIN_FIRST_WAIT_MS;
  for (let done = 0; done < bytes.byteLength; ) {
    let written: number;
    try {
      written = await out(bytes, done, bytes.byteLength - done);
    } catch (error) {
      if ((error as NodeJS.ErrnoException).code !== "EAGAIN") throw error;
      await sleep(wait);
      wait = Math.min(2 * wait, EAGAIN_MAX_WAIT_MS);
      continue;
    }
    // Never for files, pipes or devices that work; looping on it would never end.
    if (written === 0) throw new StConvertError("Io", `the output took none of ${bytes.byteLength - done} bytes`);
    done += written;
    wait = EAGAIN_FIRST_WAIT_MS;
  }
}

/**
 * Removes the temporary files that interrupted runs (killed, or stopped by a signal they could not
 * handle) left beside the output `path` (or each of several outputs: a batch passes them all, and
 * each folder is read once): files named exactly as {@link createFileSink} names them for such a
 * target (`.NAME.PID-TAG.tmp`), regular files only, whose process no longer exists. A process that
 * exists (even one this process may not signal) keeps its files, and so does this process. When a
 * path is a symbolic link, the folder of the file it leads to is cleaned too.
 * Best effort: a file that cannot be removed is left, and a missing folder removes nothing.
 * A process of another machine sharing the folder (NFS) or of another PID namespace looks gone:
 * do not call this where such writers share the output folder.
 * @returns The paths removed.
 */
export async function removeStaleTempFiles(path: string | readonly string[]): Promise<string[]> {
  const byDir = new Map<string, Set<string>>();
  const add = (target: string) => {
    if (target === "" || target.endsWith("/")) return;
    const dir = dirname(resolve(target));
    let names = byDir.get(dir);
    if (names === undefined) byDir.set(dir, (names = new Set()));
    names.add(basename(target));
  };
  for (const target of typeof path === "string" ? [path] : path) {
    add(target);
    try {
      const output = await resolveOutput(target);
      if (output.kind === "missing" || output.kind === "file") add(output.path);
    } catch {
      // Not a file output (a directory, a device): only the path's own folder is looked at.
    }
  }
  const removed: string[] = [];
  for (const [dir, bases] of byDir) {
    let names: string[];
    try {
      names = await readdir(dir);
    } catch {
      continue;
    }
    for (const entry of names) {
      const temp = tempFileOf(entry);
      if (temp === undefined || !bases.has(temp.base) || processExists(temp.pid)) continue;
      const candidate = join(dir, entry);
      try {
        if (!(await lstat(candidate)).isFile()) continue;
        await unlink(candidate);
        removed.push(candidate);
      } catch {
        // Gone already, or not ours to remove: left as it is.
      }
    }
  }
  return removed;
}

/** The target name and process id of a temporary file name of {@link createFileSink}, or undefined. */
function tempFileOf(entry: string): { base: string; pid: number } | undefined {
  const match = /^\.(.+)\.([1-9]\d{0,9})-[0-9a-z]{1,8}\.tmp$/s.exec(entry);
  return match === null ? undefined : { base: match[1]!, pid: Number(match[2]) };
}

/** False only when the system says no such process exists (ESRCH); EPERM means it does. */
function processExists(pid: number): boolean {
  if (pid === process.pid) return true;
  try {
    process.kill(pid, 0);
    return true;
  } catch (error) {
    return (error as NodeJS.ErrnoException).code !== "ESRCH";
  }
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
      // The handle is the scratch file's, closed by dispose(), not by whoever reads.
      return descriptorSource(handle.fd, path, size, true, () => {});
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
  return `${process.pid}-${Math.random().toString(36).slice(2, 10).padEnd(8, "0")}`;
}

/** Writes all of `chunk`: at `position` when given, else at the file's own position. */
async function writeAll(handle: FileHandle, chunk: Uint8Array, position?: number): Promise<void> {
  for (let done = 0; done < chunk.byteLength; ) {
    const { bytesWritten } = await handle.write(chunk, done, chunk.byteLength - done, position === undefined ? null : position + done);
    done += bytesWritten;
  }
}

/** Whether anything, even a dangling symbolic link, is at `path`. */
function exists(path: string): boolean {
  try {
    return lstatSync(path, { throwIfNoEntry: false }) !== undefined;
  } catch (error) {
    throw ioError(error, path, "cannot check the output");
  }
}

/** Readable rules for the operating-system errors that users meet. */
const IO_REASONS: Readonly<Record<string, string>> = {
  ENOENT: "no such file or directory",
  EACCES: "permission denied",
  EPERM: "permission denied",
  EISDIR: "is a directory",
  ENOTDIR: "a part of the path is not a directory",
  ELOOP: "too many symbolic links",
  ENOSPC: "no space left on the device",
  EROFS: "read-only file system",
  ENXIO: "no such device (or no reader on the pipe)",
  EBADF: "not an open descriptor, or not open for writing",
};

/**
 * Wraps an operating-system error in an `Io` StConvertError with a readable rule (`BrokenPipe` when
 * the reader of a pipe or socket went away); passes our own errors through.
 */
function ioError(error: unknown, file: string, what: string): unknown {
  if (isStConvertError(error)) return withContext(error, { file });
  const code = (error as NodeJS.ErrnoException | undefined)?.code;
  if (code === "EPIPE" || code === "ECONNRESET") {
    return new StConvertError("BrokenPipe", `${what}: the reader closed the pipe`, { file, cause: error });
  }
  const reason = (code === undefined ? undefined : IO_REASONS[code]) ?? (error as Error | undefined)?.message ?? String(error);
  return new StConvertError("Io", `${what}: ${reason}`, { file, cause: error });
}
