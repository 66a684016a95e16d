/**
 * Byte-by-byte builders for hostile npy files and zip archives: every field can be made to lie.
 */
import { crc32 as zlibCrc32, deflateRawSync } from "node:zlib";

const latin1 = (text: string) => Uint8Array.from(text, (c) => c.charCodeAt(0));

/** An npy file with exactly this header text (no padding added) and data. */
export function npyFile(header: string, data: Uint8Array | number = 0, version: readonly [number, number] = [1, 0]): Uint8Array {
  const text = version[0] === 3 ? new TextEncoder().encode(header) : latin1(header);
  const lengthSize = version[0] === 1 ? 2 : 4;
  const body = typeof data === "number" ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + lengthSize + text.byteLength + body.byteLength);
  out.set([0x93, 0x4e, 0x55, 0x4d, 0x50, 0x59, version[0], version[1]]);
  const v = new DataView(out.buffer);
  if (lengthSize === 2) v.setUint16(8, text.byteLength, true);
  else v.setUint32(8, text.byteLength, true);
  out.set(text, 8 + lengthSize);
  out.set(body, 8 + lengthSize + text.byteLength);
  return out;
}

/** A small valid npy: float32 [2, 3], values 0..5. */
export function smallNpy(): Uint8Array {
  return npyFile("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }", new Uint8Array(new Float32Array([0, 1, 2, 3, 4, 5]).buffer));
}

/** One member of a hand-built archive; every declared field defaults to the truth. */
export interface RawMember {
  name: string;
  /** The member's uncompressed bytes. */
  content: Uint8Array;
  method?: 0 | 8 | number;
  /** What the central directory declares. */
  crc?: number;
  size?: number;
  compressedSize?: number;
  flags?: number;
  /** The name the local header gives (default: `name`). */
  localName?: string;
  /** The offset the central directory gives (default: where the local header is). */
  headerOffset?: number;
  /** Raw extra field of the central-directory entry (default: a ZIP64 field when a value needs one). */
  extra?: Uint8Array;
}

/** A zip archive laid out by hand: local headers, data, central directory, end record. */
export function zipOf(members: readonly RawMember[], options: { comment?: Uint8Array; truncateTo?: number } = {}): Uint8Array {
  const parts: Uint8Array[] = [];
  const central: Uint8Array[] = [];
  let offset = 0;
  for (const m of members) {
    const method = m.method ?? 0;
    const data = method === 8 ? deflateRawSync(m.content) : m.content;
    const name = new TextEncoder().encode(m.name);
    const localName = new TextEncoder().encode(m.localName ?? m.name);
    const flags = m.flags ?? (/^[\x00-\x7f]*$/.test(m.name) ? 0 : 0x800);
    const local = new Uint8Array(30 + localName.byteLength);
    const lv = new DataView(local.buffer);
    lv.setUint32(0, 0x04034b50, true);
    lv.setUint16(4, 20, true);
    lv.setUint16(6, flags, true);
    lv.setUint16(8, method, true);
    lv.setUint32(14, zlibCrc32(m.content), true);
    lv.setUint32(18, data.byteLength, true);
    lv.setUint32(22, m.content.byteLength, true);
    lv.setUint16(26, localName.byteLength, true);
    local.set(localName, 30);
    const size = m.size ?? m.content.byteLength;
    const compressedSize = m.compressedSize ?? data.byteLength;
    const headerOffset = m.headerOffset ?? offset;
    const zip64: number[] = [];
    if (size > 0xfffffffe) zip64.push(size);
    if (compressedSize > 0xfffffffe) zip64.push(compressedSize);
    if (headerOffset > 0xfffffffe) zip64.push(headerOffset);
    let extra = m.extra ?? new Uint8Array(0);
    if (m.extra === undefined && zip64.length > 0) {
      extra = new Uint8Array(4 + 8 * zip64.length);
      const ev = new DataView(extra.buffer);
      ev.setUint16(0, 1, true);
      ev.setUint16(2, 8 * zip64.length, true);
      zip64.forEach((value, i) => ev.setBigUint64(4 + 8 * i, BigInt(value), true));
    }
    const entry = new Uint8Array(46 + name.byteLength + extra.byteLength);
    const cv = new DataView(entry.buffer);
    cv.setUint32(0, 0x02014b50, true);
    cv.setUint16(4, 20, true);
    cv.setUint16(6, 20, true);
    cv.setUint16(8, flags, true);
    cv.setUint16(10, method, true);
    cv.setUint32(16, m.crc ?? zlibCrc32(m.content), true);
    cv.setUint32(20, compressedSize > 0xfffffffe ? 0xffffffff : compressedSize, true);
    cv.setUint32(24, size > 0xfffffffe ? 0xffffffff : size, true);
    cv.setUint16(28, name.byteLength, true);
    cv.setUint16(30, extra.byteLength, true);
    cv.setUint32(42, headerOffset > 0xfffffffe ? 0xffffffff : headerOffset, true);
    entry.set(name, 46);
    entry.set(extra, 46 + name.byteLength);
    central.push(entry);
    parts.push(local, data);
    offset += local.byteLength + data.byteLength;
  }
  const directorySize = central.reduce((n, c) => n + c.byteLength, 0);
  const comment = options.comment ?? new Uint8Array(0);
  const end = new Uint8Array(22 + comment.byteLength);
  const ev = new DataView(end.buffer);
  ev.setUint32(0, 0x06054b50, true);
  ev.setUint16(8, members.length, true);
  ev.setUint16(10, members.length, true);
  ev.setUint32(12, directorySize, true);
  ev.setUint32(16, offset, true);
  ev.setUint16(20, comment.byteLength, true);
  end.set(comment, 22);
  const all = Buffer.concat([...parts, ...central, end]);
  return new Uint8Array(options.truncateTo === undefined ? all : all.subarray(0, options.truncateTo));
}
