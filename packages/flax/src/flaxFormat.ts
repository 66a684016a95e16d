/**
 * The flax msgpack format as registered with the `st-convert` command: its options, how it is
 * recognised, and the reader and writer behind it (loaded on first use). Also the package's
 * `./format` entry point.
 */
import { type TensorFormat, fileStem, lazyModule, stringOption } from "@st-convert/core";

/** Loaded on first use, then kept. */
const readerModule = lazyModule(() => import("./readFlax.js"));
const writerModule = lazyModule(() => import("./writeFlax.js"));

/** How many bytes a msgpack token at `at` takes, whether it opens a container, or why it cannot be read. */
type Token = { size: number; open?: { map: boolean; count: number }; str?: number } | "invalid" | "partial";

/** Total size of the headers whose size is fixed (float, int, fixext). */
const FIXED_SIZE: Readonly<Record<number, number>> = {
  0xca: 5,
  0xcb: 9,
  0xcc: 2,
  0xcd: 3,
  0xce: 5,
  0xcf: 9,
  0xd0: 2,
  0xd1: 3,
  0xd2: 5,
  0xd3: 9,
  0xd4: 3,
  0xd5: 4,
  0xd6: 6,
  0xd7: 10,
  0xd8: 18,
};
/** str/bin/ext headers: [width of the length field, bytes between it and the payload (the ext type)]. */
const SIZED: Readonly<Record<number, readonly [1 | 2 | 4, number]>> = {
  0xc4: [1, 0],
  0xc5: [2, 0],
  0xc6: [4, 0],
  0xc7: [1, 1],
  0xc8: [2, 1],
  0xc9: [4, 1],
  0xd9: [1, 0],
  0xda: [2, 0],
  0xdb: [4, 0],
};
/** array16/32 and map16/32 headers: [width of the count, is a map]. */
const CONTAINERS: Readonly<Record<number, readonly [2 | 4, boolean]>> = { 0xdc: [2, false], 0xdd: [4, false], 0xde: [2, true], 0xdf: [4, true] };

function token(head: Uint8Array, at: number): Token {
  const byte = head[at]!;
  if (byte <= 0x7f || byte >= 0xe0 || byte === 0xc0 || byte === 0xc2 || byte === 0xc3) return { size: 1 };
  if (byte <= 0x8f) return { size: 1, open: { map: true, count: byte & 0x0f } };
  if (byte <= 0x9f) return { size: 1, open: { map: false, count: byte & 0x0f } };
  if (byte <= 0xbf) return { size: 1 + (byte & 0x1f), str: 1 };
  const fixed = FIXED_SIZE[byte];
  if (fixed !== undefined) return { size: fixed };
  const field = SIZED[byte]?.[0] ?? CONTAINERS[byte]?.[0];
  if (field === undefined) return "invalid"; // 0xc1, the one reserved byte
  if (at + 1 + field > head.byteLength) return "partial";
  const view = new DataView(head.buffer, head.byteOffset + at + 1, field);
  const n = field === 1 ? view.getUint8(0) : field === 2 ? view.getUint16(0) : view.getUint32(0);
  const container = CONTAINERS[byte];
  if (container !== undefined) return { size: 1 + field, open: { map: container[1], count: n } };
  const header = 1 + field + SIZED[byte]![1];
  return byte >= 0xd9 ? { size: header + n, str: header } : { size: header + n };
}

/**
 * True when `head` (the first bytes of a file) starts like a flax checkpoint: a non-empty msgpack
 * map whose keys, as far as `head` reaches, are strings of printable UTF-8, with at least one whole
 * key, and nothing after the map ends. Real checkpoints pass; npy (`0x93`), zip (`PK`) and JSON
 * (`{`) never start with a map byte, and a safetensors length prefix fails within its zero bytes
 * (a key is never a control character, and a zero byte where a key belongs is an int).
 */
export function sniffFlax(head: Uint8Array): boolean {
  const first = head[0];
  if (first === undefined || !((first >= 0x81 && first <= 0x8f) || first === 0xde || first === 0xdf)) return false;
  const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });
  // Open containers: entries left, and for maps whether a key comes next.
  const stack: { left: number; map: boolean; key: boolean }[] = [];
  let keys = 0;
  for (let at = 0; at < head.byteLength; ) {
    const top = stack[stack.length - 1];
    if (top === undefined && at > 0) return false;
    const t = token(head, at);
    if (t === "invalid") return false;
    if (t === "partial") break;
    if (top?.map === true && top.key) {
      if (t.str === undefined) return false;
      const key = head.subarray(at + t.str, Math.min(at + t.size, head.byteLength));
      if (key.some((byte) => byte < 0x20 || byte === 0x7f)) return false;
      try {
        // A whole key is decoded on its own; only a key cut by the end of `head` may end inside a
        // character (stream mode). Streaming every key would let one key's bytes finish another's.
        decoder.decode(key, { stream: at + t.size > head.byteLength });
      } catch {
        return false;
      }
      if (at + t.size > head.byteLength) break;
      keys++;
      top.key = false;
    } else if (top !== undefined) {
      top.left--;
      if (top.map) top.key = true;
      if (top.left === 0) stack.pop();
    }
    if (t.open !== undefined && t.open.count > 0) stack.push({ left: t.open.count, map: t.open.map, key: t.open.map });
    at += t.size;
  }
  return keys > 0;
}

/**
 * The flax msgpack format (`flax.serialization.to_bytes` / `msgpack_serialize`), as registered with
 * the `st-convert` command. Options: `sep` (the name separator, default `.`) and `keep-scalars`
 * (also list Python number and bool leaves as 0-d tensors; the `flax.tree` metadata keeps them
 * either way, and the writer turns such tensors back into numbers).
 */
export const flaxFormat: TensorFormat = {
  name: "flax",
  description: "Flax msgpack checkpoints (flax.serialization to_bytes / msgpack_serialize)",
  extensions: [".msgpack"],
  options: [
    {
      name: "sep",
      type: "string",
      // Spelled out: the command passes `multiple` to node:util parseArgs, which wants a boolean.
      multiple: false,
      valueName: "SEP",
      description: "flax: separator between the nested keys of a tensor name (default .)",
      appliesTo: "both",
    },
    {
      name: "keep-scalars",
      type: "boolean",
      multiple: false,
      description: "flax: also list Python int/float/bool leaves as 0-d I64/F64/BOOL tensors (the flax.tree metadata keeps them either way)",
      appliesTo: "read",
    },
  ],
  sniff: sniffFlax,
  // The reader and writer load on first use: a command that touches no flax file does not pay for them.
  async open(source, context) {
    const { readFlax } = await readerModule();
    return readFlax(source, {
      sep: stringOption(context.options, "sep"),
      keepScalars: context.options["keep-scalars"] === true,
      onWarning: context.onWarning,
      rootName: fileStem(context.fileName),
      include: context.include,
    });
  },
  async write(tensors, sink, context) {
    const { writeFlax } = await writerModule();
    await writeFlax(tensors, sink, { sep: stringOption(context.options, "sep"), onWarning: context.onWarning });
  },
};
