/**
 * The zip container of `.npz`: a reader that trusts only the central directory and bounds
 * everything by what the archive declares, and a sequential writer whose bytes are those of
 * Python's `zipfile` as numpy drives it.
 *
 * Spec: PKWARE APPNOTE 6.3 (§4.3.7 local header, §4.3.9 data descriptor, §4.3.12 central
 * directory, §4.3.14–16 ZIP64 end records, §4.5.3 ZIP64 extra field), and CPython 3.11
 * `Lib/zipfile.py` for the behaviour to match (`_EndRecData`, `_RealGetContents`,
 * `ZipInfo._decodeExtra`, `ZipInfo.FileHeader`, `_ZipWriteFile.close`, `_write_end_record`).
 * numpy opens every member with `force_zip64=True`, so local headers carry sizes 0xFFFFFFFF and a
 * ZIP64 extra field while the central directory holds the real 32-bit values (formats.md §2.6).
 */
import {
  type ByteSink,
  type ByteSource,
  DEFAULT_CHUNK_SIZE,
  StConvertError,
  type TensorEntry,
  bytesSource,
  hasLoneSurrogate,
  pipeTensor,
  readRange,
} from "@st-convert/core";
import type { Codec } from "./Codec.js";
import type { Payload } from "./Payload.js";
import { THREAD_CRC_FROM, crc32Stream, withCrc32 } from "./crcThread.js";
import { crcCounted, rangeCrc32 } from "./crcTensor.js";

/**
 * Largest central directory read, in bytes. 64 MiB lists more than a million members; a larger
 * one can only be a lie meant to make us allocate. Overridable (`maxDirectorySize`).
 */
export const MAX_ZIP_DIRECTORY_SIZE = 64 * 1024 * 1024;

/**
 * Largest uncompressed member accepted: 1 TiB, far past any real tensor, so that a member that
 * declares more (a bomb, a lie) is refused before a byte is inflated. Overridable (`maxMemberSize`).
 */
export const MAX_NPZ_MEMBER_SIZE = 2 ** 40;

/**
 * DEFLATE expands at most 1032:1 (a 258-byte match coded in 2 bits); a member declaring more
 * output than that from its compressed size is lying, whatever limit is set.
 */
const MAX_DEFLATE_RATIO = 1032;

const SIG_LOCAL = 0x04034b50;
const SIG_CENTRAL = 0x02014b50;
const SIG_DESCRIPTOR = 0x08074b50;
const SIG_END = 0x06054b50;
const SIG_END64 = 0x06064b50;
const SIG_LOCATOR64 = 0x07064b50;
const END_SIZE = 22;
const END64_SIZE = 56;
const LOCATOR64_SIZE = 20;
const CENTRAL_SIZE = 46;
const LOCAL_SIZE = 30;
const MAX_COMMENT = 0xffff;
/**
 * Bytes at the end searched for the end record: zipfile's `maxCommentStart` is 64 KiB + 22 bytes
 * from the end, one byte more than the longest comment needs, so a record followed by a full
 * comment and one stray byte is still found.
 */
const END_SEARCH = 0x10000 + END_SIZE;
/** CPython's `zipfile.ZIP64_LIMIT`: past it a size or offset goes to the ZIP64 extra field. */
const ZIP64_LIMIT = 2 ** 31 - 1;
const FILECOUNT_LIMIT = 0xffff;
/** `zipfile.MAX_EXTRACT_VERSION`: archives that need a newer reader are refused. */
const MAX_EXTRACT_VERSION = 63;
const FLAG_ENCRYPTED = 0x1;
const FLAG_DESCRIPTOR = 0x8;
const FLAG_PATCHED = 0x20;
const FLAG_STRONG_ENCRYPTION = 0x40;
const FLAG_UTF8 = 0x800;
const FLAG_MASKED = 0x2000;

/** Central-directory entry of one member, offsets already corrected for bytes prepended to the archive. */
export interface ZipEntry {
  /**
   * The name as zipfile gives it (`ZipInfo.filename`, what `namelist()` and numpy see): decoded,
   * then cut at its first NUL, so that `w.npy\0y` is `w.npy` (with `rules: "miniz"`, whole and UTF-8, as torch sees it).
   */
  readonly name: string;
  /** The name as stored, before the cut at NUL (`ZipInfo.orig_filename`, what the local header must repeat). */
  readonly originalName: string;
  readonly flags: number;
  /** 0 stored, 8 deflated (others are refused when the member is located). */
  readonly method: number;
  readonly crc32: number;
  readonly compressedSize: number;
  readonly size: number;
  readonly headerOffset: number;
  /** The central directory's external attributes (bit 4, 0x10, is MS-DOS's directory attribute). */
  readonly externalAttributes: number;
}

/** A member whose local header has been read and checked. */
export interface ZipMember extends ZipEntry {
  /** Offset of the member's first data byte. */
  readonly dataOffset: number;
  /**
   * The member's stored bytes (`compressedSize` of them, still deflated for a deflated member),
   * when {@link locateMembers} kept them from the blocks it read: small members, within
   * {@link MAX_KEPT_BYTES}. {@link memberPayload} then serves them from memory.
   */
  readonly stored?: Uint8Array;
}

/** What the end records and the central directory say. */
export interface ZipDirectory {
  /** Entries in central-directory order (the order the members were written). */
  readonly entries: readonly ZipEntry[];
  /** The archive comment, as stored. */
  readonly comment: Uint8Array;
  /** Offset of the central directory, where member data must end. */
  readonly directoryOffset: number;
}

/** Options of the zip reader. */
export interface ZipReadOptions {
  /** Largest central directory, in bytes. Default {@link MAX_ZIP_DIRECTORY_SIZE}. */
  maxDirectorySize?: number;
  /** Largest uncompressed member, in bytes. Default {@link MAX_NPZ_MEMBER_SIZE}. */
  maxMemberSize?: number;
  /**
   * Most bytes of the blocks read while locating members that are kept for small members, so that
   * reading them needs no read of their own. Default {@link MAX_KEPT_BYTES} (64 MiB); 0 keeps none.
   */
  maxKeptBytes?: number;
  /**
   * Whose reading of the container to follow. `"zipfile"` (the default): CPython's `zipfile`, as
   * numpy reads an `.npz`. `"miniz"`: torch's reader (miniz under `PyTorchStreamReader`) where it
   * differs, for `.pt` files: names are UTF-8 whatever flag 11 says and are kept whole (never cut
   * at NUL); the archive starts at its first byte (bytes before it, or an archive before it, are
   * refused, where zipfile shifts every offset); the end record's entry counts must be the
   * directory's and its disk numbers 0; flag bit 13 (a masked local header) is refused.
   */
  rules?: "zipfile" | "miniz";
}

const EMPTY = new Uint8Array(0);
const EMPTY_VIEW = new DataView(EMPTY.buffer);

function bad(rule: string): never {
  throw new StConvertError("BadZipFile", rule);
}

function view(bytes: Uint8Array): DataView {
  return new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
}

function u64(v: DataView, at: number, what: string): number {
  const value = v.getBigUint64(at, true);
  if (value > BigInt(Number.MAX_SAFE_INTEGER)) bad(`${what} ${value} is past any file st-convert can read`);
  return Number(value);
}

/**
 * Reads the end records and the central directory, as `zipfile` does: the end record is the last
 * `PK\5\6` in the final 64 KiB + 22 bytes, a ZIP64 locator and end record right before it replace
 * its counts, and bytes prepended to the archive shift every offset.
 * @throws StConvertError `BadZipFile` (not a zip, truncated, bad signatures, corrupt extra
 *   fields, multi-disk), `LimitExceeded` (directory past the limit), `Unsupported` (needs a
 *   newer zip reader).
 */
export async function readZipDirectory(source: ByteSource, options: ZipReadOptions = {}): Promise<ZipDirectory> {
  const maxDirectorySize = options.maxDirectorySize ?? MAX_ZIP_DIRECTORY_SIZE;
  if (source.size < END_SIZE) bad(`File is not a zip file: ${source.size} bytes, fewer than an end-of-archive record`);
  const tailStart = Math.max(0, source.size - END_SEARCH);
  const tail = await source.read(tailStart, source.size - tailStart);
  const tv = view(tail);
  let at = tail.byteLength - END_SIZE;
  if (!(tv.getUint32(at, true) === SIG_END && tv.getUint16(at + 20, true) === 0)) {
    // An archive with a comment: the last signature wins, as in zipfile (`rfind`).
    at = -1;
    for (let i = tail.byteLength - 4; i >= 0; i--) {
      if (tail[i] === 0x50 && tv.getUint32(i, true) === SIG_END) {
        at = i;
        break;
      }
    }
    if (at < 0 || at + END_SIZE > tail.byteLength) bad("File is not a zip file: no end-of-central-directory record");
  }
  const endOffset = tailStart + at;
  const miniz = options.rules === "miniz";
  if (miniz && (tv.getUint16(at + 4, true) !== 0 || tv.getUint16(at + 6, true) !== 0)) bad("zip files that span multiple disks are not supported");
  let declaredCount = tv.getUint16(at + 10, true);
  if (miniz && tv.getUint16(at + 8, true) !== declaredCount) bad("the end record's two entry counts differ");
  const commentLength = tv.getUint16(at + 20, true);
  const comment = new Uint8Array(tail.subarray(at + END_SIZE, at + END_SIZE + commentLength));
  let directorySize = tv.getUint32(at + 12, true);
  let directoryOffset = tv.getUint32(at + 16, true);
  let zip64 = false;

  if (endOffset >= LOCATOR64_SIZE) {
    const locator = await source.read(endOffset - LOCATOR64_SIZE, LOCATOR64_SIZE);
    const lv = view(locator);
    if (lv.getUint32(0, true) === SIG_LOCATOR64) {
      // zipfile takes a total of 0 or 1 disks; miniz exactly 1.
      const disks = lv.getUint32(16, true);
      if (lv.getUint32(4, true) !== 0 || disks > 1 || (miniz && disks !== 1)) bad("zip files that span multiple disks are not supported");
      // zipfile looks right before the locator (no extensible data), not where the locator points.
      const end64At = endOffset - LOCATOR64_SIZE - END64_SIZE;
      if (end64At >= 0) {
        const end64 = view(await source.read(end64At, END64_SIZE));
        if (end64.getUint32(0, true) === SIG_END64) {
          zip64 = true;
          // zipfile walks the directory by its size and ignores the count, whatever it says; so do
          // we. miniz compares it with the directory (and cannot count past 2^32).
          if (miniz) declaredCount = u64(end64, 32, "entry count");
          directorySize = u64(end64, 40, "central directory size");
          directoryOffset = u64(end64, 48, "central directory offset");
          // miniz reads the ZIP64 end record where the locator points, and checks its disks and counts.
          if (miniz) {
            // The record's own size counts the bytes after its first 12: at least the 44 of its fixed fields.
            const recordSize = end64.getBigUint64(4, true);
            if (recordSize < 44n) bad(`the ZIP64 end record declares ${recordSize} bytes, fewer than its 44 fixed ones`);
            if (lv.getBigUint64(8, true) !== BigInt(end64At)) bad("the ZIP64 locator does not point at the ZIP64 end record before it");
            if (end64.getUint32(16, true) !== 0 || end64.getUint32(20, true) !== 0) bad("zip files that span multiple disks are not supported");
            if (end64.getBigUint64(24, true) !== end64.getBigUint64(32, true)) bad("the ZIP64 end record's two entry counts differ");
          }
        }
      }
    }
  }
  let concat = endOffset - directorySize - directoryOffset;
  if (zip64) concat -= END64_SIZE + LOCATOR64_SIZE;
  const start = directoryOffset + concat;
  if (miniz && concat !== 0) {
    bad(
      `the central directory is not where the end record says (${concat} bytes off): bytes or another archive come before this one, which torch does not read`,
    );
  }
  if (start < 0 || directorySize < 0 || start + directorySize > endOffset) bad("Bad offset for central directory");
  if (directorySize > maxDirectorySize) {
    throw new StConvertError("LimitExceeded", `central directory of ${directorySize} bytes is larger than the limit of ${maxDirectorySize}`);
  }

  const directory = await source.read(start, directorySize);
  const dv = view(directory);
  const entries: ZipEntry[] = [];
  for (let p = 0; p < directory.byteLength; ) {
    if (p + CENTRAL_SIZE > directory.byteLength) bad("Truncated central directory");
    if (dv.getUint32(p, true) !== SIG_CENTRAL) bad("Bad magic number for central directory");
    const extractVersion = directory[p + 6]!;
    const flags = dv.getUint16(p + 8, true);
    const method = dv.getUint16(p + 10, true);
    const crc32 = dv.getUint32(p + 16, true);
    let compressedSize = dv.getUint32(p + 20, true);
    let size = dv.getUint32(p + 24, true);
    const nameLength = dv.getUint16(p + 28, true);
    const extraLength = dv.getUint16(p + 30, true);
    const commentLen = dv.getUint16(p + 32, true);
    let headerOffset = dv.getUint32(p + 42, true);
    const externalAttributes = dv.getUint32(p + 38, true);
    const end = p + CENTRAL_SIZE + nameLength + extraLength + commentLen;
    if (end > directory.byteLength) bad("Truncated central directory");
    const originalName = decodeName(directory.subarray(p + CENTRAL_SIZE, p + CENTRAL_SIZE + nameLength), flags, miniz);
    const nul = miniz ? -1 : originalName.indexOf("\0");
    const name = nul < 0 ? originalName : originalName.slice(0, nul);
    // miniz judges every entry's 32-bit sizes as it opens the archive, extracted or not: data of no
    // bytes that inflates to some, or (its method and time read as one 32-bit zero) a stored
    // entry whose two sizes differ.
    if (miniz && compressedSize !== 0xffffffff && size !== 0xffffffff) {
      if (size !== 0 && compressedSize === 0)
        bad(`member ${JSON.stringify(originalName)} declares ${size} bytes from 0 compressed ones; torch (miniz): "invalid header or archive is corrupted"`);
      if (dv.getUint32(p + 10, true) === 0 && size !== compressedSize) {
        bad(
          `member ${JSON.stringify(originalName)} is stored with ${compressedSize} bytes but declares ${size}; torch (miniz): "invalid header or archive is corrupted"`,
        );
      }
    }
    // miniz takes a member's disk to be 0 or 1 (some writers count from 1); any other is another disk.
    const disk = dv.getUint16(p + 34, true);
    if (miniz && disk !== 0 && disk !== 1) bad(`member ${JSON.stringify(name)} starts on disk ${disk}: zip files that span multiple disks are not supported`);
    if (miniz && (flags & FLAG_MASKED) !== 0)
      throw new StConvertError("Unsupported", `member ${JSON.stringify(name)} is encrypted (its local header is masked, flag bit 13)`);
    if (extractVersion > MAX_EXTRACT_VERSION) {
      throw new StConvertError("Unsupported", `member ${JSON.stringify(name)} needs zip version ${extractVersion / 10}, newer than this reader`);
    }
    // ZipInfo._decodeExtra: a ZIP64 field holds, in order, each 32-bit value that is 0xFFFFFFFF.
    const extra = extraLength === 0 ? EMPTY : directory.subarray(p + CENTRAL_SIZE + nameLength, p + CENTRAL_SIZE + nameLength + extraLength);
    const ev = extraLength === 0 ? EMPTY_VIEW : view(extra);
    for (let e = 0; e + 4 <= extra.byteLength; ) {
      const type = ev.getUint16(e, true);
      const length = ev.getUint16(e + 2, true);
      if (e + 4 + length > extra.byteLength) bad(`Corrupt extra field ${type.toString(16).padStart(4, "0")} (size=${length})`);
      if (type === 1) {
        let q = e + 4;
        const take = (what: string): number => {
          if (q + 8 > e + 4 + length) bad(`Corrupt zip64 extra field. ${what} not found.`);
          const value = u64(ev, q, what);
          q += 8;
          return value;
        };
        if (size === 0xffffffff) size = take("File size");
        if (compressedSize === 0xffffffff) compressedSize = take("Compress size");
        if (headerOffset === 0xffffffff) headerOffset = take("Header offset");
      }
      e += 4 + length;
    }
    entries.push({ name, originalName, flags, method, crc32, compressedSize, size, headerOffset: headerOffset + concat, externalAttributes });
    p = end;
  }
  if (miniz && declaredCount !== entries.length) {
    bad(`the end record counts ${declaredCount} members, but the central directory holds ${entries.length}`);
  }
  return { entries, comment, directoryOffset: start };
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
const CP437_HIGH = "ÇüéâäàåçêëèïîìÄÅÉæÆôöòûùÿÖÜ¢£¥₧ƒáíóúñÑªº¿⌐¬½¼¡«»░▒▓│┤╡╢╖╕╣║╗╝╜╛┐└┴┬├─┼╞╟╚╔╩╦╠═╬╧╨╤╥╙╘╒╓╫╪┘┌█▄▌▐▀αßΓπΣσµτΦΘΩδ∞φε∩≡±≥≤⌠⌡÷≈°∙·√ⁿ²■\u00a0";

const latin1 = new TextDecoder("latin1");

/** A member name as zipfile decodes it: UTF-8 with flag 11 set, else code page 437. */
function decodeName(bytes: Uint8Array, flags: number, alwaysUtf8 = false): string {
  if (alwaysUtf8 || (flags & FLAG_UTF8) !== 0) {
    try {
      return utf8.decode(bytes);
    } catch {
      return bad(alwaysUtf8 ? "a member name is not valid UTF-8 (torch reads every name as UTF-8)" : "a member name flagged as UTF-8 is not valid UTF-8");
    }
  }
  let ascii = true;
  for (const b of bytes) if (b >= 0x80) ascii = false;
  // ASCII is the same in code page 437 (and "latin1", which TextDecoder takes as windows-1252).
  if (ascii) return latin1.decode(bytes);
  let name = "";
  for (const b of bytes) name += b < 0x80 ? String.fromCharCode(b) : CP437_HIGH[b - 0x80]!;
  return name;
}

/** Local headers (and small members) are read in blocks of up to this many bytes: few reads for many members. */
const LOCATE_BLOCK = 1024 * 1024;
/** Members whose stored bytes are at most this many are kept from the blocks read to locate them. */
const SMALL_MEMBER = 64 * 1024;
/**
 * Most bytes of blocks kept for small members; past it, small members are read when asked for,
 * as large ones are. Bounds the memory an archive of many small members holds while open.
 */
export const MAX_KEPT_BYTES = 64 * 1024 * 1024;
/** Bytes assumed for a local header's name and extra field before it is read (numpy's extra field is 20). */
const LOCAL_GUESS = 64;

/**
 * Reads and checks each member's local header, and checks that every member's data lies between
 * its header and the next member's (or the central directory), as CPython ≥ 3.12 does against
 * "overlapped entries" zip bombs; then that sizes are possible and within the limit. Headers are
 * read in archive order through blocks of up to 1 MiB, so an archive of 50,000 small members
 * costs a dozen reads; small members' bytes are kept from those blocks (`stored`), up to
 * {@link MAX_KEPT_BYTES}.
 * @throws StConvertError `BadZipFile`, `OverlappingMembers`, `MemberSizeMismatch`,
 *   `LimitExceeded`, `Unsupported` (encryption, compression other than stored/deflated).
 */
export async function locateMembers(source: ByteSource, directory: ZipDirectory, options: ZipReadOptions = {}): Promise<ZipMember[]> {
  const maxMemberSize = options.maxMemberSize ?? MAX_NPZ_MEMBER_SIZE;
  const maxKept = options.maxKeptBytes ?? MAX_KEPT_BYTES;
  const entries = directory.entries;
  const order = entries.map((_, i) => i).sort((a, b) => entries[a]!.headerOffset - entries[b]!.headerOffset);
  const members: ZipMember[] = new Array(entries.length);
  let block: Uint8Array = new Uint8Array(0);
  let blockStart = 0;
  let blockKept = false;
  let kept = 0;
  /** The bytes [from, from + length) are in `block`; read a new block (covering the next members too) if not. */
  const ensure = async (from: number, length: number, position: number): Promise<void> => {
    if (from >= blockStart && from + length <= blockStart + block.byteLength) return;
    let end = from + length;
    // Extend over the following members' headers (and small members' data) while the block stays within LOCATE_BLOCK.
    for (let k = position + 1; k < order.length; k++) {
      const next = entries[order[k]!]!;
      const nextEnd =
        next.headerOffset + LOCAL_SIZE + next.originalName.length * 3 + LOCAL_GUESS + (next.compressedSize <= SMALL_MEMBER ? next.compressedSize : 0);
      if (nextEnd - from > LOCATE_BLOCK || next.headerOffset < from) break;
      end = Math.max(end, nextEnd);
    }
    end = Math.min(end, source.size);
    block = await source.read(from, end - from);
    blockStart = from;
    blockKept = false;
  };
  for (let position = 0; position < order.length; position++) {
    const index = order[position]!;
    const entry = entries[index]!;
    const at = entry.headerOffset;
    const where = () => `member ${JSON.stringify(entry.name)}`;
    if (at + LOCAL_SIZE > source.size) bad(`${where()}: local header at offset ${at} is past the end of the ${source.size}-byte archive`);
    // (`ensure` is awaited only when it has to read: an await per member is a fair part of the cost.)
    if (!(at >= blockStart && at + LOCAL_SIZE <= blockStart + block.byteLength)) {
      await ensure(at, Math.min(LOCAL_SIZE + entry.originalName.length * 3 + LOCAL_GUESS, source.size - at), position);
    }
    const h = at - blockStart;
    if (block[h] !== 0x50 || block[h + 1] !== 0x4b || block[h + 2] !== 3 || block[h + 3] !== 4) bad(`${where()}: Bad magic number for file header`);
    const localFlags = block[h + 6]! | (block[h + 7]! << 8);
    const nameLength = block[h + 26]! | (block[h + 27]! << 8);
    const extraLength = block[h + 28]! | (block[h + 29]! << 8);
    const dataOffset = at + LOCAL_SIZE + nameLength + extraLength;
    if (dataOffset > source.size) bad(`${where()}: local header runs past the end of the archive`);
    if (!(at + LOCAL_SIZE + nameLength <= blockStart + block.byteLength)) await ensure(at, LOCAL_SIZE + nameLength, position);
    const localName = decodeName(
      block.subarray(at - blockStart + LOCAL_SIZE, at - blockStart + LOCAL_SIZE + nameLength),
      localFlags,
      options.rules === "miniz",
    );
    if (localName !== entry.originalName) {
      bad(`File name in directory ${JSON.stringify(entry.originalName)} and header ${JSON.stringify(localName)} differ.`);
    }
    let stored: Uint8Array | undefined;
    const end = dataOffset + entry.compressedSize;
    if (entry.compressedSize <= SMALL_MEMBER && end <= source.size && end <= directory.directoryOffset) {
      const inBlock = end <= blockStart + block.byteLength;
      if (inBlock || kept + LOCATE_BLOCK <= maxKept) {
        if (!inBlock) await ensure(at, end - at, position);
        if (blockKept || kept + block.byteLength <= maxKept) {
          if (!blockKept) kept += block.byteLength;
          blockKept = true;
          stored = block.subarray(dataOffset - blockStart, end - blockStart);
        }
      }
    }
    members[index] = {
      name: entry.name,
      originalName: entry.originalName,
      flags: entry.flags,
      method: entry.method,
      crc32: entry.crc32,
      compressedSize: entry.compressedSize,
      size: entry.size,
      headerOffset: entry.headerOffset,
      externalAttributes: entry.externalAttributes,
      dataOffset,
      stored,
    };
  }
  const byOffset = order.map((i) => members[i]!).reverse();
  let end = directory.directoryOffset;
  for (const m of byOffset) {
    if (m.dataOffset + m.compressedSize > end) {
      const other = end === directory.directoryOffset ? "the central directory" : "the next member";
      throw new StConvertError(
        "OverlappingMembers",
        `member ${JSON.stringify(m.name)}: its ${m.compressedSize} bytes of data at offset ${m.dataOffset} run into ${other} at ${end} (overlapping entries: a possible zip bomb)`,
      );
    }
    end = m.headerOffset;
  }
  // zipfile's reader (numpy reads every member) is judged on all; miniz judges a member's flags
  // and method only when torch extracts it (checkExtractable).
  const miniz = options.rules === "miniz";
  for (const m of members) checkMember(m, maxMemberSize, !miniz);
  return members;
}

/**
 * A member's flags and compression method, as a reader that extracts it judges them: encrypted,
 * patched (flag bit 5) or compressed other than stored or deflated is refused.
 * @throws StConvertError `Unsupported`.
 */
export function checkExtractable(m: ZipMember): void {
  const where = { toString: () => `member ${JSON.stringify(m.name)}` };
  if ((m.flags & (FLAG_ENCRYPTED | FLAG_STRONG_ENCRYPTION)) !== 0) throw new StConvertError("Unsupported", `${where} is encrypted`);
  if ((m.flags & FLAG_PATCHED) !== 0) throw new StConvertError("Unsupported", `${where} holds compressed patched data (flag bit 5)`);
  if (m.method !== 0 && m.method !== 8) {
    const known: Record<number, string> = { 9: "deflate64", 12: "bzip2", 14: "lzma", 93: "zstandard", 95: "xz" };
    throw new StConvertError(
      "Unsupported",
      `${where} uses compression method ${m.method}${known[m.method] === undefined ? "" : ` (${known[m.method]})`}; numpy writes only stored and deflated members`,
    );
  }
}

function checkMember(m: ZipMember, maxMemberSize: number, extractable: boolean): void {
  const where = { toString: () => `member ${JSON.stringify(m.name)}` };
  if (extractable) checkExtractable(m);
  if (m.method === 0 && m.compressedSize !== m.size) {
    throw new StConvertError("MemberSizeMismatch", `${where} is stored but declares ${m.compressedSize} stored bytes and ${m.size} uncompressed`);
  }
  if (m.method === 8 && m.size > m.compressedSize * MAX_DEFLATE_RATIO + 1024) {
    bad(`${where} declares ${m.size} bytes from ${m.compressedSize} compressed ones, more than DEFLATE can produce (${MAX_DEFLATE_RATIO}:1)`);
  }
  if (m.size > maxMemberSize) {
    throw new StConvertError("LimitExceeded", `${where} declares ${m.size} bytes, more than the limit of ${maxMemberSize} (maxMemberSize)`);
  }
}

/** Compressed bytes read at once when inflating a member. */
const INFLATE_INPUT = 1024 * 1024;
/** Smaller reads and buffers when only a member's first bytes (its npy header) are wanted. */
const HEAD_INFLATE = 16 * 1024;

/** Largest member inflated in one synchronous call from kept bytes (more goes through the streaming inflater). */
const SYNC_INFLATE = 1024 * 1024;

/**
 * A member's bytes as a {@link Payload}: CRC-32 and sizes verified whenever a pass reaches the
 * end (for a member whose bytes {@link locateMembers} kept, before any byte is handed on).
 */
export function memberPayload(source: ByteSource, member: ZipMember, codec: Codec): Payload {
  if (member.stored !== undefined) {
    const stored = member.stored;
    if (member.method === 0) return new KeptPayload(member, () => stored, codec);
    const inflateRawSync = codec.inflateRawSync;
    if (inflateRawSync !== undefined && member.size <= SYNC_INFLATE) return new KeptPayload(member, () => inflateKept(member, inflateRawSync), codec);
    // Too large to inflate at once: the streaming inflater, over the kept bytes.
    return deflatedPayload(bytesSource(member.stored), { ...member, dataOffset: 0 }, codec);
  }
  return member.method === 0 ? storedPayload(source, member, codec) : deflatedPayload(source, member, codec);
}

/** A kept deflated member's bytes, all of them, checked against the declared size. */
function inflateKept(member: ZipMember, inflateRawSync: NonNullable<Codec["inflateRawSync"]>): Uint8Array {
  const where = `member ${JSON.stringify(member.name)}`;
  const out = inflateRawSync(member.stored!, member.size);
  if (out === undefined) throw new StConvertError("MemberSizeMismatch", `${where} inflates past the ${member.size} bytes it declares (a possible zip bomb)`);
  if (out.byteLength !== member.size)
    throw new StConvertError("MemberSizeMismatch", `${where} inflates to ${out.byteLength} bytes, not the ${member.size} it declares`);
  return out;
}

/**
 * A member whose uncompressed bytes `bytes()` gives from memory: the CRC-32 is checked the first
 * time they are asked for, before any is handed on, and the bytes of a deflated member are
 * inflated again for each use rather than held (`bytes()` of a stored member is a view). A class:
 * an archive of many small members makes one per member. Its methods are the prototype's: call
 * them on the payload, never detached.
 */
class KeptPayload implements Payload {
  #verified = false;

  constructor(
    private readonly member: ZipMember,
    private readonly bytes: () => Uint8Array,
    private readonly codec: Codec,
  ) {}

  get size(): number {
    return this.member.size;
  }

  #checked(): Uint8Array {
    const all = this.bytes();
    if (!this.#verified) {
      const crc = this.codec.crc32(all, 0);
      if (crc !== this.member.crc32) throw crcError(this.member, crc);
      this.#verified = true;
    }
    return all;
  }

  headSync(length: number): Uint8Array {
    return this.#checked().subarray(0, Math.min(length, this.member.size));
  }

  bytesSync(offset: number, length: number): Uint8Array {
    checkRangeOf(this.member, offset, length);
    return this.#checked().subarray(offset, offset + length);
  }

  async head(length: number): Promise<Uint8Array> {
    return this.headSync(length);
  }

  async *range(offset: number, length: number, { chunkSize }: { chunkSize: number }): AsyncGenerator<Uint8Array> {
    const all = this.bytesSync(offset, length);
    for (let at = 0; at < length; at += chunkSize) yield all.subarray(at, Math.min(at + chunkSize, length));
  }

  async random(offset: number, length: number): Promise<Uint8Array> {
    return this.bytesSync(offset, length);
  }

  randomIntoSync(offset: number, target: Uint8Array): void {
    target.set(this.bytesSync(offset, target.byteLength));
  }

  async verify(): Promise<void> {
    this.#checked();
  }
}

function crcError(member: ZipMember, actual: number): StConvertError {
  const hex = (n: number) => n.toString(16).padStart(8, "0");
  return new StConvertError(
    "BadCrc",
    `Bad CRC-32 for member ${JSON.stringify(member.name)}: the archive records ${hex(member.crc32)}, its bytes have ${hex(actual)}`,
  );
}

function checkRangeOf(member: ZipMember, offset: number, length: number): void {
  if (offset + length > member.size) {
    throw new StConvertError("UnexpectedEof", `member ${JSON.stringify(member.name)} holds ${member.size} bytes; bytes up to ${offset + length} were expected`);
  }
}

function storedPayload(source: ByteSource, member: ZipMember, codec: Codec): Payload {
  const crcOf = (offset: number, length: number, crc: number): Promise<number> => rangeCrc32(source, member.dataOffset + offset, length, crc, codec);
  return {
    size: member.size,
    head: (length) => source.read(member.dataOffset, Math.min(length, member.size)),
    async *range(offset, length, options) {
      checkRangeOf(member, offset, length);
      let crc = await crcOf(0, offset, 0);
      if (offset === 0 && length === member.size && length >= THREAD_CRC_FROM) {
        // A long member read whole: checked on the CRC thread while the consumer writes each chunk.
        crc = yield* withCrc32(codec, length, (shared) => readRange(source, member.dataOffset, length, { ...options, shared }));
        if (crc !== member.crc32) throw crcError(member, crc);
        return;
      }
      for await (const chunk of readRange(source, member.dataOffset + offset, length, options)) {
        yield chunk;
        // Folded in once the consumer asks for the next chunk: a consumer that starts writing a
        // chunk before asking for the next (pipeTensor) overlaps this CRC with that write. Chunks
        // are read-only to consumers, and valid until the one after next is asked for.
        crc = codec.crc32(chunk, crc);
      }
      crc = await crcOf(offset + length, member.size - offset - length, crc);
      if (crc !== member.crc32) throw crcError(member, crc);
    },
    random: async (offset, length) => {
      checkRangeOf(member, offset, length);
      return source.read(member.dataOffset + offset, length);
    },
    randomIntoSync:
      source.readIntoSync === undefined
        ? undefined
        : (offset, target) => {
            checkRangeOf(member, offset, target.byteLength);
            source.readIntoSync!(member.dataOffset + offset, target);
          },
    async verify() {
      const crc = await crcOf(0, member.size, 0);
      if (crc !== member.crc32) throw crcError(member, crc);
    },
    extent(offset, length) {
      checkRangeOf(member, offset, length);
      // The check reads the member on its own, while the copy runs (as chunks() would check it);
      // a copy that takes the CRC as it goes needs only the member's bytes before the extent (an
      // npy header) when the extent runs to the member's end.
      const toEnd = offset + length === member.size;
      return {
        source,
        offset: member.dataOffset + offset,
        check: () => this.verify(),
        crc32: toEnd
          ? {
              initial: () => crcOf(0, offset, 0),
              async finish(crc) {
                if (crc !== member.crc32) throw crcError(member, crc);
              },
            }
          : undefined,
      };
    },
  };
}

function deflatedPayload(source: ByteSource, member: ZipMember, codec: Codec): Payload {
  const where = `member ${JSON.stringify(member.name)}`;
  /** One pass of inflation, refused the moment it passes the declared size; `check` verifies the end. */
  async function* inflate(inputChunk: number, outputChunk: number, check: boolean): AsyncGenerator<Uint8Array> {
    let produced = 0;
    let crc = 0;
    for await (const chunk of codec.inflateRaw(readRange(source, member.dataOffset, member.compressedSize, { chunkSize: inputChunk }), {
      chunkSize: outputChunk,
    })) {
      produced += chunk.byteLength;
      if (produced > member.size) {
        throw new StConvertError("MemberSizeMismatch", `${where} inflates past the ${member.size} bytes it declares (a possible zip bomb)`);
      }
      if (check) crc = codec.crc32(chunk, crc);
      yield chunk;
    }
    if (!check) return;
    if (produced !== member.size) throw new StConvertError("MemberSizeMismatch", `${where} inflates to ${produced} bytes, not the ${member.size} it declares`);
    if (crc !== member.crc32) throw crcError(member, crc);
  }
  let headCache: Uint8Array = new Uint8Array(0);
  return {
    size: member.size,
    async head(length) {
      const want = Math.min(length, member.size);
      if (headCache.byteLength >= want) return headCache.subarray(0, want);
      const parts: Uint8Array[] = [];
      let have = 0;
      const pass = inflate(HEAD_INFLATE, HEAD_INFLATE, false);
      try {
        for await (const chunk of pass) {
          parts.push(chunk);
          have += chunk.byteLength;
          if (have >= want) break;
        }
      } finally {
        await pass.return(undefined);
      }
      headCache = concat(parts, have);
      return headCache.subarray(0, Math.min(want, have));
    },
    async *range(offset, length, { chunkSize }) {
      checkRangeOf(member, offset, length);
      let position = 0;
      let pending: Uint8Array[] = [];
      let pendingLength = 0;
      const end = offset + length;
      // Inflater buffers stay between 64 KiB and DEFAULT_CHUNK_SIZE whatever the consumer asks; pieces are re-cut below.
      for await (const chunk of inflate(INFLATE_INPUT, Math.min(Math.max(chunkSize, 64 * 1024), DEFAULT_CHUNK_SIZE), true)) {
        const from = Math.max(0, offset - position);
        const to = Math.min(chunk.byteLength, end - position);
        position += chunk.byteLength;
        if (from >= to) continue;
        // Re-cut the inflated pieces into chunks of exactly chunkSize, copying only across piece boundaries.
        let piece = chunk.subarray(from, to);
        while (piece.byteLength > 0) {
          if (pendingLength === 0 && piece.byteLength >= chunkSize) {
            yield piece.subarray(0, chunkSize);
            piece = piece.subarray(chunkSize);
            continue;
          }
          const take = Math.min(chunkSize - pendingLength, piece.byteLength);
          pending.push(piece.subarray(0, take));
          pendingLength += take;
          piece = piece.subarray(take);
          if (pendingLength === chunkSize) {
            yield concat(pending, pendingLength);
            pending = [];
            pendingLength = 0;
          }
        }
      }
      if (pendingLength > 0) yield concat(pending, pendingLength);
    },
    random: undefined,
    async verify() {
      for await (const _ of inflate(INFLATE_INPUT, 1024 * 1024, true));
    },
  };
}

function concat(parts: readonly Uint8Array[], length: number): Uint8Array {
  if (parts.length === 1 && parts[0]!.byteLength === length) return parts[0]!;
  const out = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    out.set(part.subarray(0, length - at), at);
    at += Math.min(part.byteLength, length - at);
  }
  return out;
}

// ----- writer -----

/** A member as the writer records it for the central directory: its name as encoded. */
interface WrittenEntry extends Omit<ZipEntry, "name" | "originalName" | "externalAttributes"> {
  readonly name: Uint8Array;
}

const encoder = new TextEncoder();

/** The writer gathers pieces smaller than {@link WRITE_DIRECT} into writes of up to this many bytes. */
const WRITE_BATCH = 1024 * 1024;
/** The batch buffer's first size; it doubles up to {@link WRITE_BATCH}. */
const FIRST_BATCH = 16 * 1024;
/** Pieces of at least this many bytes (tensor chunks) go to the sink as they are, without a copy. */
const WRITE_DIRECT = 64 * 1024;

/**
 * A member name's bytes and flags, as zipfile encodes it: ASCII as is, anything else UTF-8 with flag 11.
 * @throws StConvertError `InvalidName` for a lone surrogate (no UTF-8 form), a NUL (zipfile cuts
 *   names there, so the archive would name the member otherwise) or a name past 65,535 bytes.
 */
export function encodeName(name: string): { bytes: Uint8Array; flags: number } {
  if (hasLoneSurrogate(name)) {
    throw new StConvertError("InvalidName", `${JSON.stringify(name)} holds a lone UTF-16 surrogate, which UTF-8 cannot encode`);
  }
  if (name.includes("\0")) {
    throw new StConvertError("InvalidName", `${JSON.stringify(name)} holds a NUL character, at which Python's zipfile (and so numpy) cuts a member name`);
  }
  let ascii = true;
  for (let i = 0; i < name.length && ascii; i++) ascii = name.charCodeAt(i) < 0x80;
  let bytes: Uint8Array;
  if (ascii) {
    // The common case, without an encoder call per member.
    bytes = new Uint8Array(name.length);
    for (let i = 0; i < name.length; i++) bytes[i] = name.charCodeAt(i);
  } else bytes = encoder.encode(name);
  if (bytes.byteLength > 0xffff) throw new StConvertError("InvalidName", `a zip member name is at most 65,535 bytes; this one has ${bytes.byteLength}`);
  return { bytes, flags: ascii ? 0 : FLAG_UTF8 };
}

/** Little-endian fields, written without a DataView per header. */
function le16(out: Uint8Array, at: number, value: number): void {
  out[at] = value & 0xff;
  out[at + 1] = (value >>> 8) & 0xff;
}

function le32(out: Uint8Array, at: number, value: number): void {
  out[at] = value & 0xff;
  out[at + 1] = (value >>> 8) & 0xff;
  out[at + 2] = (value >>> 16) & 0xff;
  out[at + 3] = (value >>> 24) & 0xff;
}

function le64(out: Uint8Array, at: number, value: number): void {
  le32(out, at, value % 2 ** 32);
  le32(out, at + 4, Math.floor(value / 2 ** 32));
}

/**
 * Writes a zip archive sequentially to a {@link ByteSink}, byte for byte as CPython's `zipfile`
 * does when numpy writes an `.npz`: time 1980-01-01 00:00, Unix permissions 0600, a ZIP64 extra
 * field in every local header, ZIP64 fields in the central directory and the ZIP64 end records
 * only past zipfile's limits (2^31 − 1 bytes, 65,535 members).
 */
export class ZipWriter {
  readonly #sink: ByteSink;
  readonly #codec: Codec;
  readonly #entries: WrittenEntry[] = [];
  #offset = 0;
  /** Small pieces (headers, small members, directory entries) gathered for one sink write. */
  // Grown as needed up to WRITE_BATCH: a batch of small archives makes a writer each.
  #batch = new Uint8Array(FIRST_BATCH);
  #batched = 0;

  constructor(sink: ByteSink, codec: Codec) {
    this.#sink = sink;
    this.#codec = codec;
  }

  async #put(bytes: Uint8Array): Promise<void> {
    this.#offset += bytes.byteLength;
    if (bytes.byteLength >= WRITE_DIRECT) {
      await this.#flush();
      await this.#sink.write(bytes);
      return;
    }
    if (this.#batched + bytes.byteLength > WRITE_BATCH) await this.#flush();
    if (this.#batched + bytes.byteLength > this.#batch.byteLength) {
      let size = this.#batch.byteLength * 2;
      while (size < this.#batched + bytes.byteLength) size *= 2;
      const grown = new Uint8Array(Math.min(size, WRITE_BATCH));
      grown.set(this.#batch.subarray(0, this.#batched));
      this.#batch = grown;
    }
    this.#batch.set(bytes, this.#batched);
    this.#batched += bytes.byteLength;
  }

  async #flush(): Promise<void> {
    if (this.#batched === 0) return;
    const pending = this.#batch.subarray(0, this.#batched);
    this.#batched = 0;
    // The sink keeps no reference once the write settles, so the batch is reused after it.
    await this.#sink.write(pending);
  }

  #localHeader(name: Uint8Array, flags: number, method: number, crc32: number, size: number, compressedSize: number): Uint8Array {
    const out = new Uint8Array(LOCAL_SIZE + name.byteLength + 20);
    le32(out, 0, SIG_LOCAL);
    le16(out, 4, 45);
    le16(out, 6, flags);
    le16(out, 8, method);
    le16(out, 10, 0);
    le16(out, 12, 0x21);
    le32(out, 14, crc32);
    le32(out, 18, 0xffffffff);
    le32(out, 22, 0xffffffff);
    le16(out, 26, name.byteLength);
    le16(out, 28, 20);
    out.set(name, LOCAL_SIZE);
    const e = LOCAL_SIZE + name.byteLength;
    le16(out, e, 1);
    le16(out, e + 2, 16);
    le64(out, e + 4, size);
    le64(out, e + 12, compressedSize);
    return out;
  }

  /** Whether the sink can change bytes already written, for {@link ZipWriter.addStoredPatched}. */
  get canPatch(): boolean {
    return this.#sink.patch !== undefined;
  }

  /**
   * A stored member of `size` bytes written in one pass, with the same bytes as
   * {@link ZipWriter.addStored}: its local header goes out with a CRC-32 of 0, and the CRC of the
   * bytes as they passed is written into it afterwards (as CPython's zipfile does on a seekable
   * file). Only where the sink can patch ({@link ZipWriter.canPatch}).
   * @throws StConvertError `ByteLengthMismatch` when `data` delivers another byte count than `size`.
   */
  async addStoredPatched(name: string, size: number, data: AsyncIterable<Uint8Array>): Promise<void> {
    const { bytes, flags } = encodeName(name);
    const offset = this.#offset;
    await this.#put(this.#localHeader(bytes, flags, 0, 0, size, size));
    const stream = crc32Stream(this.#codec, size);
    let written = 0;
    for await (const chunk of data) {
      written += chunk.byteLength;
      if (written > size) break;
      // Folded in while the chunk is written (on the CRC thread for a long member).
      const checking = stream.update(chunk);
      checking.catch(() => {});
      await this.#put(chunk);
      await checking;
    }
    const crc32 = await stream.digest();
    if (written !== size) {
      throw new StConvertError("ByteLengthMismatch", `member ${JSON.stringify(name)}: ${size} bytes were declared and its data ran to ${written}`);
    }
    const field = new Uint8Array(4);
    le32(field, 0, crc32);
    await this.#patch(offset + 14, field);
    this.#entries.push({ name: bytes, flags, method: 0, crc32, compressedSize: size, size, headerOffset: offset });
  }

  /**
   * A stored member of `prefix` (a small npy header) then a tensor's bytes, in one pass with the
   * bytes of {@link ZipWriter.addStored}, as {@link ZipWriter.addStoredPatched} writes it, the
   * tensor piped straight to the sink (`pipeTensor`: copied in the kernel where the sink can copy
   * from its extent, the CRC-32 then taken by a read of its own alongside). Only where the sink can patch.
   * @throws StConvertError `ByteLengthMismatch` when the tensor delivers another byte count than it declares.
   */
  async addStoredTensor(name: string, prefix: Uint8Array, tensor: TensorEntry, chunkSize: number): Promise<void> {
    const { bytes, flags } = encodeName(name);
    const offset = this.#offset;
    const size = prefix.byteLength + tensor.byteLength;
    await this.#put(this.#localHeader(bytes, flags, 0, 0, size, size));
    await this.#put(prefix);
    await this.#flush();
    const counted = crcCounted(tensor, this.#codec, this.#codec.crc32(prefix, 0));
    await pipeTensor(counted.entry, this.#sink, chunkSize);
    this.#offset += tensor.byteLength;
    const crc32 = counted.crc();
    const field = new Uint8Array(4);
    le32(field, 0, crc32);
    await this.#patch(offset + 14, field);
    this.#entries.push({ name: bytes, flags, method: 0, crc32, compressedSize: size, size, headerOffset: offset });
  }

  /** Changes bytes put before: in the batch where they still are, else in the sink. */
  async #patch(position: number, bytes: Uint8Array): Promise<void> {
    const batchStart = this.#offset - this.#batched;
    if (position >= batchStart) {
      this.#batch.set(bytes, position - batchStart);
      return;
    }
    if (position + bytes.byteLength > batchStart) await this.#flush();
    await this.#sink.patch!(position, bytes);
  }

  /**
   * A stored member whose CRC-32 and size are known before its bytes (numpy's layout when it
   * writes to a file). The bytes are checked against both as they pass.
   * @throws StConvertError `ByteLengthMismatch` when `data` delivers other bytes than declared.
   */
  async addStored(name: string, size: number, crc32: number, data: AsyncIterable<Uint8Array>): Promise<void> {
    const { bytes, flags } = encodeName(name);
    const offset = this.#offset;
    await this.#put(this.#localHeader(bytes, flags, 0, crc32, size, size));
    let written = 0;
    let crc = 0;
    for await (const chunk of data) {
      written += chunk.byteLength;
      if (written > size) break;
      crc = this.#codec.crc32(chunk, crc);
      await this.#put(chunk);
    }
    if (written !== size || crc !== crc32) {
      throw new StConvertError(
        "ByteLengthMismatch",
        `member ${JSON.stringify(name)}: its bytes changed between the pass that measured them and the pass that wrote them`,
      );
    }
    this.#entries.push({ name: bytes, flags, method: 0, crc32, compressedSize: size, size, headerOffset: offset });
  }

  /**
   * A stored member whose bytes are all in memory (`parts`, concatenated): CRC-32 and size are
   * computed here and put in the local header, as {@link addStored} would. For small members:
   * one pass over the bytes, and no write of its own (pieces are gathered into large writes).
   */
  async addStoredBytes(name: string, parts: readonly Uint8Array[]): Promise<void> {
    const { bytes, flags } = encodeName(name);
    let size = 0;
    let crc = 0;
    for (const part of parts) {
      size += part.byteLength;
      crc = this.#codec.crc32(part, crc);
    }
    const offset = this.#offset;
    await this.#put(this.#localHeader(bytes, flags, 0, crc, size, size));
    for (const part of parts) await this.#put(part);
    this.#entries.push({ name: bytes, flags, method: 0, crc32: crc, compressedSize: size, size, headerOffset: offset });
  }

  /**
   * A member whose CRC-32 and sizes follow its data in a ZIP64 data descriptor (numpy's layout
   * when it writes to a pipe): one pass over the bytes. `level` (0–9) deflates them; undefined stores them.
   */
  async addStreamed(name: string, data: AsyncIterable<Uint8Array>, level?: number): Promise<void> {
    const { bytes, flags: nameFlags } = encodeName(name);
    const flags = nameFlags | FLAG_DESCRIPTOR;
    const method = level === undefined ? 0 : 8;
    const offset = this.#offset;
    await this.#put(this.#localHeader(bytes, flags, method, 0, 0, 0));
    let size = 0;
    let crc = 0;
    const codec = this.#codec;
    async function* measured(): AsyncGenerator<Uint8Array> {
      for await (const chunk of data) {
        size += chunk.byteLength;
        crc = codec.crc32(chunk, crc);
        yield chunk;
      }
    }
    let compressedSize = 0;
    for await (const chunk of level === undefined ? measured() : codec.deflateRaw(measured(), level)) {
      compressedSize += chunk.byteLength;
      await this.#put(chunk);
    }
    const descriptor = new Uint8Array(24);
    const v = view(descriptor);
    v.setUint32(0, SIG_DESCRIPTOR, true);
    v.setUint32(4, crc, true);
    v.setBigUint64(8, BigInt(compressedSize), true);
    v.setBigUint64(16, BigInt(size), true);
    await this.#put(descriptor);
    this.#entries.push({ name: bytes, flags, method, crc32: crc, compressedSize, size, headerOffset: offset });
  }

  /**
   * Writes the central directory and the end records with `comment` (at most 65,535 bytes).
   * The caller then closes the sink.
   * @throws StConvertError `LimitExceeded` for a comment past 65,535 bytes.
   */
  async finish(comment: Uint8Array = new Uint8Array(0)): Promise<void> {
    if (comment.byteLength > MAX_COMMENT) {
      throw new StConvertError("LimitExceeded", `a zip archive comment holds at most ${MAX_COMMENT} bytes; this one needs ${comment.byteLength}`);
    }
    const directoryOffset = this.#offset;
    for (const entry of this.#entries) await this.#put(centralEntry(entry));
    const directorySize = this.#offset - directoryOffset;
    let count = this.#entries.length;
    let size = directorySize;
    let offset = directoryOffset;
    if (count > FILECOUNT_LIMIT || directoryOffset > ZIP64_LIMIT || directorySize > ZIP64_LIMIT) {
      const end64At = this.#offset;
      const records = new Uint8Array(END64_SIZE + LOCATOR64_SIZE);
      const v = view(records);
      v.setUint32(0, SIG_END64, true);
      v.setBigUint64(4, 44n, true);
      v.setUint16(12, 45, true);
      v.setUint16(14, 45, true);
      v.setBigUint64(24, BigInt(count), true);
      v.setBigUint64(32, BigInt(count), true);
      v.setBigUint64(40, BigInt(directorySize), true);
      v.setBigUint64(48, BigInt(directoryOffset), true);
      v.setUint32(56, SIG_LOCATOR64, true);
      v.setBigUint64(64, BigInt(end64At), true);
      v.setUint32(72, 1, true);
      await this.#put(records);
      count = Math.min(count, 0xffff);
      size = Math.min(size, 0xffffffff);
      offset = Math.min(offset, 0xffffffff);
    }
    const end = new Uint8Array(END_SIZE + comment.byteLength);
    const v = view(end);
    v.setUint32(0, SIG_END, true);
    v.setUint16(8, count, true);
    v.setUint16(10, count, true);
    v.setUint32(12, size, true);
    v.setUint32(16, offset, true);
    v.setUint16(20, comment.byteLength, true);
    end.set(comment, END_SIZE);
    await this.#put(end);
    await this.#flush();
  }
}

function centralEntry(entry: WrittenEntry): Uint8Array {
  const zip64: number[] = [];
  let size = entry.size;
  let compressedSize = entry.compressedSize;
  let offset = entry.headerOffset;
  if (size > ZIP64_LIMIT || compressedSize > ZIP64_LIMIT) {
    zip64.push(size, compressedSize);
    size = compressedSize = 0xffffffff;
  }
  if (offset > ZIP64_LIMIT) {
    zip64.push(offset);
    offset = 0xffffffff;
  }
  const extraLength = zip64.length === 0 ? 0 : 4 + 8 * zip64.length;
  const out = new Uint8Array(CENTRAL_SIZE + entry.name.byteLength + extraLength);
  le32(out, 0, SIG_CENTRAL);
  out[4] = 45; // version made by: 4.5 (ZIP64), on
  out[5] = 3; // Unix, as zipfile writes on any system but Windows
  out[6] = 45;
  le16(out, 8, entry.flags);
  le16(out, 10, entry.method);
  le16(out, 12, 0);
  le16(out, 14, 0x21);
  le32(out, 16, entry.crc32);
  le32(out, 20, compressedSize);
  le32(out, 24, size);
  le16(out, 28, entry.name.byteLength);
  le16(out, 30, extraLength);
  le32(out, 38, 0o600 << 16);
  le32(out, 42, offset);
  out.set(entry.name, CENTRAL_SIZE);
  if (zip64.length > 0) {
    const e = CENTRAL_SIZE + entry.name.byteLength;
    le16(out, e, 1);
    le16(out, e + 2, 8 * zip64.length);
    zip64.forEach((value, i) => le64(out, e + 4 + 8 * i, value));
  }
  return out;
}
