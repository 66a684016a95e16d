/**
 * Byte-by-byte builders for hostile checkpoints: pickles opcode by opcode, and torch-style zips
 * from a pickle and storage records (stored members, CRCs computed unless given).
 */
import { deflateRawSync } from "node:zlib";

/** A pickle, assembled opcode by opcode. */
export class Pickle {
  readonly #bytes: number[] = [];

  raw(...bytes: number[]): this {
    this.#bytes.push(...bytes);
    return this;
  }
  u32(n: number): this {
    return this.raw(n & 0xff, (n >>> 8) & 0xff, (n >>> 16) & 0xff, (n >>> 24) & 0xff);
  }
  proto(n = 2): this {
    return this.raw(0x80, n);
  }
  str(s: string): this {
    const utf8 = new TextEncoder().encode(s);
    return this.raw(0x58)
      .u32(utf8.byteLength)
      .raw(...utf8);
  }
  int(n: number): this {
    if (n >= 0 && n < 256) return this.raw(0x4b, n);
    if (n >= 0 && n < 2 ** 31) return this.raw(0x4a).u32(n);
    // LONG1, 8 bytes
    const v = new DataView(new ArrayBuffer(8));
    v.setBigInt64(0, BigInt(n), true);
    return this.raw(0x8a, 8, ...new Uint8Array(v.buffer));
  }
  global(module: string, name: string): this {
    return this.raw(0x63, ...new TextEncoder().encode(`${module}\n${name}\n`));
  }
  mark(): this {
    return this.raw(0x28);
  }
  tuple(): this {
    return this.raw(0x74);
  }
  ints(values: readonly number[]): this {
    this.mark();
    for (const v of values) this.int(v);
    return this.tuple();
  }
  reduce(): this {
    return this.raw(0x52);
  }
  dict(): this {
    return this.raw(0x7d);
  }
  setitem(): this {
    return this.raw(0x73);
  }
  stop(): this {
    return this.raw(0x2e);
  }
  /** `_rebuild_tensor_v2(('storage', torch.<cls>, key, 'cpu', numel), offset, size, stride, False, OrderedDict())`. */
  tensor(t: {
    cls?: string;
    key: string;
    numel: number;
    offset?: number;
    size: readonly number[];
    stride: readonly number[];
    /** A v3 rebuild with this dtype (`torch.<name>`), or None for null. */
    v3?: string | null;
    /** Pushes the optional last argument, tensor metadata. */
    metadata?: (p: Pickle) => Pickle;
  }): this {
    this.global("torch._utils", t.v3 === undefined ? "_rebuild_tensor_v2" : "_rebuild_tensor_v3").mark();
    this.mark().str("storage");
    if (t.v3 === undefined) this.global("torch", t.cls ?? "FloatStorage");
    else this.global("torch.storage", "UntypedStorage");
    this.str(t.key).str("cpu").int(t.numel).tuple().raw(0x51);
    this.int(t.offset ?? 0)
      .ints(t.size)
      .ints(t.stride)
      .raw(0x89)
      .global("collections", "OrderedDict")
      .raw(0x29)
      .reduce();
    if (t.v3 === null) this.raw(0x4e);
    else if (t.v3 !== undefined) this.global("torch", t.v3);
    t.metadata?.(this);
    return this.tuple().reduce();
  }
  bytes(): Uint8Array {
    return Uint8Array.from(this.#bytes);
  }
}

/** `{name: tensor, …}` as torch.save pickles a state dict. */
export function statePickle(tensors: Record<string, Parameters<Pickle["tensor"]>[0]>): Uint8Array {
  const p = new Pickle().proto().dict();
  for (const [name, t] of Object.entries(tensors)) p.str(name).tensor(t).setitem();
  return p.stop().bytes();
}

let table: Uint32Array | undefined;
export function crc32(data: Uint8Array): number {
  if (table === undefined) {
    table = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      let c = n;
      for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
      table[n] = c >>> 0;
    }
  }
  let c = 0xffffffff;
  for (const b of data) c = table[(c ^ b) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

export interface ZipMemberSpec {
  name: string;
  data: Uint8Array;
  /** The CRC the directory records; default the real one. */
  crc?: number;
  /** Header offset the directory records instead of the real one. */
  offset?: number;
  /** General-purpose flags of the directory entry. */
  flags?: number;
  /** The name's raw bytes, instead of `name` encoded as UTF-8. */
  rawName?: Uint8Array;
  /** Deflate the data (method 8). */
  deflate?: boolean;
  /** The uncompressed size the archive records instead of the real one. */
  size?: number;
  /** The compressed size the archive records instead of the real one. */
  compressedSize?: number;
  /** The modification time field (MS-DOS time; default 0). */
  time?: number;
  /** The directory entry's external attributes (0x10: MS-DOS's directory attribute). */
  externalAttributes?: number;
}

/** Container-level changes to {@link zip}'s output. */
export interface ZipOptions {
  /** The entry count the end record declares. */
  count?: number;
  /** The end record's disk number. */
  disk?: number;
  /** Bytes before the archive (offsets then count from the archive's start, as if it were prepended). */
  prefix?: Uint8Array;
}

/** A zip of stored members (no descriptors), the directory trusted by readers. */
export function zip(members: readonly ZipMemberSpec[], options: ZipOptions = {}): Uint8Array {
  const parts: Uint8Array[] = [];
  const central: Uint8Array[] = [];
  let at = 0;
  for (const m of members) {
    const name = m.rawName ?? new TextEncoder().encode(m.name);
    const crc = m.crc ?? crc32(m.data);
    const stored = m.deflate === true ? new Uint8Array(deflateRawSync(m.data)) : m.data;
    const size = m.size ?? m.data.byteLength;
    const method = m.deflate === true ? 8 : 0;
    const local = new Uint8Array(30 + name.byteLength);
    const lv = new DataView(local.buffer);
    lv.setUint32(0, 0x04034b50, true);
    lv.setUint16(4, 20, true);
    lv.setUint16(8, method, true);
    lv.setUint32(14, crc, true);
    lv.setUint16(10, m.time ?? 0, true);
    lv.setUint32(18, m.compressedSize ?? stored.byteLength, true);
    lv.setUint32(22, size, true);
    lv.setUint16(26, name.byteLength, true);
    local.set(name, 30);
    const cd = new Uint8Array(46 + name.byteLength);
    const cv = new DataView(cd.buffer);
    cv.setUint32(0, 0x02014b50, true);
    cv.setUint16(4, 20, true);
    cv.setUint16(6, 20, true);
    cv.setUint16(8, m.flags ?? 0, true);
    cv.setUint16(10, method, true);
    cv.setUint32(16, crc, true);
    cv.setUint16(12, m.time ?? 0, true);
    cv.setUint32(20, m.compressedSize ?? stored.byteLength, true);
    cv.setUint32(24, size, true);
    cv.setUint16(28, name.byteLength, true);
    cv.setUint32(38, m.externalAttributes ?? 0, true);
    cv.setUint32(42, m.offset ?? at, true);
    cd.set(name, 46);
    central.push(cd);
    parts.push(local, stored);
    at += local.byteLength + stored.byteLength;
  }
  const cdSize = central.reduce((n, c) => n + c.byteLength, 0);
  const end = new Uint8Array(22);
  const ev = new DataView(end.buffer);
  ev.setUint32(0, 0x06054b50, true);
  ev.setUint16(4, options.disk ?? 0, true);
  ev.setUint16(8, options.count ?? members.length, true);
  ev.setUint16(10, options.count ?? members.length, true);
  ev.setUint32(12, cdSize, true);
  ev.setUint32(16, at, true);
  return Buffer.concat([options.prefix ?? new Uint8Array(0), ...parts, ...central, end]);
}

/** A torch checkpoint zip: `archive/data.pkl`, `archive/byteorder`, `archive/data/<key>` for each storage. */
export function torchZip(
  pickle: Uint8Array,
  storages: Record<string, Uint8Array> = {},
  options: { crc?: Record<string, number>; byteorder?: string; records?: Record<string, string | undefined>; extra?: readonly ZipMemberSpec[] } = {},
): Uint8Array {
  // `records` replaces (a string) or drops (undefined) the small records; `extra` adds members after them.
  const text = (name: string, fallback: string): ZipMemberSpec[] => {
    if (options.records !== undefined && name in options.records) {
      const value = options.records[name];
      return value === undefined ? [] : [{ name: `archive/${name}`, data: new TextEncoder().encode(value) }];
    }
    return [{ name: `archive/${name}`, data: new TextEncoder().encode(fallback) }];
  };
  const more = Object.entries(options.records ?? {}).filter(([name, v]) => v !== undefined && name !== "byteorder" && name !== "version");
  return zip([
    { name: "archive/data.pkl", data: pickle },
    ...text("byteorder", options.byteorder ?? "little"),
    ...more.map(([name, v]) => ({ name: `archive/${name}`, data: new TextEncoder().encode(v!) })),
    ...Object.entries(storages).map(([key, data]) => ({ name: `archive/data/${key}`, data, crc: options.crc?.[key] })),
    ...text("version", "3\n"),
    ...(options.extra ?? []),
  ]);
}

/**
 * The archive `zip` made, with a ZIP64 end record and locator inserted before its end record:
 * `recordSize` is what the ZIP64 record says of its own size (44 when it has no extensible data),
 * `disks` the locator's total number of disks.
 */
export function withZip64End(archive: Uint8Array, options: { recordSize?: number; disks?: number } = {}): Uint8Array {
  const endAt = archive.byteLength - 22;
  const ev = new DataView(archive.buffer, archive.byteOffset + endAt, 22);
  const count = ev.getUint16(10, true);
  const cdSize = ev.getUint32(12, true);
  const cdOffset = ev.getUint32(16, true);
  const end64 = new DataView(new ArrayBuffer(56));
  end64.setUint32(0, 0x06064b50, true);
  end64.setBigUint64(4, BigInt(options.recordSize ?? 44), true);
  end64.setUint16(12, 45, true);
  end64.setUint16(14, 45, true);
  end64.setBigUint64(24, BigInt(count), true);
  end64.setBigUint64(32, BigInt(count), true);
  end64.setBigUint64(40, BigInt(cdSize), true);
  end64.setBigUint64(48, BigInt(cdOffset), true);
  const locator = new DataView(new ArrayBuffer(20));
  locator.setUint32(0, 0x07064b50, true);
  locator.setBigUint64(8, BigInt(endAt), true);
  locator.setUint32(16, options.disks ?? 1, true);
  return Buffer.concat([archive.subarray(0, endAt), new Uint8Array(end64.buffer), new Uint8Array(locator.buffer), archive.subarray(endAt)]);
}

/** Little-endian float32 bytes. */
export function f32(...values: number[]): Uint8Array {
  return new Uint8Array(new Float32Array(values).buffer);
}
