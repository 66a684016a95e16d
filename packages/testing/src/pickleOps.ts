/**
 * A pickle as a list of opcodes with their arguments, for the differential fuzzer's torch
 * mutators: parsed by the argument layout of each opcode (CPython's `pickletools` table,
 * protocols 0–5), edited op by op, and written back. Nothing is interpreted.
 */
import { joinBytes, latin1 } from "./Random.js";

/** How an opcode's argument is laid out. */
type ArgKind =
  | "none"
  | "u1"
  | "u2"
  | "i4"
  | "u4"
  | "u8"
  | "f8"
  | "line"
  | "line2"
  /** A length of the given size, then that many bytes. */
  | "bytes1"
  | "bytes4"
  | "bytes8"
  | "long1"
  | "long4";

const OPCODES: Record<string, ArgKind> = {
  "(": "none",
  ".": "none",
  "0": "none",
  "1": "none",
  "2": "none",
  N: "none",
  R: "none",
  a: "none",
  b: "none",
  d: "none",
  "}": "none",
  e: "none",
  l: "none",
  "]": "none",
  o: "none",
  s: "none",
  t: "none",
  ")": "none",
  u: "none",
  Q: "none",
  "\x81": "none",
  "\x85": "none",
  "\x86": "none",
  "\x87": "none",
  "\x88": "none",
  "\x89": "none",
  "\x8f": "none",
  "\x90": "none",
  "\x91": "none",
  "\x92": "none",
  "\x93": "none",
  "\x94": "none",
  "\x97": "none",
  "\x98": "none",
  K: "u1",
  h: "u1",
  q: "u1",
  "\x80": "u1",
  "\x82": "u1",
  M: "u2",
  "\x83": "u2",
  J: "i4",
  j: "u4",
  r: "u4",
  "\x84": "u4",
  "\x95": "u8",
  G: "f8",
  I: "line",
  L: "line",
  F: "line",
  S: "line",
  V: "line",
  g: "line",
  p: "line",
  P: "line",
  c: "line2",
  i: "line2",
  U: "bytes1",
  "\x8c": "bytes1",
  C: "bytes1",
  T: "bytes4",
  X: "bytes4",
  B: "bytes4",
  "\x8d": "bytes8",
  "\x8e": "bytes8",
  "\x96": "bytes8",
  "\x8a": "long1",
  "\x8b": "long4",
};

/** One opcode: its byte and its argument's bytes (everything after the opcode byte). */
export interface PickleOp {
  code: string;
  arg: Uint8Array;
}

/** The ops of a pickle up to and including STOP, and where it ended; undefined if it does not parse. */
export function parsePickle(bytes: Uint8Array, start = 0): { ops: PickleOp[]; end: number } | undefined {
  const ops: PickleOp[] = [];
  let at = start;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  while (at < bytes.byteLength) {
    const code = String.fromCharCode(bytes[at]!);
    const kind = OPCODES[code];
    if (kind === undefined) return undefined;
    const argStart = at + 1;
    let argEnd: number;
    switch (kind) {
      case "none":
        argEnd = argStart;
        break;
      case "u1":
        argEnd = argStart + 1;
        break;
      case "u2":
        argEnd = argStart + 2;
        break;
      case "i4":
      case "u4":
        argEnd = argStart + 4;
        break;
      case "u8":
      case "f8":
        argEnd = argStart + 8;
        break;
      case "line":
      case "line2": {
        let lines = kind === "line" ? 1 : 2;
        argEnd = argStart;
        while (lines > 0 && argEnd < bytes.byteLength) if (bytes[argEnd++] === 0x0a) lines--;
        if (lines > 0) return undefined;
        break;
      }
      case "bytes1":
      case "long1":
        if (argStart + 1 > bytes.byteLength) return undefined;
        argEnd = argStart + 1 + bytes[argStart]!;
        break;
      case "bytes4":
      case "long4":
        if (argStart + 4 > bytes.byteLength) return undefined;
        argEnd = argStart + 4 + view.getUint32(argStart, true);
        break;
      case "bytes8":
        if (argStart + 8 > bytes.byteLength) return undefined;
        argEnd = argStart + 8 + Number(view.getBigUint64(argStart, true));
        break;
    }
    if (argEnd > bytes.byteLength) return undefined;
    ops.push({ code, arg: bytes.slice(argStart, argEnd) });
    at = argEnd;
    if (code === ".") return { ops, end: at };
  }
  return undefined;
}

/** The bytes of ops. */
export function writePickle(ops: readonly PickleOp[]): Uint8Array {
  return joinBytes(...ops.flatMap((op) => [Uint8Array.of(op.code.charCodeAt(0)), op.arg]));
}

/** The argument kind of an opcode. */
export function argKind(code: string): ArgKind | undefined {
  return OPCODES[code];
}

/** The no-argument opcodes, for mutators that insert or replace one. */
export const NO_ARGUMENT_OPCODES: readonly string[] = Object.keys(OPCODES).filter((c) => OPCODES[c] === "none");

/** An op pushing the integer `v` in the smallest form (BININT1, BININT2, BININT, LONG1). */
export function intOp(v: bigint): PickleOp {
  if (v >= 0n && v < 256n) return { code: "K", arg: Uint8Array.of(Number(v)) };
  if (v >= 0n && v < 65536n) return { code: "M", arg: Uint8Array.of(Number(v) & 0xff, Number(v) >> 8) };
  if (v >= -(2n ** 31n) && v < 2n ** 31n) {
    const arg = new Uint8Array(4);
    new DataView(arg.buffer).setInt32(0, Number(v), true);
    return { code: "J", arg };
  }
  // LONG1: little-endian two's complement, as short as it can be.
  const bytes: number[] = [];
  let x = v;
  while (true) {
    bytes.push(Number(BigInt.asUintN(8, x)));
    x >>= 8n;
    const sign = (bytes[bytes.length - 1]! & 0x80) !== 0;
    if ((x === 0n && !sign) || (x === -1n && sign)) break;
  }
  return { code: "\x8a", arg: Uint8Array.of(bytes.length, ...bytes) };
}

/** The integer an op pushes, if it pushes one. */
export function intOf(op: PickleOp): bigint | undefined {
  const view = new DataView(op.arg.buffer, op.arg.byteOffset, op.arg.byteLength);
  switch (op.code) {
    case "K":
      return BigInt(op.arg[0]!);
    case "M":
      return BigInt(view.getUint16(0, true));
    case "J":
      return BigInt(view.getInt32(0, true));
    case "\x8a": {
      const n = op.arg[0]!;
      let v = 0n;
      for (let i = n; i >= 1; i--) v = (v << 8n) | BigInt(op.arg[i]!);
      return n === 0 ? 0n : BigInt.asIntN(n * 8, v);
    }
    default:
      return undefined;
  }
}

/** An op pushing the str `text` (SHORT_BINUNICODE, or BINUNICODE past 255 bytes). */
export function strOp(text: string | Uint8Array): PickleOp {
  const bytes = typeof text === "string" ? new TextEncoder().encode(text) : text;
  if (bytes.byteLength < 256) return { code: "\x8c", arg: joinBytes(Uint8Array.of(bytes.byteLength), bytes) };
  const head = new Uint8Array(4);
  new DataView(head.buffer).setUint32(0, bytes.byteLength, true);
  return { code: "X", arg: joinBytes(head, bytes) };
}

/** The text a str op pushes, if it pushes one. */
export function strOf(op: PickleOp): string | undefined {
  if (op.code === "\x8c" || op.code === "U") return new TextDecoder().decode(op.arg.subarray(1));
  if (op.code === "X" || op.code === "T") return new TextDecoder().decode(op.arg.subarray(4));
  return undefined;
}

/** A GLOBAL op (`c module\nname\n`). */
export function globalOp(module: string, name: string): PickleOp {
  return { code: "c", arg: latin1(`${module}\n${name}\n`) };
}
