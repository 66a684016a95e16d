/**
 * The `.npz` format: a zip archive of `.npy` members, as `np.savez` and `np.savez_compressed`
 * write it (formats.md §2.6–2.7). Member `x.npy` is tensor `x` (one `.npy` suffix removed,
 * `a/b.npy` → `a/b`), in the archive's order.
 *
 * st-convert keeps what numpy cannot in the archive comment, which `np.load` ignores: a JSON
 * document `{"format": "st-convert.npz", "version": 1, "metadata": {…} | null, "dtypes": {tensor:
 * code}}` holding the source's metadata and the true dtype of every member numpy sees as raw void
 * (BF16 as `<V2`, the F8 types as `<V1`). It is written only when there is something to record.
 */
import {
  type ByteInput,
  type ByteSink,
  DEFAULT_CHUNK_SIZE,
  KERNEL_COPY_FROM,
  type Dtype,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  checkMetadata,
  checkedByteLength,
  compareCodePoints,
  createMetadata,
  exactChunks,
  readAhead,
  readTensorBytes,
  isDtype,
  isStConvertError,
  toByteSource,
  withContext,
  type ByteSource,
} from "@st-convert/core";
import { type Codec, loadCodec } from "./Codec.js";
import { encodeNpyHeader, NPY_MAGIC, parseNpyPreamble, startsWithMagic } from "./NpyHeader.js";
import { checkNumpyShape, declarationsOf, descrOfDtype, isVoidInNumpy } from "./NpyDtype.js";
import type { NpyReadOptionsBase } from "./npy.js";
import { npyTensor } from "./openNpyArray.js";
import type { Payload } from "./Payload.js";
import { settleInBatches } from "./settleAll.js";
import { type ZipDirectory, type ZipMember, type ZipReadOptions, ZipWriter, encodeName, locateMembers, memberPayload, readZipDirectory } from "./ZipArchive.js";

/** The `format` field that marks an archive comment as st-convert's. */
export const NPZ_COMMENT_FORMAT = "st-convert.npz";

/** The archive comment st-convert writes (JSON). */
export interface NpzComment {
  readonly format: typeof NPZ_COMMENT_FORMAT;
  readonly version: 1;
  /** The source's metadata, or null when it had none. */
  readonly metadata: Metadata | null;
  /** Tensor name → safetensors dtype, for members whose numpy dtype is raw void. */
  readonly dtypes: Readonly<Record<string, Dtype>>;
}

/** zlib level of `--compress`: zlib's default, which `np.savez_compressed` uses. */
const COMPRESSION_LEVEL = 6;
/** Members read from the source (not kept in memory) whose npy headers are read at once when an archive is opened. */
const MEMBERS_IN_FLIGHT = 16;
/** Bytes of a member asked for first: the magic and a header of numpy's size (see `readNpyHeader`). */
const HEAD_READ = 1024;
/** Distinct npy headers remembered while writing one archive (a bound on the memory, not a limit). */
const MAX_SHARED_HEADERS = 4096;
/** Tensors at most this large are read once into memory when writing, instead of a CRC pass and a copy. */
const SMALL_TENSOR = 1024 * 1024;

/** Options of {@link readNpz}. */
export interface NpzReadOptions extends NpyReadOptionsBase, ZipReadOptions {
  /** `"fflate"` forces the portable codec browsers use; default: `node:zlib` when present. */
  codec?: "auto" | "fflate";
  /**
   * The tensors the caller keeps (the CLI's `--filter`/`--exclude`): a member whose tensor name this
   * refuses is left out unread, so a member that cannot be converted (an object array, an
   * undeclared void) can be dropped instead of refusing the archive. Names are still checked for
   * duplicates. Default: every member.
   */
  include?: (name: string) => boolean;
}

/** An `.npz` archive whose members have not been read yet. */
export interface NpzFile extends TensorSource {
  readonly format: "npz";
  /** st-convert's archive comment, when the archive has one. */
  readonly comment: NpzComment | null;
  /** Names of members skipped because they hold no npy array (numpy returns their raw bytes), each with a warning. */
  readonly skipped: readonly string[];
}

/** A member the caller's selection left out, unread. */
const LEFT_OUT = Symbol("left out");

/** Codes of refusals that say the bytes themselves are broken, which a bad CRC-32 explains first. */
const STRUCTURAL = new Set([
  "BadMagic",
  "UnsupportedVersion",
  "HeaderTooLarge",
  "InvalidHeader",
  "InvalidHeaderKeys",
  "InvalidShape",
  "InvalidFortranOrder",
  "InvalidDescr",
  "UnexpectedEof",
]);

/**
 * Reads an `.npz` archive's directory and every member's npy header; member data is read (and
 * inflated, and its CRC-32 checked) when a tensor's `chunks()` is iterated, except for small
 * members, whose bytes are kept from the reads that located them and checked at once. Metadata
 * and void dtypes come from st-convert's archive comment when there is one.
 *
 * The archive is judged as `np.load` judges it: by its first bytes (`PK\3\4` or `PK\5\6`; a file
 * that starts as an `.npy` is an array to numpy, and one valid as both is refused), with member
 * names as `zipfile` gives them (cut at a NUL). A member named `*.npy` must hold an npy array;
 * other members that do not are skipped with a warning, and an archive with members but no array
 * at all is refused.
 * @throws StConvertError naming the file and the member's tensor: the zip codes (`BadZipFile`,
 *   `OverlappingMembers`, `MemberSizeMismatch`, `BadCrc`, `LimitExceeded`, `Unsupported`), the npy
 *   codes of {@link readNpy}, `AmbiguousFormat` for a file valid as `.npy` and as zip,
 *   `NoArrays` for an archive of members none of which is an array, `DuplicateKey` when two
 *   members give the same tensor name (or numpy's lookup would give one member for two names),
 *   `InvalidMetadata` for a malformed st-convert comment or one whose dtypes do not fit the
 *   members. `chunks()` also throws `BadCrc` and `MemberSizeMismatch`.
 */
export async function readNpz(input: ByteInput, options: NpzReadOptions = {}): Promise<NpzFile> {
  const source = toByteSource(input);
  try {
    const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
    const directory = await readArchive(source, options);
    const declarations = declarationsOf(options.dtypes);
    // The container before its comment: a member whose records lie is refused as such, whatever the comment says.
    const members = await locateMembers(source, directory, options);
    const comment = parseComment(directory.comment);
    const shared = { ...options, declarations, file: source.name };
    const optionsFor = (name: string) => {
      const recorded = comment?.dtypes[name];
      return recorded === undefined ? shared : { ...shared, recorded };
    };
    const tensorName = (member: ZipMember) => (member.name.endsWith(".npy") ? member.name.slice(0, -4) : member.name);

    /**
     * The member's tensor; its name when it holds no array and is not named *.npy (numpy returns
     * its bytes); or the number of bytes its header needs when `head` ends too early.
     */
    const judge = (member: ZipMember, payload: Payload, head: Uint8Array, complete: boolean): TensorEntry | string | number => {
      if (!startsWithMagic(head)) {
        if (!member.name.endsWith(".npy")) return member.name;
        throw new StConvertError(
          "BadMagic",
          `member ${JSON.stringify(member.name)} is named .npy but holds no npy array (it starts with ${describeStart(head)}; np.load would return its raw bytes)`,
        );
      }
      const name = tensorName(member);
      const preamble = parseNpyPreamble(head, complete, optionsFor(name));
      if (typeof preamble === "number") return preamble;
      return npyTensor(payload, name, preamble.header, preamble.dataOffset, optionsFor(name));
    };

    // Kept members are judged from memory, at once (their CRC-32 checked first); the others through
    // reads, a batch at a time.
    const opened: (TensorEntry | string | typeof LEFT_OUT)[] = new Array(members.length);
    const unread: number[] = [];
    for (let i = 0; i < members.length; i++) {
      const member = members[i]!;
      if (options.include !== undefined && !options.include(tensorName(member))) {
        opened[i] = LEFT_OUT;
        continue;
      }
      const payload = memberPayload(source, member, codec);
      if (payload.headSync === undefined) {
        unread.push(i);
        continue;
      }
      try {
        const head = payload.headSync(HEAD_READ);
        const judged = judge(member, payload, head, head.byteLength === payload.size);
        opened[i] = typeof judged === "number" ? (judge(member, payload, payload.headSync(judged), true) as TensorEntry) : judged;
      } catch (error) {
        throw withContext(error, { tensor: tensorName(member) });
      }
    }
    await settleInBatches(unread, MEMBERS_IN_FLIGHT, async (i) => {
      const member = members[i]!;
      const payload = memberPayload(source, member, codec);
      try {
        try {
          const head = await payload.head(HEAD_READ);
          const judged = judge(member, payload, head, head.byteLength === payload.size);
          opened[i] = typeof judged === "number" ? (judge(member, payload, await payload.head(judged), true) as TensorEntry) : judged;
        } catch (error) {
          // A member is judged once its bytes are known to be the archive's: a bad CRC-32 explains a broken header first.
          if (isStConvertError(error) && STRUCTURAL.has(error.code)) await payload.verify();
          throw error;
        }
      } catch (error) {
        throw withContext(error, { tensor: tensorName(member) });
      }
    });

    const tensors: TensorEntry[] = [];
    const skipped: string[] = [];
    const seen = new Set<string>();
    const memberNames = new Set(members.map((m) => m.name));
    // Every member counts, arrays or not: np.load returns the last member of a name for each time
    // it is listed, so an array beside a non-array of its name is bytes to numpy (or the other way).
    const given = new Map<string, number>();
    for (const member of members) given.set(tensorName(member), (given.get(tensorName(member)) ?? 0) + 1);
    const duplicate = (name: string) =>
      new StConvertError("DuplicateKey", `${given.get(name)} members of the archive give this tensor name (np.load returns the last of them for each)`, {
        tensor: name,
      });
    let leftOut = 0;
    for (const [i, item] of opened.entries()) {
      if (item === LEFT_OUT) {
        const name = tensorName(members[i]!);
        if (given.get(name)! > 1) throw duplicate(name);
        seen.add(name);
        leftOut++;
        continue;
      }
      if (typeof item === "string") {
        skipped.push(item);
        continue;
      }
      if (given.get(item.name)! > 1) throw duplicate(item.name);
      // np.load maps a name to the member of that exact name before the one with ".npy" added.
      if (members[i]!.name !== item.name && memberNames.has(item.name)) {
        throw new StConvertError(
          "DuplicateKey",
          `member ${JSON.stringify(members[i]!.name)} gives this tensor name, but np.load looks the name up as the member ${JSON.stringify(item.name)} itself`,
          { tensor: item.name },
        );
      }
      seen.add(item.name);
      tensors.push(item);
    }
    // An archive with nothing but skipped members is refused; its refusal says what they are.
    if (tensors.length === 0 && leftOut === 0 && members.length > 0) throw noArrays(members);
    for (const name of skipped) options.onWarning?.(`member ${JSON.stringify(name)} is not an npy array (numpy would return its raw bytes); skipped`);
    if (comment !== null) {
      for (const name of Object.keys(comment.dtypes)) {
        if (!seen.has(name)) options.onWarning?.(`the archive comment records a dtype for ${JSON.stringify(name)}, which the archive does not hold`);
      }
    }
    return { format: "npz", metadata: comment?.metadata ?? null, comment, skipped, tensors };
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
}

/**
 * The zip directory of an archive np.load would open as one: it decides by the first bytes, so a
 * file that starts as an `.npy` is an array to numpy even when a zip follows (refused here as
 * ambiguous), and one with bytes before its archive is not an archive to numpy (zipfile itself
 * would find the archive after them).
 */
async function readArchive(source: ByteSource, options: ZipReadOptions): Promise<ZipDirectory> {
  const start = await source.read(0, Math.min(NPY_MAGIC.byteLength, source.size));
  const zipStart = start[0] === 0x50 && start[1] === 0x4b && ((start[2] === 3 && start[3] === 4) || (start[2] === 5 && start[3] === 6));
  if (zipStart) return readZipDirectory(source, options);
  let directory: ZipDirectory | undefined;
  let failure: unknown;
  try {
    directory = await readZipDirectory(source, options);
  } catch (error) {
    failure = error;
  }
  if (startsWithMagic(start)) {
    if (directory !== undefined) {
      throw new StConvertError(
        "AmbiguousFormat",
        "the file is both an .npy (np.load reads it as one array, deciding by its first bytes) and a zip archive (which zipfile finds at its end); refused, as either reading would hide the other",
      );
    }
    throw new StConvertError("BadZipFile", "File is not a zip file: it starts as an .npy file, which np.load reads as one array; read it as .npy");
  }
  if (directory === undefined) throw failure;
  const first = Math.min(directory.directoryOffset, ...directory.entries.map((e) => e.headerOffset));
  throw new StConvertError(
    "BadZipFile",
    `File is not a zip file for np.load: it starts with ${describeStart(start)}, not PK\\3\\4 or PK\\5\\6, and ${first} bytes come before the archive (np.load takes such a file for a pickle and refuses it)`,
  );
}

/** The first bytes of a member or file, for messages. */
function describeStart(bytes: Uint8Array): string {
  const shown = [...bytes.subarray(0, 6)].map((b) =>
    b >= 0x20 && b < 0x7f && b !== 0x22 && b !== 0x5c ? String.fromCharCode(b) : `\\x${b.toString(16).padStart(2, "0")}`,
  );
  return bytes.byteLength === 0 ? "no bytes at all" : `"${shown.join("")}"`;
}

/** The refusal of an archive whose members are none of them arrays, saying what it looks like. */
function noArrays(members: readonly ZipMember[]): StConvertError {
  const shown = members.slice(0, 3).map((m) => JSON.stringify(m.name));
  if (members.length > 3) shown.push("…");
  const pickle = members.find((m) => /(^|\/)data\.pkl$/.test(m.name));
  const hint = pickle === undefined ? "" : `; it looks like a PyTorch checkpoint (${JSON.stringify(pickle.name)}), which is not an npz`;
  return new StConvertError(
    "NoArrays",
    `no .npy members: none of the archive's ${members.length} member${members.length === 1 ? "" : "s"} (${shown.join(", ")}) holds an npy array, so there is nothing to convert${hint}`,
  );
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

/**
 * st-convert's comment, or null for an archive without one (no comment, or someone else's).
 * @throws StConvertError `InvalidMetadata` when it is marked as st-convert's but malformed.
 */
function parseComment(bytes: Uint8Array): NpzComment | null {
  if (bytes.byteLength === 0 || bytes[0] !== 0x7b) return null;
  let doc: unknown;
  try {
    doc = JSON.parse(utf8.decode(bytes));
  } catch {
    return null;
  }
  if (typeof doc !== "object" || doc === null || (doc as { format?: unknown }).format !== NPZ_COMMENT_FORMAT) return null;
  const { version, metadata, dtypes } = doc as { version?: unknown; metadata?: unknown; dtypes?: unknown };
  const invalid = (rule: string): never => {
    throw new StConvertError("InvalidMetadata", `the st-convert archive comment is malformed: ${rule}`);
  };
  if (version !== 1) invalid(`version ${JSON.stringify(version)} is not 1 (written by a newer st-convert?)`);
  checkMetadata(metadata);
  const recorded = createMetadata() as Record<string, Dtype>;
  if (dtypes !== undefined) {
    if (typeof dtypes !== "object" || dtypes === null || Array.isArray(dtypes)) invalid("dtypes is not an object");
    for (const [name, code] of Object.entries(dtypes as object)) {
      if (typeof code !== "string" || !isDtype(code)) invalid(`dtypes records ${JSON.stringify(code)} for ${JSON.stringify(name)}, which is not a dtype`);
      recorded[name] = code as Dtype;
    }
  }
  return {
    format: NPZ_COMMENT_FORMAT,
    version: 1,
    metadata: metadata === null || metadata === undefined ? null : createMetadata(Object.entries(metadata as Metadata)),
    dtypes: recorded,
  };
}

/** Options of {@link writeNpz}. */
export interface NpzWriteOptions {
  /** Deflate the members, as `np.savez_compressed` does. Default false (stored, as `np.savez`). */
  compress?: boolean;
  /**
   * Stored members carry their CRC and sizes in the local header. Into a sink that can seek (a
   * file) each tensor is read once and its CRC written into the header after its data; into one
   * that cannot (a pipe), each is read twice, a CRC-32 pass and then the copy. Default true: the archive is then byte-identical to
   * `np.savez`'s to a file (with no metadata or void dtypes), and readers that cannot handle data
   * descriptors on stored members (Java's `ZipInputStream`, streaming unzippers) read it; reading
   * costs less than writing, so the extra pass is cheap next to the copy. `false`: one pass, the
   * CRC and sizes follow each member's data in a data descriptor, byte for byte what `np.savez`
   * writes to a pipe. Compressed members always use data descriptors (their size is known only
   * after deflating).
   */
  crcPrePass?: boolean;
  /** Bytes pulled from a tensor at a time. Default `DEFAULT_CHUNK_SIZE` (2 MiB). */
  chunkSize?: number;
  /** `"fflate"` forces the portable codec browsers use; default: `node:zlib` when present. */
  codec?: "auto" | "fflate";
}

/**
 * Streams tensors into an `.npz` archive: member `name.npy` per tensor, in the source's order,
 * each holding exactly what `np.save` writes for the array; metadata and void dtypes in the
 * archive comment (see `crcPrePass` for how often each tensor is read). `np.load(allow_pickle=False)`
 * and Python's `zipfile` read it; without metadata, void dtypes or compression it is byte-identical
 * to what `np.savez` writes to a file (to a pipe with `crcPrePass: false`). The caller closes or aborts
 * the sink.
 * @throws StConvertError `DuplicateKey` (also: two names numpy would read as one, `x` beside
 *   `x.npy`, or `a\b` beside `a/b`, one member for zipfile on Windows), `InvalidName` (a NUL,
 *   which zipfile cuts names at; a lone surrogate), `UnsupportedDtype` (F4/F6), `Unsupported` (a
 *   shape numpy refuses to make, such as U8 [0, 2^32, 2^32]), `InvalidMetadata`, `LimitExceeded`
 *   (a comment past 65,535 bytes), `ByteLengthMismatch`, all before anything is written except the last.
 */
export async function writeNpz(source: TensorSource, sink: ByteSink, options: NpzWriteOptions = {}): Promise<void> {
  const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  checkMetadata(source.metadata);
  const seen = new Set<string>();
  const onWindows = new Map<string, string>();
  const dtypes: Record<string, Dtype> = createMetadata() as Record<string, Dtype>;
  for (const tensor of source.tensors) {
    if (seen.has(tensor.name)) throw new StConvertError("DuplicateKey", "duplicate tensor name", { tensor: tensor.name });
    seen.add(tensor.name);
    // zipfile on Windows reads a '\' in a member name as '/': both names would be one there.
    const slashed = tensor.name.replaceAll("\\", "/");
    const other = onWindows.get(slashed);
    if (other !== undefined) {
      throw new StConvertError(
        "DuplicateKey",
        `tensors ${JSON.stringify(other)} and ${JSON.stringify(tensor.name)} would be one member for numpy on Windows, which reads '\\' in member names as '/'`,
        {
          tensor: tensor.name,
        },
      );
    }
    onWindows.set(slashed, tensor.name);
  }
  const headerOf = new Map<string, Uint8Array>();
  const headers = source.tensors.map((tensor) => {
    try {
      // np.load looks a name up as a member of that exact name first: tensor "x.npy" (member
      // "x.npy.npy") would read back as tensor "x" (member "x.npy").
      if (tensor.name.endsWith(".npy") && seen.has(tensor.name.slice(0, -4))) {
        throw new StConvertError(
          "DuplicateKey",
          `tensors ${JSON.stringify(tensor.name.slice(0, -4))} and ${JSON.stringify(tensor.name)} cannot both be written: np.load reads ${JSON.stringify(tensor.name)} as the member of the first (${JSON.stringify(tensor.name)}), not as ${JSON.stringify(`${tensor.name}.npy`)}`,
        );
      }
      encodeName(`${tensor.name}.npy`);
      checkedByteLength(tensor);
      const descr = descrOfDtype(tensor.dtype);
      checkNumpyShape(tensor.dtype, tensor.shape);
      if (isVoidInNumpy(tensor.dtype)) dtypes[tensor.name] = tensor.dtype;
      // Many tensors share a dtype and shape: one header each (the writer copies it, never changes it).
      const key = `${descr} ${tensor.shape.join(",")}`;
      let header = headerOf.get(key);
      if (header === undefined) {
        header = encodeNpyHeader({ descr, shape: tensor.shape });
        if (headerOf.size < MAX_SHARED_HEADERS) headerOf.set(key, header);
      }
      return header;
    } catch (error) {
      throw withContext(error, { tensor: tensor.name });
    }
  });
  let comment = new Uint8Array(0);
  if (source.metadata !== null || Object.keys(dtypes).length > 0) {
    const metadata =
      source.metadata === null
        ? null
        : createMetadata(
            Object.keys(source.metadata)
              .sort(compareCodePoints)
              .map((k) => [k, source.metadata![k]!]),
          );
    const doc: NpzComment = { format: NPZ_COMMENT_FORMAT, version: 1, metadata, dtypes };
    comment = new TextEncoder().encode(JSON.stringify(doc));
    if (comment.byteLength > 0xffff) {
      throw new StConvertError("LimitExceeded", `metadata and dtypes need ${comment.byteLength} bytes in the archive comment, which holds at most 65,535`);
    }
  }

  const zip = new ZipWriter(sink, codec);
  for (const [i, tensor] of source.tensors.entries()) {
    const header = headers[i]!;
    const member = `${tensor.name}.npy`;
    const data = () => withHeader(header, readAhead(exactChunks(tensor, { chunkSize })));
    try {
      if (options.compress === true) await zip.addStreamed(member, data(), COMPRESSION_LEVEL);
      else if (options.crcPrePass !== false && tensor.byteLength <= SMALL_TENSOR) {
        // One read into memory serves the CRC and the copy.
        await zip.addStoredBytes(member, [header, await readTensorBytes(tensor)]);
      } else if (
        options.crcPrePass !== false &&
        zip.canPatch &&
        tensor.byteLength >= KERNEL_COPY_FROM &&
        sink.copyFrom !== undefined &&
        tensor.extent !== undefined
      ) {
        // Bytes that lie as they are in a file: piped whole, copied in the kernel where the sink can.
        await zip.addStoredTensor(member, header, tensor, chunkSize);
      } else if (options.crcPrePass !== false && zip.canPatch) {
        // A sink that can seek: one pass, the CRC written into the local header after the data.
        await zip.addStoredPatched(member, header.byteLength + tensor.byteLength, data());
      } else if (options.crcPrePass !== false) {
        const crc = await crcOf(data(), codec);
        await zip.addStored(member, header.byteLength + tensor.byteLength, crc, data());
      } else await zip.addStreamed(member, data());
    } catch (error) {
      throw withContext(error, { tensor: tensor.name });
    }
  }
  await zip.finish(comment);
}

async function crcOf(data: AsyncIterable<Uint8Array>, codec: Codec): Promise<number> {
  let crc = 0;
  for await (const chunk of data) crc = codec.crc32(chunk, crc);
  return crc;
}

async function* withHeader(header: Uint8Array, data: AsyncIterable<Uint8Array>): AsyncGenerator<Uint8Array> {
  yield header;
  yield* data;
}
