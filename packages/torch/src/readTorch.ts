/**
 * PyTorch checkpoints read without running pickle: the zip format of `torch.save` (torch ≥ 1.6)
 * and the legacy stream (`_use_new_zipfile_serialization=False`), listed as named tensors whose
 * bytes are read on demand, in C order and little-endian.
 *
 * Spec: torch 2.13 `torch/serialization.py` (`_save`, `_load`, `_legacy_save`, `_legacy_load`) and
 * `torch/_utils.py` (the rebuild functions); the facts measured on torch's own files are in the
 * repository's `docs/pytorch.md`. The zip container is the npz reader's (`@st-convert/npy`).
 */
import {
  type ByteInput,
  type ByteSource,
  DEFAULT_CHUNK_SIZE,
  type ChunkOptions,
  type ExtentCrc32,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorExtent,
  extentNamed,
  type TensorSource,
  compareCodePoints,
  crc32FileRange,
  createMetadata,
  quoteName,
  readRange,
  swapBytesInPlace,
  toByteSource,
  withContext,
} from "@st-convert/core";
import {
  type Codec,
  type ZipMember,
  checkExtractable,
  crc32Stream,
  loadCodec,
  locateMembers,
  memberPayload,
  readZipDirectory,
  withCrc32,
} from "@st-convert/npy";
import type { TorchErrorCode } from "./TorchErrorCode.js";
import { MAX_RANK, METADATA_ENTRY, type StorageRef, type TensorRef, type TorchHooks, asTorch, torchHooks } from "./torchSymbols.js";
import {
  MAX_MEMO_ENTRIES,
  MAX_NESTING_DEPTH,
  MAX_PICKLE_OBJECTS,
  MAX_STACK_SIZE,
  NeedMoreData,
  type PickleValue,
  type Unpickled,
  type UnpickleOptions,
  describeValue,
  unpickle,
} from "./Unpickler.js";

export { MAX_MEMO_ENTRIES, MAX_NESTING_DEPTH, MAX_PICKLE_OBJECTS, MAX_RANK, MAX_STACK_SIZE };

/**
 * Largest pickle read, in bytes: the pickle is held in memory while it is decoded. A state dict's
 * pickle takes a few hundred bytes per tensor (a 70B model's, about a megabyte); 256 MiB leaves
 * room for training checkpoints with large Python state and bounds what a hostile file costs.
 */
export const MAX_PICKLE_SIZE = 256 * 1024 * 1024;

/**
 * Largest output of a view whose elements overlap (stride 0, `expand`), beyond its storage's own
 * size: real ones are masks and position ids of a few kilobytes; a hostile one declares terabytes
 * over a few elements and would be materialised in full.
 */
export const MAX_EXPANDED_BYTES = 1024 * 1024 * 1024;

/**
 * Largest stretch of a deflated member (a checkpoint re-zipped by another tool, where nothing can
 * be read at random) inflated into memory to gather a non-contiguous view of it into C order.
 * 256 MiB holds an 8192 × 8192 float32 weight; a view of a stored member is gathered in tiles of
 * {@link GATHER_TILE_SIZE} instead, whatever its size.
 */
export const MAX_GATHER_WINDOW = 256 * 1024 * 1024;

/** Records torch reads whole before the pickle (version, byteorder, alignment): real ones hold a few bytes. */
const SMALL_RECORD = 4096;

/** torch 2.13's `kMaxSupportedFileFormatVersion`: a checkpoint claiming a later version is refused, as torch refuses it. */
const MAX_FILE_FORMAT_VERSION = 10;

/**
 * Bytes of C-order output gathered at a time from a non-contiguous view read from the file: a
 * transposed weight is gathered in blocks of whole output rows, each filled by one read per
 * column of a stretch of the storage, so memory stays at this size whatever the tensor's.
 */
export const GATHER_TILE_SIZE = 32 * 1024 * 1024;

/**
 * Values the naming walk may visit per byte of the pickle, beyond {@link NAMING_VISITS_BASE}. A
 * value the pickle makes once costs at least one byte, so a walk of a file without sharing
 * visits fewer values than the pickle has bytes; a shared container is walked each time it is
 * reached (a tied weight, a config referred to twice), which real files do a few times. One list
 * referred to 100 times at each of three levels (`[[[t] * 100] * 100] * 100`, 2 KB) would make a
 * million names: refused here, after a few thousand visits.
 */
export const NAMING_VISITS_PER_PICKLE_BYTE = 8;
/** Visits always allowed, whatever the pickle's size: 10,000 names from a tiny pickle cost nothing. */
export const NAMING_VISITS_BASE = 10_000;

/** Skipped values reported one by one; the rest are counted in one line. */
export const MAX_WARNINGS = 20;

/** `torch.serialization.MAGIC_NUMBER`, the first pickle of a legacy file. */
const LEGACY_MAGIC = 0x1950a86a20f9469cfc6cn;
/** `torch.serialization.PROTOCOL_VERSION`, the second. */
const LEGACY_PROTOCOL = 1001;
/** Bytes of a legacy file first read for its small pickles; doubled while a pickle goes on. */
const LEGACY_FIRST_WINDOW = 64 * 1024;

/** Options of {@link readTorch}. */
export interface TorchReadOptions {
  /**
   * Read the tensors under this key of the top-level dict (a dotted path for nested dicts:
   * `"model"`, `"module.state_dict"`). Default: the whole object, with a lone `state_dict`
   * wrapper unwrapped.
   */
  key?: string;
  /** Name of a tensor saved on its own (`torch.save(tensor)`). Default `"tensor"`. */
  rootName?: string;
  /** Receives non-fatal notices (skipped values). */
  onWarning?: (message: string) => void;
  /** Largest pickle, in bytes. Default {@link MAX_PICKLE_SIZE}. */
  maxPickleSize?: number;
  /** Default {@link MAX_MEMO_ENTRIES}. */
  maxMemoEntries?: number;
  /** Default {@link MAX_STACK_SIZE}. */
  maxStackSize?: number;
  /** Default {@link MAX_NESTING_DEPTH}. */
  maxNestingDepth?: number;
  /** Values made by the pickle, and at most this many visited when naming tensors. Default {@link MAX_PICKLE_OBJECTS}. */
  maxObjects?: number;
  /** Values the naming walk may visit per byte of the pickle (besides {@link NAMING_VISITS_BASE}). Default {@link NAMING_VISITS_PER_PICKLE_BYTE}. */
  maxVisitsPerPickleByte?: number;
  /** Default {@link MAX_EXPANDED_BYTES}. */
  maxExpandedBytes?: number;
  /** Default {@link MAX_GATHER_WINDOW}. */
  maxGatherWindow?: number;
  /** Default {@link GATHER_TILE_SIZE}; tests lower it to cross tile edges on small tensors. */
  gatherTileSize?: number;
  /** Default {@link MAX_WARNINGS}. */
  maxWarnings?: number;
  /** `"fflate"` forces the portable codec (CRC-32, inflate) browsers use; default `node:zlib` when present. */
  codec?: "auto" | "fflate";
  /**
   * The tensors the caller keeps (the CLI's `--filter`/`--exclude`), by name: a tensor, or a value
   * holding tensors, whose name this refuses is left out before it is judged, so that one with no
   * safetensors form (complex128, quantized, sparse, nested) can be dropped instead of refusing
   * the file. The file itself is still checked whole (its pickle, its storages, every view).
   * Default: every tensor.
   */
  include?: (name: string) => boolean;
}

/** One tensor of a checkpoint: a view of a storage, delivered in C order. */
export interface TorchTensor extends TensorEntry {
  /** The storage's key (`data/<key>` in a zip). */
  readonly storageKey: string;
  /** First element of the view in its storage, in elements of the tensor's dtype. */
  readonly storageOffset: number;
  /** Strides in elements, as the file declares them. */
  readonly strides: readonly number[];
  /** True when the view's bytes are one stretch of the storage in C order (streamed as they are). */
  readonly contiguous: boolean;
}

/** A checkpoint whose tensors have not been read yet. */
export interface TorchFile extends TensorSource {
  readonly format: "torch-zip" | "torch-legacy";
  /** `{"format": "pt"}` and one `removed: kept` entry per alias, as safetensors' `convert.py` writes. */
  readonly metadata: Metadata;
  /** Tensors in the pickle's order, one per distinct view (aliases left out). */
  readonly tensors: readonly TorchTensor[];
  /** Names left out because they are identical views of a tensor kept under another name: `{removed: kept}`. */
  readonly aliases: Readonly<Record<string, string>>;
  /** Names of the values that are not tensors, skipped. */
  readonly skipped: readonly string[];
  /** True when the file's storages are big-endian (swapped as they are read). */
  readonly bigEndian: boolean;
  /**
   * Every symbol the file's pickles name outside torch's weights-only allow-list (`module.name`,
   * first-named order; `argparse.Namespace`, `numpy.core.multiarray.scalar`…): none was run. A
   * pickle naming a dangerous one (`os.system`, `builtins.eval`, …) is refused instead
   * (`DangerousGlobal`).
   */
  readonly globals: readonly string[];
}

function fail(
  code: TorchErrorCode | "Unsupported" | "LimitExceeded" | "DuplicateKey" | "InvalidArgument" | "InvalidName",
  rule: string,
  tensor?: string,
): never {
  throw new StConvertError(code, rule, { tensor });
}

// ----- recognising the file -----

/** `8a 0a` + the magic number's bytes: LONG1 of the legacy magic, after PROTO (and FRAME from protocol 4). */
const MAGIC_LONG = [0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];

/** What the first bytes of a file say it is. */
export function classifyTorchHead(head: Uint8Array): "zip" | "legacy" | "tar" | "safetensors" | "lfs-pointer" | "unknown" {
  if (head[0] === 0x50 && head[1] === 0x4b && (head[2] === 3 || head[2] === 5) && (head[3] === 4 || head[3] === 6)) return "zip";
  if (head[0] === 0x80) {
    const at = head[1]! >= 4 && head[2] === 0x95 ? 11 : 2;
    if (MAGIC_LONG.every((b, i) => head[at + i] === b)) return "legacy";
  }
  if (head.byteLength >= 262 && String.fromCharCode(...head.subarray(257, 262)) === "ustar") return "tar";
  if (String.fromCharCode(...head.subarray(0, 40)).startsWith("version https://git-lfs.github.com/spec/")) return "lfs-pointer";
  if (head.byteLength >= 9) {
    const n = new DataView(head.buffer, head.byteOffset, 8).getBigUint64(0, true);
    if (n >= 2n && n <= 100_000_000n && head[8] === 0x7b) return "safetensors";
  }
  return "unknown";
}

/**
 * Reads a PyTorch checkpoint's structure: the pickle is decoded (nothing in it runs), its tensors
 * named, their storages located and every view checked against its storage. No tensor byte is read.
 * @throws StConvertError with a {@link TorchErrorCode}, a zip code (`BadZipFile`, …), or
 *   `NotACheckpoint` (a safetensors file, a Git LFS pointer, anything else), naming the file and,
 *   where one is concerned, the tensor.
 */
export async function readTorch(input: ByteInput, options: TorchReadOptions = {}): Promise<TorchFile> {
  const source = toByteSource(input);
  try {
    const head = await source.read(0, Math.min(source.size, 512));
    const kind = classifyTorchHead(head);
    switch (kind) {
      case "zip":
        return await readZipCheckpoint(source, options);
      case "legacy":
        return await readLegacyCheckpoint(source, options);
      case "tar":
        return fail("Unsupported", "a tar archive: the checkpoint format of torch < 0.1.10 is not supported (load and re-save it with a newer torch)");
      case "safetensors":
        return fail("NotACheckpoint", "this is a safetensors file, not a PyTorch checkpoint: read it as safetensors (--from safetensors)");
      case "lfs-pointer":
        return fail(
          "NotACheckpoint",
          "this is a Git LFS pointer (version https://git-lfs.github.com/spec/v1), not the checkpoint itself: fetch it with `git lfs pull`",
        );
      default:
        if (await startsWithLegacyMagic(source, options)) return await readLegacyCheckpoint(source, options);
        return fail("NotACheckpoint", "not a PyTorch checkpoint: neither a zip archive with a data.pkl nor a legacy torch.save stream");
    }
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
}

function unpickleOptions(options: TorchReadOptions): UnpickleOptions {
  return {
    maxMemoEntries: options.maxMemoEntries,
    maxStackSize: options.maxStackSize,
    maxNestingDepth: options.maxNestingDepth,
    maxObjects: options.maxObjects,
  };
}

// ----- storage bytes -----

/** The bytes of one storage, wherever they are. */
interface StorageBytes {
  readonly size: number;
  /** `[offset, offset + length)` in chunks of at most `chunkSize`, integrity checked where the container has a check. */
  range(offset: number, length: number, options: ChunkOptions): AsyncGenerator<Uint8Array>;
  /** Random access, where the container allows it (not inside a deflated member). */
  readonly read: ((offset: number, length: number) => Promise<Uint8Array>) | undefined;
  /** Synchronous random access into `target`, where the source has it; only after {@link StorageBytes.ready}. */
  readonly readInto: ((offset: number, target: Uint8Array) => void) | undefined;
  /** Resolves once random reads may start (a stored member's CRC-32 checked). */
  ready(): Promise<void>;
  /** Where `[offset, offset + length)` lies in the file, with the check to run alongside a copy of it; absent for a deflated member. */
  readonly extent?: (offset: number, length: number) => TensorExtent;
}

function crcError(member: ZipMember, actual: number): StConvertError {
  const hex = (n: number) => n.toString(16).padStart(8, "0");
  return new StConvertError(
    "BadCrc",
    `Bad CRC-32 for member ${JSON.stringify(member.name)}: the archive records ${hex(member.crc32)}, its bytes have ${hex(actual)}`,
  );
}

/**
 * A stored member. Its CRC-32 is checked once, the first time its bytes are read: on the fly when
 * a tensor covers the whole member, by a pass of its own before a partial view is served. A CRC
 * of 0 is torch's "not computed" (`compute_crc32 = False`) and is not checked.
 */
function storedStorage(source: ByteSource, member: ZipMember, codec: Codec): StorageBytes {
  let verified: Promise<void> | undefined = member.crc32 === 0 ? Promise.resolve() : undefined;
  let checked = member.crc32 === 0;
  const wholeMember: ExtentCrc32 = {
    initial: async () => 0,
    async finish(crc) {
      if (crc !== member.crc32) throw crcError(member, crc);
      checked = true;
      verified ??= Promise.resolve();
    },
  };
  const verify = (): Promise<void> => {
    verified ??= (async () => {
      const crc = (await crc32FileRange(source, member.dataOffset, member.size, 0)) ?? (await crcOfStream(source, member, codec));
      if (crc !== member.crc32) throw crcError(member, crc);
      checked = true;
    })();
    return verified;
  };
  return {
    size: member.size,
    async *range(offset, length, options) {
      if (!checked && offset === 0 && length === member.size) {
        // The check of a chunk runs while the consumer writes it (on the CRC thread for a long
        // member, else once the write waits in the I/O threads), not after.
        const crc = yield* withCrc32(codec, length, (shared) => readRange(source, member.dataOffset, length, { ...options, shared }));
        if (crc !== member.crc32) throw crcError(member, crc);
        checked = true;
        return;
      }
      await verify();
      yield* readRange(source, member.dataOffset + offset, length, options);
    },
    read: async (offset, length) => {
      await verify();
      return source.read(member.dataOffset + offset, length);
    },
    readInto: source.readIntoSync === undefined ? undefined : (offset, target) => source.readIntoSync!(member.dataOffset + offset, target),
    ready: verify,
    // The CRC-32 pass runs while the copy does, once per member however many tensors share it; a
    // copy of the whole member that takes the CRC as it goes checks it with no pass of its own.
    extent: (offset, length) => {
      const at = member.dataOffset + offset;
      if (checked) return { source, offset: at };
      return { source, offset: at, check: verify, crc32: offset === 0 && length === member.size ? wholeMember : undefined };
    },
  };
}

/** The CRC-32 of a member's bytes read through memory, on the CRC thread when it is long. */
async function crcOfStream(source: ByteSource, member: ZipMember, codec: Codec): Promise<number> {
  const stream = crc32Stream(codec, member.size);
  // reuse: each chunk is folded in (or copied to the CRC thread) before the one after next is read.
  for await (const chunk of readRange(source, member.dataOffset, member.size, { reuse: true })) await stream.update(chunk);
  return stream.digest();
}

/** A deflated member (a checkpoint re-zipped by another tool): inflated on every pass, CRC checked at each pass's end. */
function deflatedStorage(source: ByteSource, member: ZipMember, codec: Codec): StorageBytes {
  const payload = memberPayload(source, member, codec);
  return {
    size: member.size,
    range: (offset, length, options) => payload.range(offset, length, { chunkSize: options.chunkSize ?? DEFAULT_CHUNK_SIZE }),
    read: undefined,
    readInto: undefined,
    ready: async () => {},
  };
}

/** Bytes of a legacy file's storage record, after its element count. No integrity check exists. */
function legacyStorage(source: ByteSource, dataOffset: number, size: number): StorageBytes {
  return {
    size,
    range: (offset, length, options) => readRange(source, dataOffset + offset, length, options),
    read: (offset, length) => source.read(dataOffset + offset, length),
    readInto: source.readIntoSync === undefined ? undefined : (offset, target) => source.readIntoSync!(dataOffset + offset, target),
    ready: async () => {},
    extent: (offset) => ({ source, offset: dataOffset + offset }),
  };
}

// ----- the zip format -----

/** MS-DOS's directory attribute, in a zip entry's external attributes: miniz takes such a member for a directory. */
const DOS_DIRECTORY = 0x10;

/** ASCII lower case, as miniz compares names when torch looks a record up. */
function foldCase(name: string): string {
  return name.replace(/[A-Z]+/g, (c) => c.toLowerCase());
}

/** The `version` record as torch reads it (`std::stoull`: leading space, a sign, decimal digits, anything after). */
function parseVersion(text: string): bigint | undefined {
  const m = /^[\t\n\v\f\r ]*([+-]?)(\d+)/.exec(text);
  if (m === null) return undefined;
  const value = BigInt(m[2]!);
  return m[1] === "-" && value !== 0n ? -value : value;
}

/** An int literal as Python's `int(bytes)` reads it: surrounding whitespace, a sign, digits with single underscores between them. */
function isPythonInt(text: string): boolean {
  return /^[\t\n\v\f\r ]*[+-]?\d(_?\d)*[\t\n\v\f\r ]*$/.test(text);
}

/**
 * A zip checkpoint (`torch.save`'s format), read as {@link readTorch} reads it, with the object its
 * pickle holds: the distributed checkpoint reader takes plain values (a step, a learning rate)
 * from it. No tensor byte is read.
 * @throws StConvertError as {@link readTorch}, naming the source.
 */
export async function readTorchZipValue(input: ByteInput, options: TorchReadOptions = {}): Promise<{ file: TorchFile; value: PickleValue }> {
  const source = toByteSource(input);
  try {
    const head = await source.read(0, Math.min(source.size, 512));
    if (classifyTorchHead(head) !== "zip") fail("NotACheckpoint", "not a zip archive: not a torch.save record");
    const read = await readZipCheckpoint(source, options);
    return { file: read, value: read[PICKLED] };
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
}

/** Where readZipCheckpoint leaves the unpickled object for {@link readTorchZipValue}. */
const PICKLED = Symbol("pickled");

async function readZipCheckpoint(source: ByteSource, options: TorchReadOptions): Promise<TorchFile & { [PICKLED]: PickleValue }> {
  const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
  // Read as torch reads it (miniz): names whole and UTF-8, no bytes before the archive, counts that agree.
  const directory = await readZipDirectory(source, { rules: "miniz" });
  const entries = directory.entries;
  if (!entries.some((m) => foldCase(m.originalName).endsWith("data.pkl"))) {
    fail("NotACheckpoint", "a zip archive without a data.pkl member: not a PyTorch checkpoint (an .npz? read it with --from npz)");
  }
  // torch's rule (PyTorchStreamReader): the root folder is the first member's name up to its first
  // "/", every member lies in it, and records are looked up there, names compared ignoring ASCII case.
  // Judged on the directory, before any member is located: a record named twice is refused as such,
  // whatever else is wrong with either copy.
  const firstName = entries[0]!.originalName;
  const slash = firstName.indexOf("/");
  if (slash < 0)
    fail("InvalidCheckpoint", `the first record, ${JSON.stringify(firstName)}, is not in a folder; torch: "file in archive is not in a subdirectory"`);
  const root = firstName.slice(0, slash + 1);
  const seen = new Set<string>();
  for (const m of entries) {
    if (!m.originalName.startsWith(root)) {
      fail(
        "InvalidCheckpoint",
        `record ${JSON.stringify(m.originalName)} is outside the archive's root folder ${JSON.stringify(root)}; torch: "file in archive is not in a subdirectory"`,
      );
    }
    const key = foldCase(m.originalName);
    if (seen.has(key)) {
      fail(
        "DuplicateKey",
        `two records are named ${JSON.stringify(m.originalName)} (torch compares names ignoring case): which one torch reads is not defined`,
      );
    }
    seen.add(key);
  }
  const members = await locateMembers(source, directory, { rules: "miniz" });
  const byName = new Map(members.map((m) => [foldCase(m.originalName), m]));
  /**
   * A record torch reads, judged as miniz judges what it extracts: its flags and method (a record
   * torch never reads is not), and no directory attribute (miniz extracts nothing from a
   * "directory", leaving torch's buffer as allocated).
   */
  const record = (name: string): ZipMember | undefined => {
    const member = byName.get(foldCase(root + name));
    if (member !== undefined) checkExtractable(member);
    if (member !== undefined && member.size > 0 && (member.externalAttributes & DOS_DIRECTORY) !== 0) {
      fail(
        "InvalidCheckpoint",
        `record ${JSON.stringify(member.originalName)} is marked as a directory (external attribute 0x10): torch reads none of its ${member.size} bytes and keeps uninitialised memory in their place`,
      );
    }
    return member;
  };
  if (members.some((m) => m.originalName === `${root}constants.pkl`)) {
    fail(
      "Unsupported",
      "a TorchScript archive (it has constants.pkl): torch.load(weights_only=True) refuses it; load it with torch.jit.load and save its state_dict()",
    );
  }
  const memberBytes = (member: ZipMember): StorageBytes =>
    member.method === 0 ? storedStorage(source, member, codec) : deflatedStorage(source, member, codec);
  const small = async (member: ZipMember, limit: number, what: string): Promise<Uint8Array> => {
    if (member.size > limit) fail("LimitExceeded", `${what} (member ${JSON.stringify(member.name)}) has ${member.size} bytes, more than the limit of ${limit}`);
    const parts: Uint8Array[] = [];
    for await (const chunk of memberBytes(member).range(0, member.size, {})) parts.push(new Uint8Array(chunk));
    return concat(parts, member.size);
  };
  const latin1 = (bytes: Uint8Array): string => String.fromCharCode(...bytes);
  /** A record read whole, as torch reads it (so that its size and CRC are checked), keeping its first `keep` bytes. */
  const head = async (member: ZipMember, keep: number): Promise<string> => {
    let kept = "";
    for await (const chunk of memberBytes(member).range(0, member.size, {})) {
      if (kept.length < keep) kept += latin1(chunk.subarray(0, keep - kept.length));
    }
    return kept;
  };

  // The records torch reads before the pickle, with its rules for each.
  const versionRecord = record(".data/version") ?? record("version");
  if (versionRecord === undefined) fail("InvalidCheckpoint", `no ${root}version record; torch: 'Expected hasRecord("version") to be true'`);
  // Digits past the 64th make a number past any version: the rest is checked, not kept.
  const versionText = await head(versionRecord, 64);
  const version = parseVersion(versionText);
  if (version === undefined)
    fail("InvalidCheckpoint", `the version record ${JSON.stringify(versionText.slice(0, 20))} is not a number; torch: "Couldn't parse the version"`);
  if (version < 1n || version > BigInt(MAX_FILE_FORMAT_VERSION)) {
    fail("InvalidCheckpoint", `file format version ${version}: torch reads versions 1 to ${MAX_FILE_FORMAT_VERSION}`);
  }
  const formatVersion = record(".format_version");
  // torch compares it as bytes (>= b"1") and refuses nothing; read so that its size and CRC are checked, as torch reads it.
  if (formatVersion !== undefined) await head(formatVersion, 0);
  // torch reads the serialization id when it opens the archive, as a str: it must be UTF-8.
  const serializationId = record(".data/serialization_id");
  if (serializationId !== undefined) {
    const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
    let valid = true;
    for await (const chunk of memberBytes(serializationId).range(0, serializationId.size, {})) {
      try {
        if (valid) utf8.decode(chunk, { stream: true });
      } catch {
        valid = false;
      }
    }
    try {
      if (valid) utf8.decode();
    } catch {
      valid = false;
    }
    if (!valid) fail("InvalidCheckpoint", `the .data/serialization_id record is not UTF-8; torch: "'utf-8' codec can't decode"`);
  }
  let bigEndian = false;
  const byteorder = record("byteorder");
  if (byteorder !== undefined) {
    const text = latin1(await small(byteorder, SMALL_RECORD, "the byteorder record"));
    if (text !== "little" && text !== "big")
      fail(
        "InvalidCheckpoint",
        `the byteorder record says ${JSON.stringify(text.slice(0, 20))}, not exactly "little" or "big"; torch: "Unknown endianness type"`,
      );
    bigEndian = text === "big";
  }
  const alignment = record(".storage_alignment");
  if (alignment !== undefined) {
    const text = latin1(await small(alignment, SMALL_RECORD, "the .storage_alignment record"));
    if (!isPythonInt(text))
      fail("InvalidCheckpoint", `the .storage_alignment record ${JSON.stringify(text.slice(0, 20))} is not an integer; torch: "invalid literal for int()"`);
  }
  const pickleMember = record("data.pkl");
  if (pickleMember === undefined) fail("InvalidCheckpoint", `no ${root}data.pkl record (torch finds it only in the root folder, the first record's)`);
  const pickle = await small(pickleMember, options.maxPickleSize ?? MAX_PICKLE_SIZE, "the pickle");
  const hooks = torchHooks("zip");
  const { value, opaqueCalls } = unpickle(pickle, hooks, unpickleOptions(options));
  const named = nameTensors(value, opaqueCalls, pickle.byteLength, options);
  checkViews(named, hooks);

  const storages = new Map<string, StorageBytes>();
  const storageOf = (ref: StorageRef): StorageBytes => {
    let bytes = storages.get(ref.key);
    if (bytes === undefined) {
      const member = record(`data/${ref.key}`);
      if (member === undefined)
        fail("MissingStorage", `storage ${JSON.stringify(ref.key)} has no member ${JSON.stringify(`${root}data/${ref.key}`)} in the archive`);
      bytes = memberBytes(member);
      storages.set(ref.key, bytes);
    }
    return bytes;
  };
  const file = finish("torch-zip", named, storageOf, bigEndian, options, hooks.globals);
  // torch loads every storage the pickle declares, a tensor of the output or not, and refuses one
  // whose record is missing or of another size ("record size ... does not match expected size").
  for (const ref of hooks.storages.values()) {
    if (storages.has(ref.key)) continue;
    const bytes = storageOf(ref);
    if (bytes.size !== ref.numel * ref.dtype.size) {
      fail(
        "StorageSizeMismatch",
        `storage ${JSON.stringify(ref.key)} is declared as ${ref.numel} × ${ref.className} elements (${ref.numel * ref.dtype.size} bytes), but holds ${bytes.size} bytes`,
      );
    }
  }
  return Object.assign(file, { [PICKLED]: value });
}

function concat(parts: readonly Uint8Array[], length: number): Uint8Array {
  if (parts.length === 1) return parts[0]!;
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part, at);
    at += part.byteLength;
  }
  return out;
}

// ----- the legacy format -----

/**
 * Runs the pickle that starts at `offset`, reading a window of the file that grows (doubling) until
 * the pickle's STOP is inside it, up to `maxPickleSize`.
 */
async function pickleAt(source: ByteSource, offset: number, options: TorchReadOptions, what: string, hooks = torchHooks()): Promise<Unpickled> {
  const limit = options.maxPickleSize ?? MAX_PICKLE_SIZE;
  for (let window = LEGACY_FIRST_WINDOW; ; window *= 2) {
    const length = Math.min(window, limit, source.size - offset);
    const whole = length === source.size - offset;
    const bytes = await source.read(offset, length);
    try {
      return unpickle(bytes, hooks, { ...unpickleOptions(options), partial: !whole });
    } catch (error) {
      if (!(error instanceof NeedMoreData)) throw error;
      if (length >= limit) fail("LimitExceeded", `${what} at byte ${offset} is longer than the limit of ${limit} bytes (maxPickleSize)`);
    }
  }
}

async function readLegacyCheckpoint(source: ByteSource, options: TorchReadOptions): Promise<TorchFile> {
  let at = 0;
  // The small pickles around the object pickle are judged by the same rules (a symbol in the key list runs as well as any).
  const headerHooks = torchHooks("legacy");
  const next = async (what: string): Promise<PickleValue> => {
    const { value, end } = await pickleAt(source, at, options, what, headerHooks);
    at += end;
    return value;
  };
  const magic = await next("the magic number");
  if (magic !== LEGACY_MAGIC) fail("InvalidCheckpoint", "Invalid magic number; corrupt file?");
  // torch compares with `!=`: 1001.0 is the same number (a bool is not: True == 1).
  const protocol = await next("the protocol version");
  const protocolNumber =
    typeof protocol === "number" ? protocol : protocol !== null && typeof protocol === "object" && protocol.kind === "float" ? protocol.value : undefined;
  if (protocolNumber !== LEGACY_PROTOCOL) fail("InvalidCheckpoint", `Invalid protocol version: ${describeValue(protocol)} (torch writes ${LEGACY_PROTOCOL})`);
  // sys_info is read and ignored, as torch ignores it: its `little_endian` flag changes nothing,
  // since torch writes and reads a legacy file's counts and elements little-endian on every machine.
  await next("sys_info");
  const bigEndian = false;
  const hooks = torchHooks("legacy");
  const { value, end, opaqueCalls } = await pickleAt(source, at, options, "the object pickle", hooks);
  at += end;
  // A legacy storage is made empty and resizable, so torch's set_ grows it as the pickle builds a
  // view past it: the view is judged later, against the storage's record (tensorEntry).
  const named = nameTensors(value, opaqueCalls, end, options);
  const keysValue = await next("the storage key list");
  const keys = storageKeys(keysValue);
  // Storage records follow in the key list's order: an 8-byte element count, then the elements.
  const declared = hooks.storages;
  const records = new Map<string, StorageBytes>();
  for (const key of keys) {
    const ref = declared.get(key);
    if (at + 8 > source.size) fail("StorageSizeMismatch", `the file ends at byte ${source.size}, before the record of storage ${JSON.stringify(key)}`);
    const countBytes = await source.read(at, 8);
    const count = new DataView(countBytes.buffer, countBytes.byteOffset, 8).getBigUint64(0, true);
    if (ref === undefined) {
      fail("InvalidStorage", `storage ${JSON.stringify(key)} is listed but no persistent id declares it, so its element size is unknown`);
    }
    if (count !== BigInt(ref.numel)) {
      fail("StorageSizeMismatch", `storage ${JSON.stringify(key)} is declared with ${ref.numel} elements, but its record holds ${count}`);
    }
    const size = ref.numel * ref.dtype.size;
    if (at + 8 + size > source.size) {
      fail("StorageSizeMismatch", `storage ${JSON.stringify(key)} needs ${size} bytes from byte ${at + 8}, but the file ends at byte ${source.size}`);
    }
    records.set(key, legacyStorage(source, at + 8, size));
    at += 8 + size;
  }
  const storageOf = (ref: StorageRef): StorageBytes => {
    const bytes = records.get(ref.key);
    if (bytes === undefined) fail("MissingStorage", `storage ${JSON.stringify(ref.key)} is not in the file's storage key list`);
    return bytes;
  };
  return finish("torch-legacy", named, storageOf, bigEndian, options, new Set([...headerHooks.globals, ...hooks.globals]));
}

/**
 * The storage keys torch iterates (`for key in deserialized_storage_keys`): a list or a tuple in its
 * order, a dict's keys. A set of more than one key is refused: its order is Python's string hash
 * order, which changes from one process to the next, so the records would have no one meaning.
 */
function storageKeys(value: PickleValue): string[] {
  let items: readonly PickleValue[] | undefined;
  if (value !== null && typeof value === "object") {
    if (value.kind === "list" || value.kind === "tuple") items = value.items;
    else if (value.kind === "dict") items = [...value.entries.values()].map((e) => e.key);
    else if (value.kind === "set") {
      if (value.items.length > 1) {
        fail(
          "InvalidCheckpoint",
          "the storage key list is a set of several keys: torch reads the records in the set's hash order, which varies from run to run",
        );
      }
      items = value.items;
    }
  }
  if (items === undefined || !items.every((k) => typeof k === "string")) {
    return fail("InvalidCheckpoint", `the storage key list is ${describeValue(value)}, not a list of str`);
  }
  return items as string[];
}

/** Whether the first pickle of the file is the legacy magic number however it is spelled (torch unpickles it and compares). */
async function startsWithLegacyMagic(source: ByteSource, options: TorchReadOptions): Promise<boolean> {
  const bytes = await source.read(0, Math.min(source.size, LEGACY_FIRST_WINDOW));
  try {
    return unpickle(bytes, torchHooks("legacy"), { ...unpickleOptions(options), partial: true }).value === LEGACY_MAGIC;
  } catch {
    return false;
  }
}

// ----- naming -----

interface NamedTensor {
  readonly name: string;
  readonly ref: TensorRef;
}

interface Named {
  /** Every tensor found, in the pickle's order, but those the caller's selection left out. */
  readonly all: readonly NamedTensor[];
  /** Tensors the caller's selection left out: their views are still checked. */
  readonly excluded: readonly NamedTensor[];
  readonly skipped: readonly string[];
  /** The state dict's own metadata (`_metadata["__metadata__"]`, as the torch writer keeps it), in its order. */
  readonly metadata: readonly [string, string][];
}

/**
 * The first storage or tensor inside `value`, visiting each container once; `visit` is called for
 * each (the naming walk's budget). With `whole`, the walk goes on past it, to find every callee.
 */
function findTorch(value: PickleValue, visit: () => void, callees?: Set<string>, whole = false): StorageRef | TensorRef | undefined {
  let found: StorageRef | TensorRef | undefined;
  const seen = new Set<object>();
  const stack: PickleValue[] = [value];
  while (stack.length > 0) {
    const v = stack.pop()!;
    if (v === null || typeof v !== "object" || seen.has(v)) continue;
    seen.add(v);
    visit();
    switch (v.kind) {
      case "native":
        found ??= asTorch(v);
        if (!whole) return found;
        break;
      case "tuple":
      case "list":
      case "set":
        stack.push(...v.items);
        break;
      case "dict":
        for (const { key, value: item } of v.entries.values()) stack.push(key, item);
        break;
      case "opaque":
        callees?.add(v.callee);
        stack.push(...v.given);
        break;
    }
  }
  return found;
}

/** A dict key as a name segment: a str as it is, an int in decimal; undefined for other keys. */
function segment(key: PickleValue): string | undefined {
  if (typeof key === "string") return key;
  if (typeof key === "number" || typeof key === "bigint") return String(key);
  return undefined;
}

/**
 * The metadata a state dict carries as the torch writer keeps it: its `_metadata` attribute (an
 * OrderedDict torch's `load_state_dict` reads per module prefix) holding, under `__metadata__`, a
 * dict of str to str. An entry that is not a str to a str is left out with a warning.
 */
function keptMetadata(stateDict: PickleValue, options: TorchReadOptions): [string, string][] {
  if (stateDict === null || typeof stateDict !== "object" || stateDict.kind !== "dict") return [];
  const kept = entryOf(entryOf(stateDict.attributes ?? null, "_metadata") ?? null, METADATA_ENTRY);
  if (kept === undefined) return [];
  if (kept === null || typeof kept !== "object" || kept.kind !== "dict") {
    options.onWarning?.(`_metadata[${JSON.stringify(METADATA_ENTRY)}] is ${describeValue(kept)}, not a dict of str: left out`);
    return [];
  }
  const out: [string, string][] = [];
  for (const { key, value } of kept.entries.values()) {
    if (typeof key === "string" && typeof value === "string") out.push([key, value]);
    else options.onWarning?.(`metadata entry ${describeValue(key)}: ${describeValue(value)} is not a str to a str: left out`);
  }
  return out;
}

function entryOf(dict: PickleValue, key: string): PickleValue | undefined {
  if (dict === null || typeof dict !== "object" || dict.kind !== "dict") return undefined;
  return dict.entries.get(`s${key}`)?.value ?? (/^-?\d+$/.test(key) ? dict.entries.get(`i${key}`)?.value : undefined);
}

/**
 * Walks the unpickled object: nested dicts, lists and tuples give names joined with `.`; tensors
 * are the leaves; anything else is skipped and reported. Shared containers are walked each time
 * they are reached (as Python would), within `maxObjects` visits.
 */
function nameTensors(root: PickleValue, opaqueCalls: readonly string[], pickleBytes: number, options: TorchReadOptions): Named {
  const perByte = options.maxVisitsPerPickleByte ?? NAMING_VISITS_PER_PICKLE_BYTE;
  const maxVisits = Math.min(options.maxObjects ?? MAX_PICKLE_OBJECTS, NAMING_VISITS_BASE + perByte * pickleBytes);
  // One budget for every visit: the walk itself and its searches for tensors inside values.
  let visits = 0;
  const visit = (): void => {
    if (++visits > maxVisits) {
      fail(
        "LimitExceeded",
        `naming the tensors visits more than ${maxVisits} values (${NAMING_VISITS_BASE} + ${perByte} per byte of the ${pickleBytes}-byte pickle): the pickle refers to its containers over and over (maxVisitsPerPickleByte)`,
      );
    }
  };
  const maxDepth = options.maxNestingDepth ?? MAX_NESTING_DEPTH;
  const maxWarnings = options.maxWarnings ?? MAX_WARNINGS;
  const skipped: string[] = [];
  const notices: string[] = [];
  const reported = new Set<string>();
  const skip = (name: string, what: string): void => {
    skipped.push(name);
    notices.push(`skipped ${quoteName(name)}: ${what}`);
  };

  // `name` is undefined at the root; `depth` counts the segments.
  type Frame = { value: PickleValue; name: string | undefined; depth: number } | { exit: object };
  const stack: Frame[] = [];
  /** The value the names start from: the state dict whose metadata is kept. */
  let stateDict: PickleValue = root;
  if (options.key !== undefined) {
    let value: PickleValue | undefined = root;
    const parts = options.key.split(".");
    for (const part of parts) {
      value = entryOf(value ?? null, part);
      if (value === undefined) {
        const keys =
          root !== null && typeof root === "object" && root.kind === "dict"
            ? [...root.entries.values()].map((e) => segment(e.key)).filter((k) => k !== undefined)
            : [];
        fail(
          "InvalidArgument",
          `--key ${JSON.stringify(options.key)}: the checkpoint has no such entry (top-level keys: ${keys.map((k) => JSON.stringify(k)).join(", ") || "none"})`,
        );
      }
    }
    stack.push({ value: value!, name: undefined, depth: 0 });
    stateDict = value!;
  } else {
    const wrapper = entryOf(root, "state_dict");
    const bearing =
      root !== null && typeof root === "object" && root.kind === "dict"
        ? [...root.entries.values()].filter((e) => findTorch(e.value, visit) !== undefined).map((e) => e.key)
        : [];
    if (wrapper !== undefined && bearing.length === 1 && bearing[0] === "state_dict" && root !== null && typeof root === "object" && root.kind === "dict") {
      // A training checkpoint: the tensors are named as in the state dict; the other entries are reported under their own names.
      const siblings = [...root.entries.values()].filter((e) => e.key !== "state_dict");
      for (let i = siblings.length - 1; i >= 0; i--) {
        const name = segment(siblings[i]!.key);
        if (name === undefined) skip(`[${describeValue(siblings[i]!.key)} key]`, "an entry whose key is not a str or an int");
        else stack.push({ value: siblings[i]!.value, name, depth: 1 });
      }
      stack.push({ value: wrapper, name: undefined, depth: 0 });
      stateDict = wrapper;
    } else {
      // A training checkpoint whose optimizer state (or EMA, loops…) holds tensors too (a Lightning
      // .ckpt): everything is converted, and the user is told once how to take just the model.
      if (wrapper !== undefined && bearing.includes("state_dict")) {
        options.onWarning?.(
          'the checkpoint has a top-level "state_dict" beside other entries holding tensors: all are converted; --key state_dict gives just the model',
        );
      }
      stack.push({ value: root, name: undefined, depth: 0 });
    }
  }

  const all: NamedTensor[] = [];
  const excluded: NamedTensor[] = [];
  const include = options.include ?? (() => true);
  const names = new Set<string>();
  const onPath = new Set<object>();
  while (stack.length > 0) {
    const frame = stack.pop()!;
    if ("exit" in frame) {
      onPath.delete(frame.exit);
      continue;
    }
    const { value, depth } = frame;
    visit();
    if (depth > maxDepth) fail("LimitExceeded", `values nest deeper than ${maxDepth} levels (maxNestingDepth)`);
    const name = frame.name ?? options.rootName ?? "tensor";
    const child = (s: string): string => (frame.name === undefined ? s : `${frame.name}.${s}`);
    if (value === null || typeof value !== "object" || value.kind === "float" || value.kind === "bytes" || value.kind === "global") {
      skip(name, describeValue(value));
      continue;
    }
    if (value.kind === "native") {
      const torch = asTorch(value)!;
      if (torch.kind === "storage") {
        skip(name, `a bare storage (${torch.className}), not a tensor`);
        continue;
      }
      if (names.has(name)) fail("DuplicateKey", 'two tensors have this name (a key holding "." beside the same path nested)', name);
      names.add(name);
      (include(name) ? all : excluded).push({ name, ref: torch });
      continue;
    }
    if (value.kind === "opaque") {
      const inside = findTorch(value, visit, reported);
      if (inside !== undefined && !include(name)) {
        // Left out by the caller: the calls inside it (a sparse tensor's layout) are not reported either.
        findTorch(value, visit, reported, true);
        continue;
      }
      if (inside !== undefined) {
        fail(
          "UnsupportedGlobal",
          `a ${inside.kind} is given to ${value.callee}, which st-convert does not interpret (it runs nothing a pickle names): refused rather than guessed`,
          name,
        );
      }
      skip(name, describeValue(value));
      continue;
    }
    if (value.kind === "set") {
      if (findTorch(value, visit) !== undefined) {
        if (!include(name)) continue;
        fail("UnsupportedGlobal", "a set holds tensors: sets have no names to give them", name);
      }
      skip(name, "a set");
      continue;
    }
    if (onPath.has(value)) {
      skip(name, `${describeValue(value)} that contains itself`);
      continue;
    }
    onPath.add(value);
    stack.push({ exit: value });
    if (value.kind === "dict") {
      const entries = [...value.entries.values()];
      for (let i = entries.length - 1; i >= 0; i--) {
        const s = segment(entries[i]!.key);
        if (s === undefined) {
          if (findTorch(entries[i]!.value, visit) !== undefined)
            fail("InvalidName", `a tensor under a ${describeValue(entries[i]!.key)} key has no name`, name);
          skip(`${name}[${describeValue(entries[i]!.key)} key]`, "an entry whose key is not a str or an int");
          continue;
        }
        stack.push({ value: entries[i]!.value, name: child(s), depth: depth + 1 });
      }
    } else {
      for (let i = value.items.length - 1; i >= 0; i--) stack.push({ value: value.items[i]!, name: child(String(i)), depth: depth + 1 });
    }
  }

  const unreported = opaqueCalls.filter((c) => !reported.has(c));
  const warn = options.onWarning;
  if (warn !== undefined) {
    for (const notice of notices.slice(0, maxWarnings)) warn(notice);
    if (notices.length > maxWarnings) warn(`skipped ${notices.length - maxWarnings} more values that are not tensors`);
    if (unreported.length > 0) {
      warn(`the pickle also calls ${unreported.join(", ")}: st-convert ran none of it, and nothing those calls would return is in the output`);
    }
  }
  return { all, excluded, skipped, metadata: keptMetadata(stateDict, options) };
}

// ----- tensors -----

/** Bytes of one element swapped as a unit when a big-endian file is read (a complex swaps per half). */
function swapUnit(ref: TensorRef): number {
  return ref.dtype.code === "C64" ? 4 : ref.dtype.size;
}

function isContiguous(shape: readonly number[], strides: readonly number[]): boolean {
  let expected = 1;
  for (let i = shape.length - 1; i >= 0; i--) {
    if (shape[i] === 0) return true;
    if (shape[i] !== 1 && strides[i] !== expected) return false;
    expected *= shape[i]!;
  }
  return true;
}

/**
 * torch refuses a view past its storage as it builds the tensor (a zip checkpoint's storages are
 * loaded whole and cannot grow), whether or not the tensor is in the result: the first such
 * tensor among those named is refused under its name, one built but left out of the result
 * without one.
 * @throws StConvertError `InvalidTensor`.
 */
function checkViews(named: Named, hooks: TorchHooks): void {
  if (hooks.badViews.length === 0) return;
  for (const t of [...named.all, ...named.excluded]) if (t.ref.viewError !== undefined) fail("InvalidTensor", t.ref.viewError, t.name);
  fail("InvalidTensor", `a tensor the pickle builds and then leaves out of its result: ${hooks.badViews[0]!.viewError}`);
}

/**
 * Makes a tensor's entry, refusing a view past its storage.
 * @throws StConvertError `InvalidTensor`, `LimitExceeded`, `UnsupportedDtype`.
 */
function tensorEntry(name: string, ref: TensorRef, storage: StorageBytes, bigEndian: boolean, options: TorchReadOptions): TorchTensor {
  const code = ref.dtype.code;
  if (code === undefined) {
    fail("UnsupportedDtype", `torch.${ref.dtype.torchName} has no safetensors dtype`, name);
  }
  if (ref.shape.length > MAX_RANK) fail("InvalidTensor", `${ref.shape.length} dimensions, more than ${MAX_RANK}`, name);
  // A view past its storage: found as the pickle built it (rebuildTensor), refused here under its name.
  if (ref.viewError !== undefined) fail("InvalidTensor", ref.viewError, name);
  const es = BigInt(ref.dtype.size);
  let numel = 1n;
  for (const d of ref.shape) numel *= BigInt(d);
  const declared = BigInt(ref.storage.numel) * BigInt(ref.storage.dtype.size);
  const view = `${ref.dtype.torchName} view at element offset ${ref.offset}, size [${ref.shape.join(", ")}], stride [${ref.strides.join(", ")}]`;
  const byteLength = numel * es;
  const maxExpanded = BigInt(options.maxExpandedBytes ?? MAX_EXPANDED_BYTES);
  if (byteLength > declared && byteLength > maxExpanded) {
    fail(
      "LimitExceeded",
      `the ${view} declares ${byteLength} bytes over a storage of ${declared}: overlapping elements past ${maxExpanded} bytes are refused (maxExpandedBytes)`,
      name,
    );
  }
  if (byteLength > BigInt(Number.MAX_SAFE_INTEGER)) fail("Unsupported", `${byteLength} bytes is past 2^53 - 1`, name);
  if (BigInt(storage.size) !== declared) {
    fail(
      "StorageSizeMismatch",
      `storage ${JSON.stringify(ref.storage.key)} is declared as ${ref.storage.numel} × ${ref.storage.className} elements (${declared} bytes), but holds ${storage.size} bytes`,
      name,
    );
  }
  const length = Number(byteLength);
  const contiguous = isContiguous(ref.shape, ref.strides);
  const unit = bigEndian ? swapUnit(ref) : 1;
  // torch reads a bool byte as its truth and gives 0x01 back for any non-zero one: so do we.
  const bool = code === "BOOL";
  const maxWindow = options.maxGatherWindow ?? MAX_GATHER_WINDOW;
  const tileSize = options.gatherTileSize ?? GATHER_TILE_SIZE;
  return {
    name,
    dtype: code,
    shape: [...ref.shape],
    byteLength: length,
    storageKey: ref.storage.key,
    storageOffset: ref.offset,
    strides: [...ref.strides],
    contiguous,
    async *chunks(chunkOptions: ChunkOptions = {}) {
      try {
        if (length === 0) return;
        if (contiguous) {
          for await (const chunk of storage.range(ref.offset * ref.dtype.size, length, unit > 1 ? { ...chunkOptions, reuse: false } : chunkOptions)) {
            if (bool) yield normalizeBools(chunk);
            else if (unit > 1) {
              const copy = new Uint8Array(chunk);
              swapBytesInPlace(copy, unit);
              yield copy;
            } else yield chunk;
          }
          return;
        }
        for await (const chunk of gather(ref, storage, length, chunkOptions.chunkSize ?? DEFAULT_CHUNK_SIZE, maxWindow, tileSize)) {
          if (unit > 1) swapBytesInPlace(chunk, unit);
          yield bool ? normalizeBools(chunk) : chunk;
        }
      } catch (error) {
        throw withContext(error, { tensor: name });
      }
    },
    // Bytes that pass as they are: a contiguous view, nothing to swap, no bool to normalize.
    extent() {
      if (length === 0 || !contiguous || unit > 1 || bool || storage.extent === undefined) return undefined;
      return extentNamed(storage.extent(ref.offset * ref.dtype.size, length), { tensor: name });
    },
  };
}

/** The chunk with every non-zero byte as 0x01: a copy when one changes, the chunk itself otherwise. */
function normalizeBools(chunk: Uint8Array): Uint8Array {
  let i = 0;
  while (i < chunk.byteLength && chunk[i]! <= 1) i++;
  if (i === chunk.byteLength) return chunk;
  const out = new Uint8Array(chunk);
  for (; i < out.byteLength; i++) if (out[i]! > 1) out[i] = 1;
  return out;
}

/**
 * A non-contiguous view's elements in C order, in chunks of at most `chunkSize` bytes (whole
 * elements). Trailing dimensions that are contiguous in the storage are copied as runs.
 *
 * Where the storage has random access, the view is gathered in tiles: the dimension whose
 * elements lie next to each other in the storage (dimension 0 of a transposed weight) is cut into
 * blocks of `T` indices, and each block's output (T whole rows, at most `tileSize` bytes) is filled
 * by one read of T adjacent runs per index of the dimensions after it, then scattered into place.
 * Reads are thus T runs long instead of one, and memory is one tile. A view with no such
 * dimension is read run by run. Inside a deflated member (no random access) the stretch of storage
 * the view spans is inflated into memory, up to `maxWindow` bytes.
 */
async function* gather(
  ref: TensorRef,
  storage: StorageBytes,
  length: number,
  chunkSize: number,
  maxWindow: number,
  tileSize: number,
): AsyncGenerator<Uint8Array> {
  const es = ref.dtype.size;
  // Dimensions of size 1 move nothing; adjacent dimensions that step as one are merged.
  const dims: { size: number; stride: number }[] = [];
  for (let i = 0; i < ref.shape.length; i++) if (ref.shape[i] !== 1) dims.push({ size: ref.shape[i]!, stride: ref.strides[i]! });
  for (let i = dims.length - 2; i >= 0; i--) {
    const inner = dims[i + 1]!;
    if (dims[i]!.stride === inner.stride * inner.size) {
      dims.splice(i, 2, { size: dims[i]!.size * inner.size, stride: inner.stride });
    }
  }
  let run = 1;
  if (dims.length > 0 && dims[dims.length - 1]!.stride === 1) run = dims.pop()!.size;
  const runBytes = run * es;
  let span = 0;
  for (const d of dims) span += (d.size - 1) * d.stride;
  const windowBytes = (span + run) * es;
  const start = ref.offset * es;
  const chunkBytes = Math.max(es, Math.floor(chunkSize / es) * es);

  // Where the bytes come from: a window in memory, or the storage itself.
  let window: Uint8Array | undefined;
  const random = storage.read !== undefined;
  if (!random || windowBytes <= Math.min(tileSize, maxWindow)) {
    if (windowBytes > maxWindow) {
      fail(
        "Unsupported",
        `a non-contiguous view spanning ${windowBytes} bytes of a deflated member (more than ${maxWindow}, maxGatherWindow) cannot be gathered`,
      );
    }
    if (storage.read !== undefined) window = await storage.read(start, windowBytes);
    else {
      const parts: Uint8Array[] = [];
      for await (const chunk of storage.range(start, windowBytes, {})) parts.push(new Uint8Array(chunk));
      window = concat(parts, windowBytes);
    }
  } else await storage.ready();
  const readAt = async (element: number, target: Uint8Array): Promise<void> => {
    if (window !== undefined) target.set(window.subarray(element * es, element * es + target.byteLength));
    else if (storage.readInto !== undefined) storage.readInto(start + element * es, target);
    else target.set(await storage.read!(start + element * es, target.byteLength));
  };

  // The tiled dimension: the one whose consecutive indices are consecutive runs in the storage.
  let p = -1;
  for (let i = dims.length - 1; i >= 0; i--) if (dims[i]!.stride === run) p = i;
  const inner = p < 0 ? [] : dims.slice(p + 1);
  const innerCount = inner.reduce((n, d) => n * d.size, 1);
  const rowBytes = innerCount * runBytes;
  const tile = p < 0 ? 1 : Math.min(dims[p]!.size, Math.max(1, Math.floor(tileSize / rowBytes)));

  if (tile > 1) {
    const outer = dims.slice(0, p);
    const along = dims[p]!;
    const outerIndex = new Array<number>(outer.length).fill(0);
    const innerIndex = new Array<number>(inner.length).fill(0);
    const outerCount = outer.reduce((n, d) => n * d.size, 1);
    let outerBase = 0;
    for (let o = 0; o < outerCount; o++) {
      for (let t0 = 0; t0 < along.size; t0 += tile) {
        const rows = Math.min(tile, along.size - t0);
        const block = new Uint8Array(rows * rowBytes);
        const piece = new Uint8Array(rows * runBytes);
        let innerBase = 0;
        for (let k = 0; k < innerCount; k++) {
          await readAt(outerBase + t0 * along.stride + innerBase, piece);
          scatter(piece, block, rows, runBytes, innerCount, k);
          for (let d = inner.length - 1; d >= 0; d--) {
            innerBase += inner[d]!.stride;
            if (++innerIndex[d]! < inner[d]!.size) break;
            innerBase -= inner[d]!.stride * inner[d]!.size;
            innerIndex[d] = 0;
          }
        }
        for (let at = 0; at < block.byteLength; at += chunkBytes) yield block.subarray(at, Math.min(at + chunkBytes, block.byteLength));
      }
      for (let d = outer.length - 1; d >= 0; d--) {
        outerBase += outer[d]!.stride;
        if (++outerIndex[d]! < outer[d]!.size) break;
        outerBase -= outer[d]!.stride * outer[d]!.size;
        outerIndex[d] = 0;
      }
    }
    return;
  }

  // Run by run, into chunks.
  let out = new Uint8Array(Math.min(chunkBytes, length));
  let filled = 0;
  let produced = 0;
  const index = new Array<number>(dims.length).fill(0);
  let element = 0; // offset from the view's first element, in elements
  const runs = length / runBytes;
  const piece = new Uint8Array(runBytes);
  for (let r = 0; r < runs; r++) {
    await readAt(element, piece);
    for (let at = 0; at < runBytes; ) {
      const take = Math.min(runBytes - at, out.byteLength - filled);
      out.set(take === runBytes ? piece : piece.subarray(at, at + take), filled);
      filled += take;
      at += take;
      if (filled === out.byteLength) {
        produced += filled;
        yield out;
        out = new Uint8Array(Math.min(chunkBytes, length - produced));
        filled = 0;
      }
    }
    for (let d = dims.length - 1; d >= 0; d--) {
      element += dims[d]!.stride;
      if (++index[d]! < dims[d]!.size) break;
      element -= dims[d]!.stride * dims[d]!.size;
      index[d] = 0;
    }
  }
  if (filled > 0) yield out.subarray(0, filled);
}

/**
 * Puts the `rows` runs of `piece` (run `t` of output row `t`) at column `k` of `block`, whose rows
 * hold `columns` runs each: a transpose of one column, by words where the run size allows.
 */
function scatter(piece: Uint8Array, block: Uint8Array, rows: number, runBytes: number, columns: number, k: number): void {
  if (runBytes % 4 === 0 && runBytes <= 32) {
    const w = runBytes / 4;
    const from = new Uint32Array(piece.buffer, piece.byteOffset, piece.byteLength / 4);
    const to = new Uint32Array(block.buffer, block.byteOffset, block.byteLength / 4);
    for (let t = 0, at = k * w; t < rows; t++, at += columns * w) for (let j = 0; j < w; j++) to[at + j] = from[t * w + j]!;
  } else if (runBytes === 2) {
    const from = new Uint16Array(piece.buffer, piece.byteOffset, rows);
    const to = new Uint16Array(block.buffer, block.byteOffset, block.byteLength / 2);
    for (let t = 0, at = k; t < rows; t++, at += columns) to[at] = from[t]!;
  } else if (runBytes === 1) {
    for (let t = 0, at = k; t < rows; t++, at += columns) block[at] = piece[t]!;
  } else {
    for (let t = 0; t < rows; t++) block.set(piece.subarray(t * runBytes, (t + 1) * runBytes), (t * columns + k) * runBytes);
  }
}

function identity(ref: TensorRef): string {
  return `${ref.storage.key}|${ref.dtype.torchName}|${ref.offset}|${ref.shape.join(",")}|${ref.strides.join(",")}`;
}

/**
 * The tensors as entries: storages checked for consistency and located, identical views over
 * one storage folded into one name (the first in code-point order, as `convert.py` keeps the
 * first sorted name), the others recorded as aliases in the metadata.
 */
function finish(
  format: TorchFile["format"],
  named: Named,
  storageOf: (ref: StorageRef) => StorageBytes,
  bigEndian: boolean,
  options: TorchReadOptions,
  globals: ReadonlySet<string>,
): TorchFile {
  const groups = new Map<string, NamedTensor[]>();
  for (const t of named.all) {
    const key = identity(t.ref);
    const group = groups.get(key);
    if (group === undefined) groups.set(key, [t]);
    else group.push(t);
  }
  const aliases: Record<string, string> = createMetadata();
  const removed = new Set<string>();
  for (const group of groups.values()) {
    if (group.length < 2) continue;
    const kept = group.map((t) => t.name).sort(compareCodePoints)[0]!;
    for (const t of group) {
      if (t.name === kept) continue;
      aliases[t.name] = kept;
      removed.add(t.name);
    }
  }
  const tensors: TorchTensor[] = [];
  for (const t of named.all) {
    let storage: StorageBytes;
    try {
      storage = storageOf(t.ref.storage);
    } catch (error) {
      throw withContext(error, { tensor: t.name });
    }
    const entry = tensorEntry(t.name, t.ref, storage, bigEndian, options);
    if (!removed.has(t.name)) tensors.push(entry);
  }
  // The kept entries first, then what this file's tensors say (the format, their aliases), which wins a clash.
  const metadata = createMetadata([...named.metadata, ["format", "pt"], ...Object.entries(aliases)]);
  return { format, metadata, tensors, aliases, skipped: named.skipped, bigEndian, globals: [...globals] };
}
