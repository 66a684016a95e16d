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
  isDtype,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { type Codec, loadCodec } from "./Codec.js";
import { encodeNpyHeader, NPY_MAGIC, startsWithMagic } from "./NpyHeader.js";
import { declarationsOf, descrOfDtype, isVoidInNumpy } from "./NpyDtype.js";
import type { NpyReadOptionsBase } from "./npy.js";
import { openNpyArray } from "./openNpyArray.js";
import { settleInBatches } from "./settleAll.js";
import { type ZipReadOptions, ZipWriter, encodeName, locateMembers, memberPayload, readZipDirectory } from "./ZipArchive.js";

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
/** Members whose npy headers are read at once when an archive is opened. */
const MEMBERS_IN_FLIGHT = 16;

/** Options of {@link readNpz}. */
export interface NpzReadOptions extends NpyReadOptionsBase, ZipReadOptions {
  /** `"fflate"` forces the portable codec browsers use; default: `node:zlib` when present. */
  codec?: "auto" | "fflate";
}

/** An `.npz` archive whose members have not been read yet. */
export interface NpzFile extends TensorSource {
  readonly format: "npz";
  /** st-convert's archive comment, when the archive has one. */
  readonly comment: NpzComment | null;
  /** Names of members skipped because they hold no npy array (numpy returns their raw bytes). */
  readonly skipped: readonly string[];
}

/**
 * Reads an `.npz` archive's directory and every member's npy header; member data is read (and
 * inflated, and its CRC-32 checked) when a tensor's `chunks()` is iterated. Metadata and void
 * dtypes come from st-convert's archive comment when there is one.
 * @throws StConvertError naming the file and the member's tensor: the zip codes (`BadZipFile`,
 *   `OverlappingMembers`, `MemberSizeMismatch`, `LimitExceeded`, `Unsupported`), the npy codes of
 *   {@link readNpy}, `DuplicateKey` when two members give the same tensor name, `InvalidMetadata`
 *   for a malformed st-convert comment. `chunks()` also throws `BadCrc` and `MemberSizeMismatch`.
 */
export async function readNpz(input: ByteInput, options: NpzReadOptions = {}): Promise<NpzFile> {
  const source = toByteSource(input);
  try {
    const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
    const directory = await readZipDirectory(source, options);
    const comment = parseComment(directory.comment);
    const declarations = declarationsOf(options.dtypes);
    const members = await locateMembers(source, directory, options);
    const opened = await settleInBatches(members, MEMBERS_IN_FLIGHT, async (member): Promise<TensorEntry | string> => {
      const name = member.name.endsWith(".npy") ? member.name.slice(0, -4) : member.name;
      try {
        const payload = memberPayload(source, member, codec);
        if (!startsWithMagic(await payload.head(NPY_MAGIC.byteLength))) return member.name;
        const array = await openNpyArray(payload, name, { ...options, declarations, recorded: comment?.dtypes[name], file: source.name });
        return array.tensor;
      } catch (error) {
        throw withContext(error, { tensor: name });
      }
    });
    const tensors: TensorEntry[] = [];
    const skipped: string[] = [];
    const seen = new Set<string>();
    for (const item of opened) {
      if (typeof item === "string") {
        skipped.push(item);
        options.onWarning?.(`member ${JSON.stringify(item)} is not an npy array (numpy would return its raw bytes); skipped`);
        continue;
      }
      if (seen.has(item.name)) throw new StConvertError("DuplicateKey", "two members of the archive give this tensor name", { tensor: item.name });
      seen.add(item.name);
      tensors.push(item);
    }
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
   * Read each stored tensor twice, a CRC-32 pass and then the copy, so that stored members carry
   * their CRC and sizes in the local header. Default true: the archive is then byte-identical to
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
 * @throws StConvertError `DuplicateKey`, `InvalidName`, `UnsupportedDtype` (F4/F6),
 *   `InvalidMetadata`, `LimitExceeded` (a comment past 65,535 bytes), `ByteLengthMismatch`,
 *   all before anything is written except the last.
 */
export async function writeNpz(source: TensorSource, sink: ByteSink, options: NpzWriteOptions = {}): Promise<void> {
  const codec = await loadCodec(options.codec === "fflate" ? "fflate" : undefined);
  const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
  checkMetadata(source.metadata);
  const seen = new Set<string>();
  const dtypes: Record<string, Dtype> = createMetadata() as Record<string, Dtype>;
  const headers = source.tensors.map((tensor) => {
    try {
      if (seen.has(tensor.name)) throw new StConvertError("DuplicateKey", "duplicate tensor name");
      seen.add(tensor.name);
      encodeName(`${tensor.name}.npy`);
      checkedByteLength(tensor);
      const descr = descrOfDtype(tensor.dtype);
      if (isVoidInNumpy(tensor.dtype)) dtypes[tensor.name] = tensor.dtype;
      return encodeNpyHeader({ descr, shape: tensor.shape });
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
      else if (options.crcPrePass !== false) {
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
