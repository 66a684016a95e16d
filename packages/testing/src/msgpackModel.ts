/**
 * msgpack as an editable model, for the differential fuzzer's flax mutators: every value keeps
 * the header byte it was written with (fixstr or str8, uint8 or uint64), maps keep their entries
 * in order with duplicates, and extension payloads stay bytes (an ndarray's payload is itself
 * msgpack, decoded again when a mutator wants it). The writer records where each length field
 * went, for mutators that make a length lie.
 */
import { joinBytes } from "./Random.js";

export type MsgNode =
  | { t: "nil" }
  | { t: "bool"; v: boolean }
  | { t: "int"; v: bigint; form?: number }
  | { t: "float"; v: number; bits: 32 | 64 }
  | { t: "str"; v: Uint8Array; form?: number }
  | { t: "bin"; v: Uint8Array; form?: number }
  | { t: "array"; items: MsgNode[]; form?: number }
  | { t: "map"; entries: [MsgNode, MsgNode][]; form?: number }
  | { t: "ext"; type: number; data: Uint8Array; form?: number }
  /** Bytes written as they are (a reserved byte, a deliberately broken value). */
  | { t: "raw"; bytes: Uint8Array };

/** A length field the writer emitted: `size` bytes, big-endian, at `at`. */
export interface LengthField {
  at: number;
  size: 0 | 1 | 2 | 4;
  /** For fix forms (size 0): the header byte at `at` and how many low bits hold the length. */
  bits?: number;
  kind: "str" | "bin" | "array" | "map" | "ext";
}

/** The first value of `bytes` and where it ends, or undefined when `bytes` does not start with valid msgpack. */
export function decodeMsgpack(bytes: Uint8Array, start = 0): { node: MsgNode; end: number } | undefined {
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const stack: { node: MsgNode & { t: "array" | "map" }; left: number; key?: MsgNode }[] = [];
  let at = start;
  let root: MsgNode | undefined;
  const need = (n: number): boolean => at + n <= bytes.byteLength;
  while (true) {
    if (!need(1)) return undefined;
    const b = bytes[at++]!;
    let node: MsgNode;
    const sized = (size: number): number | undefined => {
      if (!need(size)) return undefined;
      const v = size === 1 ? view.getUint8(at) : size === 2 ? view.getUint16(at) : view.getUint32(at);
      at += size;
      return v;
    };
    const take = (n: number | undefined): Uint8Array | undefined => {
      if (n === undefined || !need(n)) return undefined;
      const out = bytes.slice(at, at + n);
      at += n;
      return out;
    };
    let container: (MsgNode & { t: "array" | "map" }) | undefined;
    let count = 0;
    if (b <= 0x7f) node = { t: "int", v: BigInt(b), form: b };
    else if (b >= 0xe0) node = { t: "int", v: BigInt(b - 256), form: b };
    else if (b >= 0xa0 && b <= 0xbf) {
      const v = take(b & 0x1f);
      if (v === undefined) return undefined;
      node = { t: "str", v, form: 0xa0 };
    } else if (b >= 0x90 && b <= 0x9f) {
      container = { t: "array", items: [], form: 0x90 };
      count = b & 0x0f;
    } else if (b >= 0x80 && b <= 0x8f) {
      container = { t: "map", entries: [], form: 0x80 };
      count = b & 0x0f;
    } else {
      switch (b) {
        case 0xc0:
          node = { t: "nil" };
          break;
        case 0xc2:
        case 0xc3:
          node = { t: "bool", v: b === 0xc3 };
          break;
        case 0xc4:
        case 0xc5:
        case 0xc6: {
          const v = take(sized(1 << (b - 0xc4)));
          if (v === undefined) return undefined;
          node = { t: "bin", v, form: b };
          break;
        }
        case 0xc7:
        case 0xc8:
        case 0xc9: {
          const n = sized(1 << (b - 0xc7));
          if (n === undefined || !need(1)) return undefined;
          const type = view.getInt8(at++);
          const data = take(n);
          if (data === undefined) return undefined;
          node = { t: "ext", type, data, form: b };
          break;
        }
        case 0xca:
        case 0xcb: {
          if (!need(b === 0xca ? 4 : 8)) return undefined;
          node = b === 0xca ? { t: "float", v: view.getFloat32(at), bits: 32 } : { t: "float", v: view.getFloat64(at), bits: 64 };
          at += b === 0xca ? 4 : 8;
          break;
        }
        case 0xcc:
        case 0xcd:
        case 0xce:
        case 0xcf:
        case 0xd0:
        case 0xd1:
        case 0xd2:
        case 0xd3: {
          const size = 1 << ((b - 0xcc) & 3);
          if (!need(size)) return undefined;
          const signed = b >= 0xd0;
          let v: bigint;
          if (size === 8) v = signed ? view.getBigInt64(at) : view.getBigUint64(at);
          else if (size === 4) v = BigInt(signed ? view.getInt32(at) : view.getUint32(at));
          else if (size === 2) v = BigInt(signed ? view.getInt16(at) : view.getUint16(at));
          else v = BigInt(signed ? view.getInt8(at) : view.getUint8(at));
          at += size;
          node = { t: "int", v, form: b };
          break;
        }
        case 0xd4:
        case 0xd5:
        case 0xd6:
        case 0xd7:
        case 0xd8: {
          if (!need(1)) return undefined;
          const type = view.getInt8(at++);
          const data = take(1 << (b - 0xd4));
          if (data === undefined) return undefined;
          node = { t: "ext", type, data, form: b };
          break;
        }
        case 0xd9:
        case 0xda:
        case 0xdb: {
          const v = take(sized(1 << (b - 0xd9)));
          if (v === undefined) return undefined;
          node = { t: "str", v, form: b };
          break;
        }
        case 0xdc:
        case 0xdd: {
          const n = sized(b === 0xdc ? 2 : 4);
          if (n === undefined) return undefined;
          container = { t: "array", items: [], form: b };
          count = n;
          break;
        }
        case 0xde:
        case 0xdf: {
          const n = sized(b === 0xde ? 2 : 4);
          if (n === undefined) return undefined;
          container = { t: "map", entries: [], form: b };
          count = n;
          break;
        }
        default:
          return undefined; // 0xc1
      }
    }
    if (container !== undefined) {
      if (count > bytes.byteLength) return undefined;
      if (count > 0) {
        attach(container);
        stack.push({ node: container, left: container.t === "map" ? count * 2 : count });
        continue;
      }
      node = container;
    }
    attach(node!);
    while (stack.length > 0 && stack[stack.length - 1]!.left === 0) stack.pop();
    if (stack.length === 0) return { node: root!, end: at };
  }

  function attach(node: MsgNode): void {
    const top = stack[stack.length - 1];
    if (top === undefined) {
      root = node;
      return;
    }
    top.left--;
    if (top.node.t === "array") top.node.items.push(node);
    else if (top.key === undefined) top.key = node;
    else {
      top.node.entries.push([top.key, node]);
      top.key = undefined;
    }
  }
}

/** The bytes of a model, and where its length fields are. */
export function encodeMsgpack(root: MsgNode): { bytes: Uint8Array; lengths: LengthField[] } {
  const parts: Uint8Array[] = [];
  const lengths: LengthField[] = [];
  let length = 0;
  const push = (b: Uint8Array): void => {
    parts.push(b);
    length += b.byteLength;
  };
  const be = (v: number, size: number): Uint8Array => {
    const out = new Uint8Array(size);
    for (let i = size - 1; i >= 0; i--) {
      out[i] = v & 0xff;
      v = Math.floor(v / 256);
    }
    return out;
  };
  /** A header for a length: the preferred form when the length fits it, else the smallest. */
  const header = (kind: LengthField["kind"], n: number, form: number | undefined): void => {
    const families: Record<LengthField["kind"], { fix?: [number, number]; sized: [number, number][] }> = {
      str: {
        fix: [0xa0, 31],
        sized: [
          [0xd9, 1],
          [0xda, 2],
          [0xdb, 4],
        ],
      },
      bin: {
        sized: [
          [0xc4, 1],
          [0xc5, 2],
          [0xc6, 4],
        ],
      },
      array: {
        fix: [0x90, 15],
        sized: [
          [0xdc, 2],
          [0xdd, 4],
        ],
      },
      map: {
        fix: [0x80, 15],
        sized: [
          [0xde, 2],
          [0xdf, 4],
        ],
      },
      ext: {
        sized: [
          [0xc7, 1],
          [0xc8, 2],
          [0xc9, 4],
        ],
      },
    };
    const f = families[kind];
    const fits = (size: number) => n < 2 ** (8 * size);
    const fix = f.fix;
    if (fix !== undefined && (form === undefined || form === fix[0]) && n <= fix[1]) {
      lengths.push({ at: length, size: 0, bits: kind === "str" ? 5 : 4, kind });
      push(Uint8Array.of(fix[0] | n));
      return;
    }
    const chosen = f.sized.find(([b, size]) => b === form && fits(size)) ?? f.sized.find(([, size]) => fits(size))!;
    push(Uint8Array.of(chosen[0]));
    lengths.push({ at: length, size: chosen[1] as 1 | 2 | 4, kind });
    push(be(n, chosen[1]));
  };
  const stack: MsgNode[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    switch (node.t) {
      case "nil":
        push(Uint8Array.of(0xc0));
        break;
      case "bool":
        push(Uint8Array.of(node.v ? 0xc3 : 0xc2));
        break;
      case "raw":
        push(node.bytes);
        break;
      case "float": {
        const out = new Uint8Array(node.bits === 32 ? 5 : 9);
        const view = new DataView(out.buffer);
        out[0] = node.bits === 32 ? 0xca : 0xcb;
        if (node.bits === 32) view.setFloat32(1, node.v);
        else view.setFloat64(1, node.v);
        push(out);
        break;
      }
      case "int":
        push(encodeInt(node.v, node.form));
        break;
      case "str":
      case "bin":
        header(node.t, node.v.byteLength, node.form);
        push(node.v);
        break;
      case "ext": {
        const n = node.data.byteLength;
        const fixed = [1, 2, 4, 8, 16].indexOf(n);
        if (fixed >= 0 && (node.form === undefined || (node.form >= 0xd4 && node.form <= 0xd8))) {
          push(Uint8Array.of(0xd4 + fixed, node.type & 0xff));
        } else {
          header("ext", n, node.form);
          push(Uint8Array.of(node.type & 0xff));
        }
        push(node.data);
        break;
      }
      case "array":
        header("array", node.items.length, node.form);
        for (let i = node.items.length - 1; i >= 0; i--) stack.push(node.items[i]!);
        break;
      case "map":
        header("map", node.entries.length, node.form);
        for (let i = node.entries.length - 1; i >= 0; i--) stack.push(node.entries[i]![1], node.entries[i]![0]);
        break;
    }
  }
  return { bytes: joinBytes(...parts), lengths };
}

function encodeInt(v: bigint, form: number | undefined): Uint8Array {
  const forms: [number, number, bigint, bigint][] = [
    [0xcc, 1, 0n, 0xffn],
    [0xcd, 2, 0n, 0xffffn],
    [0xce, 4, 0n, 0xffffffffn],
    [0xcf, 8, 0n, 0xffffffffffffffffn],
    [0xd0, 1, -0x80n, 0x7fn],
    [0xd1, 2, -0x8000n, 0x7fffn],
    [0xd2, 4, -0x80000000n, 0x7fffffffn],
    [0xd3, 8, -0x8000000000000000n, 0x7fffffffffffffffn],
  ];
  const sized = (f: [number, number, bigint, bigint]): Uint8Array => {
    const out = new Uint8Array(1 + f[1]);
    out[0] = f[0];
    let x = BigInt.asUintN(f[1] * 8, v);
    for (let i = f[1]; i >= 1; i--) {
      out[i] = Number(x & 0xffn);
      x >>= 8n;
    }
    return out;
  };
  const preferred = forms.find((f) => f[0] === form && v >= f[2] && v <= f[3]);
  if (preferred !== undefined) return sized(preferred);
  if (v >= 0n && v <= 0x7fn) return Uint8Array.of(Number(v));
  if (v < 0n && v >= -32n) return Uint8Array.of(Number(v) & 0xff);
  const smallest = forms.find((f) => v >= f[2] && v <= f[3]);
  return smallest === undefined ? sized(forms[3]!) : sized(smallest);
}

const decoder = new TextDecoder();

/** A str node's text (invalid UTF-8 replaced). */
export function strText(node: MsgNode): string | undefined {
  return node.t === "str" ? decoder.decode(node.v) : undefined;
}

/** Every node of a tree with its parent slot, depth-first. */
export function allNodes(root: MsgNode): { node: MsgNode; set: (n: MsgNode) => void; parent?: MsgNode }[] {
  const out: { node: MsgNode; set: (n: MsgNode) => void; parent?: MsgNode }[] = [];
  const holder = { root };
  const stack: { node: MsgNode; set: (n: MsgNode) => void; parent?: MsgNode }[] = [{ node: root, set: (n) => (holder.root = n) }];
  while (stack.length > 0) {
    const item = stack.pop()!;
    out.push(item);
    const n = item.node;
    if (n.t === "array") n.items.forEach((child, i) => stack.push({ node: child, set: (x) => (n.items[i] = x), parent: n }));
    if (n.t === "map")
      n.entries.forEach((entry, i) => {
        stack.push({ node: entry[1], set: (x) => (n.entries[i]![1] = x), parent: n });
        stack.push({ node: entry[0], set: (x) => (n.entries[i]![0] = x), parent: n });
      });
  }
  return out;
}

/** A deep copy. */
export function cloneNode(node: MsgNode): MsgNode {
  switch (node.t) {
    case "array":
      return { ...node, items: node.items.map(cloneNode) };
    case "map":
      return { ...node, entries: node.entries.map(([k, v]) => [cloneNode(k), cloneNode(v)] as [MsgNode, MsgNode]) };
    default:
      return { ...node };
  }
}
