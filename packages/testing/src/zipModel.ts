/**
 * A zip archive as an editable model, for the differential fuzzer's zip mutators (npz, torch):
 * parsed from a valid archive (central directory, local headers, ZIP64 fields, data descriptors),
 * changed field by field, and written back with every offset recomputed, or patched afterwards at
 * the positions the writer reports to make the records disagree on purpose.
 *
 * This is test code over trusted seeds: it parses what zipfile, numpy and torch write, and
 * returns undefined for anything else.
 */
import { crc32, deflateRawSync, inflateRawSync } from "node:zlib";
import { joinBytes } from "./Random.js";

/** An extra field, kept as it was (ZIP64 fields are modelled apart). */
export interface ZipExtra {
  id: number;
  data: Uint8Array;
}

/** The fields a local header and a central entry share. */
export interface ZipHeaderFields {
  versionNeeded: number;
  flags: number;
  method: number;
  time: number;
  date: number;
  crc: number;
  compressedSize: number;
  size: number;
  name: Uint8Array;
  extras: ZipExtra[];
}

/** One member: its two headers, its stored bytes and what follows them. */
export interface ZipModelEntry {
  local: ZipHeaderFields & {
    /** The local header's sizes live in a ZIP64 extra (0xFFFFFFFF in the fixed fields), as numpy writes them. */
    zip64: boolean;
  };
  central: ZipHeaderFields & {
    versionMadeBy: number;
    comment: Uint8Array;
    disk: number;
    internalAttributes: number;
    externalAttributes: number;
    /** Fields of the central entry that live in its ZIP64 extra. */
    zip64: Set<"size" | "compressedSize" | "offset">;
  };
  /** The member's bytes as stored (compressed when `method` is 8). */
  data: Uint8Array;
  /** A data descriptor after the data (flag bit 3): with its signature, with 8-byte sizes. */
  descriptor?: { signature: boolean; wide: boolean; crc: number; compressedSize: number; size: number };
  /** Bytes between this member and the next record. */
  gap: Uint8Array;
}

/** A whole archive. */
export interface ZipModel {
  /** Bytes before the first member (none in a file numpy or torch wrote). */
  prefix: Uint8Array;
  entries: ZipModelEntry[];
  /** Bytes between the last member and the central directory. */
  beforeDirectory: Uint8Array;
  comment: Uint8Array;
  /** ZIP64 end records are written (torch always writes them; zipfile when it needs them). */
  zip64: boolean;
  /** "Version made by" and "needed" of the ZIP64 end record. */
  zip64Versions: [number, number];
  /** The fixed end record's fields that held 0xFFFF… sentinels in the original. */
  sentinels: { entries: boolean; directorySize: boolean; directoryOffset: boolean };
  /** Bytes after the end record's comment. */
  trailer: Uint8Array;
}

/** Where the writer put each record, for patches that make records disagree. */
export interface ZipLayout {
  bytes: Uint8Array;
  local: number[];
  central: number[];
  /** Start of each member's data. */
  dataStart: number[];
  eocd: number;
  zip64Eocd?: number;
  zip64Locator?: number;
  directoryOffset: number;
}

const LOCAL = 0x04034b50;
const CENTRAL = 0x02014b50;
const EOCD = 0x06054b50;
const ZIP64_EOCD = 0x06064b50;
const ZIP64_LOCATOR = 0x07064b50;
const DESCRIPTOR = 0x08074b50;

function u16(b: Uint8Array, at: number): number {
  return b[at]! | (b[at + 1]! << 8);
}
function u32(b: Uint8Array, at: number): number {
  return (b[at]! | (b[at + 1]! << 8) | (b[at + 2]! << 16) | (b[at + 3]! << 24)) >>> 0;
}
function u64(b: Uint8Array, at: number): number {
  return u32(b, at) + u32(b, at + 4) * 2 ** 32;
}

function parseExtras(b: Uint8Array): ZipExtra[] | undefined {
  const out: ZipExtra[] = [];
  let at = 0;
  while (at + 4 <= b.byteLength) {
    const id = u16(b, at);
    const length = u16(b, at + 2);
    if (at + 4 + length > b.byteLength) return undefined;
    out.push({ id, data: b.slice(at + 4, at + 4 + length) });
    at += 4 + length;
  }
  return at === b.byteLength ? out : undefined;
}

/** The model of a valid archive, or undefined when `bytes` is not one this parser follows. */
export function parseZip(bytes: Uint8Array): ZipModel | undefined {
  let eocd = -1;
  for (let at = bytes.byteLength - 22; at >= Math.max(0, bytes.byteLength - 22 - 65536); at--) {
    if (u32(bytes, at) === EOCD && at + 22 + u16(bytes, at + 20) <= bytes.byteLength) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) return undefined;
  let count = u16(bytes, eocd + 10);
  let directorySize = u32(bytes, eocd + 12);
  let directoryOffset = u32(bytes, eocd + 16);
  const sentinels = { entries: count === 0xffff, directorySize: directorySize === 0xffffffff, directoryOffset: directoryOffset === 0xffffffff };
  const commentLength = u16(bytes, eocd + 20);
  let zip64 = false;
  let zip64Versions: [number, number] = [45, 45];
  if (eocd >= 20 && u32(bytes, eocd - 20) === ZIP64_LOCATOR) {
    const record = u64(bytes, eocd - 12);
    if (record + 56 > bytes.byteLength || u32(bytes, record) !== ZIP64_EOCD) return undefined;
    zip64 = true;
    zip64Versions = [u16(bytes, record + 12), u16(bytes, record + 14)];
    count = u64(bytes, record + 32);
    directorySize = u64(bytes, record + 40);
    directoryOffset = u64(bytes, record + 48);
  }
  const entries: ZipModelEntry[] = [];
  const offsets: number[] = [];
  let at = directoryOffset;
  for (let i = 0; i < count; i++) {
    if (at + 46 > bytes.byteLength || u32(bytes, at) !== CENTRAL) return undefined;
    const nameLength = u16(bytes, at + 28);
    const extraLength = u16(bytes, at + 30);
    const entryCommentLength = u16(bytes, at + 32);
    const name = bytes.slice(at + 46, at + 46 + nameLength);
    const allExtras = parseExtras(bytes.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength));
    if (allExtras === undefined) return undefined;
    let size = u32(bytes, at + 24);
    let compressedSize = u32(bytes, at + 20);
    let offset = u32(bytes, at + 42);
    const zip64Fields = new Set<"size" | "compressedSize" | "offset">();
    const z = allExtras.find((e) => e.id === 1);
    let zat = 0;
    const next = (): number => {
      if (z === undefined || zat + 8 > z.data.byteLength) throw new Error("short ZIP64 extra");
      const v = u64(z.data, zat);
      zat += 8;
      return v;
    };
    try {
      if (size === 0xffffffff) (size = next()), zip64Fields.add("size");
      if (compressedSize === 0xffffffff) (compressedSize = next()), zip64Fields.add("compressedSize");
      if (offset === 0xffffffff) (offset = next()), zip64Fields.add("offset");
    } catch {
      return undefined;
    }
    entries.push({
      central: {
        versionMadeBy: u16(bytes, at + 4),
        versionNeeded: u16(bytes, at + 6),
        flags: u16(bytes, at + 8),
        method: u16(bytes, at + 10),
        time: u16(bytes, at + 12),
        date: u16(bytes, at + 14),
        crc: u32(bytes, at + 16),
        compressedSize,
        size,
        name,
        extras: allExtras.filter((e) => e.id !== 1),
        comment: bytes.slice(at + 46 + nameLength + extraLength, at + 46 + nameLength + extraLength + entryCommentLength),
        disk: u16(bytes, at + 34),
        internalAttributes: u16(bytes, at + 36),
        externalAttributes: u32(bytes, at + 38),
        zip64: zip64Fields,
      },
      // Filled below from the local header.
      local: undefined as unknown as ZipModelEntry["local"],
      data: new Uint8Array(0),
      gap: new Uint8Array(0),
    });
    offsets.push(offset);
    at += 46 + nameLength + extraLength + entryCommentLength;
  }
  const order = entries.map((_, i) => i).sort((a, b) => offsets[a]! - offsets[b]!);
  const ends: number[] = [];
  for (const i of order) {
    const e = entries[i]!;
    const o = offsets[i]!;
    if (o + 30 > bytes.byteLength || u32(bytes, o) !== LOCAL) return undefined;
    const nameLength = u16(bytes, o + 26);
    const extraLength = u16(bytes, o + 28);
    const extras = parseExtras(bytes.subarray(o + 30 + nameLength, o + 30 + nameLength + extraLength));
    if (extras === undefined) return undefined;
    const z = extras.find((x) => x.id === 1);
    let size = u32(bytes, o + 22);
    let compressedSize = u32(bytes, o + 18);
    const zip64Local = z !== undefined && z.data.byteLength >= 16 && (size === 0xffffffff || compressedSize === 0xffffffff);
    if (zip64Local) {
      size = u64(z.data, 0);
      compressedSize = u64(z.data, 8);
    }
    e.local = {
      versionNeeded: u16(bytes, o + 4),
      flags: u16(bytes, o + 6),
      method: u16(bytes, o + 8),
      time: u16(bytes, o + 10),
      date: u16(bytes, o + 12),
      crc: u32(bytes, o + 14),
      compressedSize,
      size,
      name: bytes.slice(o + 30, o + 30 + nameLength),
      extras: zip64Local ? extras.filter((x) => x.id !== 1) : extras,
      zip64: zip64Local,
    };
    const dataStart = o + 30 + nameLength + extraLength;
    const dataEnd = dataStart + e.central.compressedSize;
    if (dataEnd > bytes.byteLength) return undefined;
    e.data = bytes.slice(dataStart, dataEnd);
    let end = dataEnd;
    if ((e.local.flags & 8) !== 0) {
      const signature = end + 4 <= bytes.byteLength && u32(bytes, end) === DESCRIPTOR;
      const base = end + (signature ? 4 : 0);
      const wide = wideDescriptor(bytes, base, e);
      const fieldEnd = base + (wide ? 20 : 12);
      if (fieldEnd > bytes.byteLength) return undefined;
      e.descriptor = {
        signature,
        wide,
        crc: u32(bytes, base),
        compressedSize: wide ? u64(bytes, base + 4) : u32(bytes, base + 4),
        size: wide ? u64(bytes, base + 12) : u32(bytes, base + 8),
      };
      end = fieldEnd;
    }
    ends.push(end);
  }
  // Gaps: from each member's end to the next record.
  const starts = order.map((i) => offsets[i]!);
  for (let k = 0; k < order.length; k++) {
    const next = k + 1 < order.length ? starts[k + 1]! : directoryOffset;
    if (ends[k]! > next) return undefined;
    if (k + 1 < order.length) entries[order[k]!]!.gap = bytes.slice(ends[k]!, next);
  }
  const first = starts.length > 0 ? starts[0]! : directoryOffset;
  const lastEnd = ends.length > 0 ? ends[ends.length - 1]! : first;
  if (lastEnd > directoryOffset || first > bytes.byteLength) return undefined;
  return {
    prefix: bytes.slice(0, first),
    entries: order.map((i) => entries[i]!),
    beforeDirectory: bytes.slice(lastEnd, directoryOffset),
    comment: bytes.slice(eocd + 22, eocd + 22 + commentLength),
    zip64,
    zip64Versions,
    sentinels,
    trailer: bytes.slice(eocd + 22 + commentLength),
  };
}

/** Whether the descriptor at `base` has 8-byte sizes: the one of the two readings that matches the central directory. */
function wideDescriptor(bytes: Uint8Array, base: number, e: ZipModelEntry): boolean {
  if (base + 20 <= bytes.byteLength && u64(bytes, base + 4) === e.central.compressedSize && u64(bytes, base + 12) === e.central.size) return true;
  return false;
}

class Writer {
  #parts: Uint8Array[] = [];
  length = 0;
  bytes(b: Uint8Array): void {
    this.#parts.push(b);
    this.length += b.byteLength;
  }
  u16(v: number): void {
    this.bytes(Uint8Array.of(v & 0xff, (v >>> 8) & 0xff));
  }
  u32(v: number): void {
    const b = new Uint8Array(4);
    new DataView(b.buffer).setUint32(0, v >>> 0, true);
    this.bytes(b);
  }
  u64(v: number): void {
    const b = new Uint8Array(8);
    new DataView(b.buffer).setBigUint64(0, BigInt(Math.max(0, Math.floor(v))) & 0xffffffffffffffffn, true);
    this.bytes(b);
  }
  done(): Uint8Array {
    return joinBytes(...this.#parts);
  }
}

function extraBytes(extras: readonly ZipExtra[]): Uint8Array {
  const w = new Writer();
  for (const e of extras) {
    w.u16(e.id);
    w.u16(e.data.byteLength);
    w.bytes(e.data);
  }
  return w.done();
}

function zip64Extra(values: readonly number[]): ZipExtra {
  const w = new Writer();
  for (const v of values) w.u64(v);
  return { id: 1, data: w.done() };
}

const clamp32 = (v: number): number => Math.min(v, 0xffffffff);

/** Writes the model, every offset and count computed from it. */
export function writeZip(model: ZipModel): ZipLayout {
  const w = new Writer();
  w.bytes(model.prefix);
  const local: number[] = [];
  const dataStart: number[] = [];
  for (const e of model.entries) {
    local.push(w.length);
    const l = e.local;
    const extras = l.zip64 ? [zip64Extra([l.size, l.compressedSize]), ...l.extras] : l.extras;
    const extra = extraBytes(extras);
    w.u32(LOCAL);
    w.u16(l.versionNeeded);
    w.u16(l.flags);
    w.u16(l.method);
    w.u16(l.time);
    w.u16(l.date);
    w.u32(l.crc);
    w.u32(l.zip64 ? 0xffffffff : clamp32(l.compressedSize));
    w.u32(l.zip64 ? 0xffffffff : clamp32(l.size));
    w.u16(l.name.byteLength);
    w.u16(extra.byteLength);
    w.bytes(l.name);
    w.bytes(extra);
    dataStart.push(w.length);
    w.bytes(e.data);
    if (e.descriptor !== undefined) {
      const d = e.descriptor;
      if (d.signature) w.u32(DESCRIPTOR);
      w.u32(d.crc);
      if (d.wide) {
        w.u64(d.compressedSize);
        w.u64(d.size);
      } else {
        w.u32(d.compressedSize);
        w.u32(d.size);
      }
    }
    w.bytes(e.gap);
  }
  w.bytes(model.beforeDirectory);
  const directoryOffset = w.length;
  const central: number[] = [];
  model.entries.forEach((e, i) => {
    central.push(w.length);
    const c = e.central;
    const offset = local[i]!;
    const inExtra: number[] = [];
    const field = (name: "size" | "compressedSize" | "offset", value: number): number => {
      if (c.zip64.has(name) || value >= 0xffffffff) {
        inExtra.push(value);
        return 0xffffffff;
      }
      return value;
    };
    const size = field("size", c.size);
    const compressedSize = field("compressedSize", c.compressedSize);
    const off = field("offset", offset);
    const extras = inExtra.length > 0 ? [zip64Extra(inExtra), ...c.extras] : c.extras;
    const extra = extraBytes(extras);
    w.u32(CENTRAL);
    w.u16(c.versionMadeBy);
    w.u16(c.versionNeeded);
    w.u16(c.flags);
    w.u16(c.method);
    w.u16(c.time);
    w.u16(c.date);
    w.u32(c.crc);
    w.u32(compressedSize);
    w.u32(size);
    w.u16(c.name.byteLength);
    w.u16(extra.byteLength);
    w.u16(c.comment.byteLength);
    w.u16(c.disk);
    w.u16(c.internalAttributes);
    w.u32(c.externalAttributes);
    w.u32(off);
    w.bytes(c.name);
    w.bytes(extra);
    w.bytes(c.comment);
  });
  const directorySize = w.length - directoryOffset;
  let zip64Eocd: number | undefined;
  let zip64Locator: number | undefined;
  if (model.zip64) {
    zip64Eocd = w.length;
    w.u32(ZIP64_EOCD);
    w.u64(44);
    w.u16(model.zip64Versions[0]);
    w.u16(model.zip64Versions[1]);
    w.u32(0);
    w.u32(0);
    w.u64(model.entries.length);
    w.u64(model.entries.length);
    w.u64(directorySize);
    w.u64(directoryOffset);
    zip64Locator = w.length;
    w.u32(ZIP64_LOCATOR);
    w.u32(0);
    w.u64(zip64Eocd);
    w.u32(1);
  }
  const eocd = w.length;
  const s = model.sentinels;
  w.u32(EOCD);
  w.u16(0);
  w.u16(0);
  w.u16(s.entries ? 0xffff : Math.min(model.entries.length, 0xffff));
  w.u16(s.entries ? 0xffff : Math.min(model.entries.length, 0xffff));
  w.u32(s.directorySize ? 0xffffffff : clamp32(directorySize));
  w.u32(s.directoryOffset ? 0xffffffff : clamp32(directoryOffset));
  w.u16(model.comment.byteLength & 0xffff);
  w.bytes(model.comment);
  w.bytes(model.trailer);
  return { bytes: w.done(), local, central, dataStart, eocd, zip64Eocd, zip64Locator, directoryOffset };
}

/** A member's bytes, inflated when deflated; undefined if they do not inflate. */
export function memberContent(entry: ZipModelEntry): Uint8Array | undefined {
  if (entry.central.method === 0) return entry.data;
  if (entry.central.method !== 8) return undefined;
  try {
    return new Uint8Array(inflateRawSync(entry.data));
  } catch {
    return undefined;
  }
}

/** Replaces a member's content, compressed as it was, with CRC and sizes updated in every record that holds them. */
export function setMemberContent(entry: ZipModelEntry, content: Uint8Array): void {
  const data = entry.central.method === 8 ? new Uint8Array(deflateRawSync(content)) : content;
  const crc = crc32(content) >>> 0;
  entry.data = data;
  for (const h of [entry.central, entry.local]) {
    if (h === entry.local && entry.descriptor !== undefined && h.crc === 0 && h.size === 0) continue; // sizes in the descriptor
    h.crc = crc;
    h.compressedSize = data.byteLength;
    h.size = content.byteLength;
  }
  if (entry.descriptor !== undefined) {
    entry.descriptor.crc = crc;
    entry.descriptor.compressedSize = data.byteLength;
    entry.descriptor.size = content.byteLength;
  }
}

/** A deep copy of a model, so that mutators can edit freely. */
export function cloneZip(model: ZipModel): ZipModel {
  return {
    ...model,
    sentinels: { ...model.sentinels },
    zip64Versions: [...model.zip64Versions],
    entries: model.entries.map((e) => ({
      local: { ...e.local, extras: e.local.extras.map((x) => ({ ...x })) },
      central: { ...e.central, extras: e.central.extras.map((x) => ({ ...x })), zip64: new Set(e.central.zip64) },
      data: e.data,
      descriptor: e.descriptor === undefined ? undefined : { ...e.descriptor },
      gap: e.gap,
    })),
  };
}

/** CRC-32 of bytes. */
export function crcOf(bytes: Uint8Array): number {
  return crc32(bytes) >>> 0;
}

/** A central directory entry as the end records and the directory state it, nothing else believed. */
export interface ZipDirectoryEntry {
  name: Uint8Array;
  flags: number;
  method: number;
  crc: number;
  compressedSize: number;
  size: number;
  offset: number;
}

/**
 * The central directory of a possibly broken archive (the last end record, ZIP64 fields read),
 * for predicates that judge what a mutant's records claim; undefined when there is none to read.
 */
export function readDirectory(bytes: Uint8Array): { entries: ZipDirectoryEntry[]; directoryOffset: number; endRecords: number } | undefined {
  let endRecords = 0;
  for (let at = 0; at + 4 <= bytes.byteLength; at++) if (u32(bytes, at) === EOCD) endRecords++;
  let eocd = -1;
  for (let at = bytes.byteLength - 22; at >= Math.max(0, bytes.byteLength - 22 - 65536); at--) {
    if (u32(bytes, at) === EOCD) {
      eocd = at;
      break;
    }
  }
  if (eocd < 0) return undefined;
  let directorySize = u32(bytes, eocd + 12);
  let directoryOffset = u32(bytes, eocd + 16);
  let end = eocd;
  if (eocd >= 20 && u32(bytes, eocd - 20) === ZIP64_LOCATOR) {
    const record = u64(bytes, eocd - 12);
    if (record + 56 <= bytes.byteLength && u32(bytes, record) === ZIP64_EOCD) {
      directorySize = u64(bytes, record + 40);
      directoryOffset = u64(bytes, record + 48);
      end = record;
    }
  }
  // Offsets are relative to where the archive starts, as zipfile reads them: bytes before it
  // (another archive, a prefix) shift every record by the same amount.
  const concat = Math.max(0, end - directorySize - directoryOffset);
  directoryOffset += concat;
  const entries: ZipDirectoryEntry[] = [];
  let at = directoryOffset;
  // Entries are read up to the directory's declared size, as zipfile reads them (it ignores the counts).
  const directoryEnd = directoryOffset + directorySize;
  while (at + 46 <= Math.min(bytes.byteLength, directoryEnd) && u32(bytes, at) === CENTRAL) {
    const nameLength = u16(bytes, at + 28);
    const extraLength = u16(bytes, at + 30);
    const extras = parseExtras(bytes.subarray(at + 46 + nameLength, at + 46 + nameLength + extraLength)) ?? [];
    const z = extras.find((e) => e.id === 1);
    let zat = 0;
    const wide = (v: number): number => {
      if (v !== 0xffffffff || z === undefined || zat + 8 > z.data.byteLength) return v;
      const out = u64(z.data, zat);
      zat += 8;
      return out;
    };
    const size = wide(u32(bytes, at + 24));
    const compressedSize = wide(u32(bytes, at + 20));
    const offset = wide(u32(bytes, at + 42)) + concat;
    entries.push({
      name: bytes.slice(at + 46, at + 46 + nameLength),
      flags: u16(bytes, at + 8),
      method: u16(bytes, at + 10),
      crc: u32(bytes, at + 16),
      compressedSize,
      size,
      offset,
    });
    at += 46 + nameLength + extraLength + u16(bytes, at + 32);
  }
  return { entries, directoryOffset, endRecords };
}

/**
 * True when some member's records misstate it: sizes that run into the next record, a stored
 * member whose two sizes differ, a size DEFLATE cannot produce from the compressed one, bytes
 * whose CRC-32 or length is not the recorded one, a local header that disagrees with the directory.
 */
export function zipRecordsLie(bytes: Uint8Array, options: { zeroCrcUnchecked?: boolean } = {}): boolean {
  // A CRC of 0 is torch's "not computed"; zipfile (npz) checks it like any other.
  const unchecked = options.zeroCrcUnchecked === true;
  const directory = readDirectory(bytes);
  if (directory === undefined) return false;
  const starts = directory.entries.map((e) => e.offset).sort((a, b) => a - b);
  return directory.entries.some((e) => {
    if (e.offset + 30 > bytes.byteLength || u32(bytes, e.offset) !== LOCAL) return false;
    const dataStart = e.offset + 30 + u16(bytes, e.offset + 26) + u16(bytes, e.offset + 28);
    const next = starts.find((s) => s > e.offset) ?? directory.directoryOffset;
    if (dataStart + e.compressedSize > next) return true;
    if (e.method === 0 && e.size !== e.compressedSize) return true;
    if (e.method === 8 && e.size > 1032 * e.compressedSize + 1032) return true;
    const data = bytes.subarray(dataStart, dataStart + e.compressedSize);
    let content: Uint8Array | undefined = data;
    if (e.method === 8) {
      try {
        content = new Uint8Array(inflateRawSync(data));
      } catch {
        content = undefined;
      }
    }
    // A DEFLATE stream that does not inflate whole (cut short, no final block) misstates its member too.
    if (content === undefined) return true;
    if (content.byteLength !== e.size || ((e.crc !== 0 || !unchecked) && crcOf(content) !== e.crc)) return true;
    const flags = u16(bytes, e.offset + 6);
    const localCrc = u32(bytes, e.offset + 14);
    const localCompressed = u32(bytes, e.offset + 18);
    const localSize = u32(bytes, e.offset + 22);
    if ((flags & 8) !== 0 && localCrc === 0 && localSize === 0) return false;
    const sentinel = localCompressed === 0xffffffff || localSize === 0xffffffff;
    return localCrc !== e.crc || (!sentinel && (localCompressed !== e.compressedSize || localSize !== e.size));
  });
}
