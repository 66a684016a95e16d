/**
 * A pickle reader that never imports or calls anything: protocols 0–5 are decoded into plain
 * values, `GLOBAL`/`STACK_GLOBAL` produce symbols, and `REDUCE`, `NEWOBJ`, `BUILD` and persistent
 * ids are handed to hooks that give them meaning (the torch layer knows the few symbols that
 * build tensors; everything else becomes an opaque value that records what it was given).
 *
 * Spec: CPython 3.11 `Lib/pickle.py` (`_Unpickler`, its opcode table) and `Lib/pickletools.py`
 * (the opcode documentation). Every count and length is checked against the bytes left before
 * anything is allocated, and the memo, the stack, the marks, the nesting depth and the number of
 * values made are bounded by named limits.
 */
import { StConvertError } from "@st-convert/core";

/**
 * Memo entries kept. A state dict memoizes about ten values per tensor; four million covers
 * 400,000 tensors, well past any model, and bounds the memo of a hostile pickle.
 */
export const MAX_MEMO_ENTRIES = 4_000_000;
/** Values on the stack and open marks: real pickles batch 1,000 items per mark; a bomb of pushes stops here. */
export const MAX_STACK_SIZE = 1_000_000;
/**
 * Nesting of containers and calls. Checkpoints nest a few levels (a training checkpoint's
 * optimizer state, a dozen); Python's own recursion limit is 1,000. A 200,000-deep tuple nest is
 * refused here instead of being walked.
 */
export const MAX_NESTING_DEPTH = 1_000;
/**
 * Containers, calls and strings made. About thirty per tensor in a training checkpoint with
 * optimizer state; eight million allows 250,000 such tensors and bounds the memory of a pickle
 * made of nothing but `EMPTY_LIST`.
 */
export const MAX_PICKLE_OBJECTS = 8_000_000;

/** A Python float (numbers stand for ints, so that `3` and `3.0` stay apart). */
export interface PyFloat {
  readonly kind: "float";
  readonly value: number;
}
export interface PyBytes {
  readonly kind: "bytes";
  readonly bytes: Uint8Array;
}
export interface PyTuple {
  readonly kind: "tuple";
  readonly items: readonly PickleValue[];
  readonly depth: number;
}
export interface PyList {
  readonly kind: "list";
  readonly items: PickleValue[];
  depth: number;
}
/** A dict (or an `OrderedDict`): entries in insertion order, keyed by a hash of the key. */
export interface PyDict {
  readonly kind: "dict";
  readonly entries: Map<string, { key: PickleValue; value: PickleValue }>;
  depth: number;
  /** An OrderedDict's attributes, as its last `BUILD` gave them (a state dict's `_metadata`). */
  attributes?: PickleValue;
}
/** A set or frozenset: only ever skipped, so its items are kept for nothing but the tensor check. */
export interface PySet {
  readonly kind: "set";
  readonly items: PickleValue[];
  depth: number;
}
/** A symbol named by `GLOBAL`/`STACK_GLOBAL`/`INST`: never imported. */
export interface PyGlobal {
  readonly kind: "global";
  readonly module: string;
  readonly name: string;
}
/**
 * What a call (`REDUCE`, `NEWOBJ`, `INST`, `OBJ`) of something without meaning here would have
 * returned, had anything run: the callee and everything given to it (its arguments, `BUILD`
 * state, appended items), kept only to find tensors that flowed into it.
 */
export interface PyOpaque {
  readonly kind: "opaque";
  /** `module.name` of the callee, or a description of a callee that is not a symbol. */
  readonly callee: string;
  readonly given: PickleValue[];
  depth: number;
}
/** A value the hooks made (a storage, a tensor): the unpickler only moves it around. */
export interface PyNative<T = unknown> {
  readonly kind: "native";
  readonly value: T;
}

export type PickleValue = null | boolean | number | bigint | string | PyFloat | PyBytes | PyTuple | PyList | PyDict | PySet | PyGlobal | PyOpaque | PyNative;

/** How the opcodes that would run code get their meaning. */
export interface UnpicklerHooks {
  /**
   * Each symbol a `GLOBAL`, `STACK_GLOBAL` or `INST` names, as it is named (before anything uses
   * it): the hook may refuse the pickle there.
   */
  symbol?(symbol: PyGlobal): void;
  /** `BINPERSID`/`PERSID`: the value a persistent id stands for. */
  persistentLoad(pid: PickleValue): PickleValue;
  /**
   * `REDUCE` of a symbol: a value, or undefined for an opaque one. `charge(n)` counts `n` more
   * values made against `maxObjects`: a hook that walks a shared container must charge for it, or
   * one small pickle could have it walk the same large list again and again.
   */
  reduce?(callee: PyGlobal, args: PyTuple, charge: (n: number) => void): PickleValue | undefined;
  /**
   * `BUILD` on a native value: the new value, or undefined to refuse it. On an opaque one (the
   * hooks may know what its callee makes): the value to keep, or undefined to record the state as
   * given to it.
   */
  build?(target: PyNative | PyOpaque, state: PickleValue): PickleValue | undefined;
  /** `NEWOBJ` of a symbol (`cls.__new__(cls, *args)`): a value, or undefined to treat it as `REDUCE`. */
  newObject?(cls: PyGlobal, args: PickleValue): PickleValue | undefined;
}

/** Options of {@link unpickle}. */
export interface UnpickleOptions {
  maxMemoEntries?: number;
  maxStackSize?: number;
  maxNestingDepth?: number;
  maxObjects?: number;
  /**
   * `data` may end before the pickle does (a window of a longer stream): running past its end
   * throws {@link NeedMoreData} instead of `UnexpectedEof`, so the caller can retry with more.
   */
  partial?: boolean;
}

/** Thrown (only with `partial`) when the pickle goes on past the bytes given. */
export class NeedMoreData extends Error {
  constructor() {
    super("the pickle goes on past the bytes read so far");
  }
}

/** Result of {@link unpickle}: the value and where the pickle ended (the byte after `STOP`). */
export interface Unpickled {
  readonly value: PickleValue;
  readonly end: number;
  /** Symbols called without meaning (opaque calls), in first-call order. */
  readonly opaqueCalls: readonly string[];
}

const utf8 = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true });

function bad(rule: string): never {
  throw new StConvertError("UnpicklingError", rule);
}

/** Nesting depth of a value: 0 for scalars, the recorded depth of containers. */
export function depthOf(value: PickleValue): number {
  if (value === null || typeof value !== "object") return 0;
  return "depth" in value ? value.depth : 0;
}

/**
 * Values one dict key may hold, counted through its nested tuples. A checkpoint's keys are str or
 * int; a tuple that holds one smaller tuple twice, 28 levels deep, is 2^28 values from 60 bytes.
 */
export const MAX_KEY_VALUES = 10_000;

/**
 * The key under which a dict holds `key`: Python's equality for the hashable kinds a checkpoint
 * uses. A tuple key is spelled out through its nested tuples, at most {@link MAX_KEY_VALUES} values;
 * `charge` is told how many a tuple key took (a shared tuple used as a key again and again pays each time).
 * @throws StConvertError `LimitExceeded` for a key past {@link MAX_KEY_VALUES} values.
 */
export function dictKey(key: PickleValue, identity: () => string, charge?: (n: number) => void): string {
  let values = 0;
  const spell = (k: PickleValue): string => {
    if (++values > MAX_KEY_VALUES) throw new StConvertError("LimitExceeded", `a dict key holds more than ${MAX_KEY_VALUES} values through its nested tuples`);
    if (k === null) return "n";
    switch (typeof k) {
      case "string":
        return `s${k}`;
      case "boolean":
        return `i${k ? 1 : 0}`;
      case "number":
      case "bigint":
        return `i${k}`;
    }
    if (k.kind === "float") return Number.isInteger(k.value) ? `i${BigInt(k.value)}` : `f${k.value}`;
    if (k.kind === "bytes") return `b${Array.from(k.bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
    if (k.kind === "tuple") return `t(${k.items.map(spell).join(",")})`;
    if (k.kind === "global") return `g${k.module} ${k.name}`;
    return identity();
  };
  const spelled = spell(key);
  if (values > 1) charge?.(values);
  return spelled;
}

/** Calls whose result Python cannot hash: `set(...)` and `bytearray(...)` (both in torch's allowed globals). */
const UNHASHABLE_CALLS: Readonly<Record<string, string>> = { "builtins.set": "set", "builtins.bytearray": "bytearray" };

/**
 * The type of mutable value that makes `key` unhashable in Python (a list, a dict, a set, inside a
 * tuple too), or undefined. A FROZENSET is a set here: torch's unpickler refuses its opcode anyway.
 */
function unhashable(key: PickleValue): string | undefined {
  const stack: PickleValue[] = [key];
  for (let visits = 0; stack.length > 0 && visits < 10_000; visits++) {
    const v = stack.pop()!;
    if (v === null || typeof v !== "object") continue;
    if (v.kind === "list" || v.kind === "dict" || v.kind === "set") return v.kind;
    if (v.kind === "opaque" && UNHASHABLE_CALLS[v.callee] !== undefined) return UNHASHABLE_CALLS[v.callee];
    if (v.kind === "tuple") stack.push(...v.items);
  }
  return undefined;
}

/**
 * Python's truth of a value, where it is known without running anything: undefined for an opaque
 * call's result or a native value (the hooks know those).
 */
export function pyTruth(value: PickleValue): boolean | undefined {
  if (value === null) return false;
  switch (typeof value) {
    case "boolean":
      return value;
    case "number":
      return value !== 0;
    case "bigint":
      return value !== 0n;
    case "string":
      return value.length > 0;
  }
  switch (value.kind) {
    case "float":
      return value.value !== 0;
    case "bytes":
      return value.bytes.byteLength > 0;
    case "tuple":
    case "list":
    case "set":
      return value.items.length > 0;
    case "dict":
      return value.entries.size > 0;
    case "global":
      return true;
    default:
      return undefined;
  }
}

/** pickle's `load_build`: a state of two items is `(state, slotstate)`. */
export function splitState(state: PickleValue): [PickleValue, PickleValue] {
  if (state !== null && typeof state === "object" && state.kind === "tuple" && state.items.length === 2) return [state.items[0]!, state.items[1]!];
  return [state, null];
}

/**
 * Why `dict.update(state)` (what torch's `BUILD` does to an `OrderedDict`'s `__dict__`) raises, or
 * undefined when it would not: a mapping, or an iterable of pairs with hashable keys.
 */
export function dictUpdateRefusal(state: PickleValue): string | undefined {
  const pair = (item: PickleValue, i: number): string | undefined => {
    if (typeof item === "string") return item.length === 2 ? undefined : `element #${i} has length ${item.length}; 2 is required`;
    if (item !== null && typeof item === "object") {
      if (item.kind === "bytes") return item.bytes.byteLength === 2 ? undefined : `element #${i} has length ${item.bytes.byteLength}; 2 is required`;
      if (item.kind === "tuple" || item.kind === "list") {
        if (item.items.length !== 2) return `element #${i} has length ${item.items.length}; 2 is required`;
        const mutable = unhashable(item.items[0]!);
        return mutable === undefined ? undefined : `unhashable type: '${mutable}'`;
      }
      if (item.kind === "opaque") return undefined;
    }
    return `cannot convert element #${i} (${describeValue(item)}) to a sequence`;
  };
  if (state === "") return undefined;
  if (state === null || typeof state !== "object") return `${describeValue(state)} is not a mapping or a sequence of pairs`;
  switch (state.kind) {
    case "dict":
    case "opaque":
      return undefined;
    case "tuple":
    case "list":
    case "set":
      for (let i = 0; i < state.items.length; i++) {
        const why = pair(state.items[i]!, i);
        if (why !== undefined) return why;
      }
      return undefined;
    case "bytes":
      return state.bytes.byteLength === 0 ? undefined : "bytes are not a sequence of pairs";
    default:
      return `${describeValue(state)} is not a mapping or a sequence of pairs`;
  }
}

/** Allowed types whose instances have no `__dict__`: torch's `BUILD` fails on them with a true state. */
const WITHOUT_DICT = new Set(["torch.Size", "builtins.set", "builtins.complex", "builtins.bytearray", "torch.device"]);

/**
 * How protocols 0–2 pickle `bytes` (they have no bytes opcode): `_codecs.encode(text, "latin1")`,
 * and `bytes()` for an empty one. The pickler's own spelling, not a call: decoded here.
 */
function pickledBytes(callee: PyGlobal, args: PyTuple): PyBytes | undefined {
  const symbol = `${callee.module}.${callee.name}`;
  if (symbol === "builtins.bytes" && args.items.length === 0) return { kind: "bytes", bytes: new Uint8Array(0) };
  if (symbol !== "_codecs.encode" || args.items.length !== 2) return undefined;
  const [text, encoding] = args.items;
  if (typeof text !== "string" || (encoding !== "latin1" && encoding !== "latin-1")) return undefined;
  const bytes = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0xff) return undefined;
    bytes[i] = c;
  }
  return { kind: "bytes", bytes };
}

/** A short description of a value for messages: `an int`, `a dict`, `an object made by argparse.Namespace`. */
export function describeValue(value: PickleValue): string {
  if (value === null) return "None";
  switch (typeof value) {
    case "boolean":
      return "a bool";
    case "number":
    case "bigint":
      return "an int";
    case "string":
      return "a str";
  }
  switch (value.kind) {
    case "float":
      return "a float";
    case "bytes":
      return "bytes";
    case "tuple":
      return "a tuple";
    case "list":
      return "a list";
    case "dict":
      return "a dict";
    case "set":
      return "a set";
    case "global":
      return `the symbol ${value.module}.${value.name}`;
    case "opaque":
      return `an object made by ${value.callee} (not run)`;
    case "native":
      return "a torch value";
  }
}

/**
 * Decodes one pickle starting at `data[0]`, up to its `STOP`.
 * @throws StConvertError `UnpicklingError` (malformed pickle, refused opcode), `UnexpectedEof`
 *   (truncated), `LimitExceeded` (one of the limits), and what the hooks throw;
 *   {@link NeedMoreData} with `partial`.
 */
export function unpickle(data: Uint8Array, hooks: UnpicklerHooks, options: UnpickleOptions = {}): Unpickled {
  const maxMemo = options.maxMemoEntries ?? MAX_MEMO_ENTRIES;
  const maxStack = options.maxStackSize ?? MAX_STACK_SIZE;
  const maxDepth = options.maxNestingDepth ?? MAX_NESTING_DEPTH;
  const maxObjects = options.maxObjects ?? MAX_PICKLE_OBJECTS;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const stack: PickleValue[] = [];
  const marks: number[] = [];
  const memo = new Map<number, PickleValue>();
  const opaqueCalls = new Set<string>();
  let objects = 0;
  let identities = 0;
  let pos = 0;

  const eof = (): never => {
    if (options.partial === true) throw new NeedMoreData();
    throw new StConvertError("UnexpectedEof", `pickle data was truncated: it ends at byte ${data.byteLength} before its STOP opcode`);
  };
  /** Checks that `n` more bytes exist before anything is made from them. */
  const need = (n: number | bigint): number => {
    if (BigInt(pos) + BigInt(n) > BigInt(data.byteLength)) eof();
    return Number(n);
  };
  const take = (n: number | bigint): Uint8Array => {
    const length = need(n);
    const out = data.subarray(pos, pos + length);
    pos += length;
    return out;
  };
  const line = (): Uint8Array => {
    const end = data.indexOf(0x0a, pos);
    if (end < 0) eof();
    const out = data.subarray(pos, end);
    pos = end + 1;
    return out;
  };
  const text = (bytes: Uint8Array, what: string): string => {
    try {
      return utf8.decode(bytes);
    } catch {
      return bad(`${what} is not valid UTF-8`);
    }
  };
  const count = (n = 1): void => {
    objects += n;
    if (objects > maxObjects) {
      throw new StConvertError("LimitExceeded", `the pickle makes more than ${maxObjects} values (maxObjects)`);
    }
  };
  const deeper = (depth: number): number => {
    if (depth > maxDepth) throw new StConvertError("LimitExceeded", `values nest deeper than ${maxDepth} levels (maxNestingDepth)`);
    return depth;
  };
  const push = (value: PickleValue): void => {
    if (stack.length >= maxStack) throw new StConvertError("LimitExceeded", `the pickle stack holds more than ${maxStack} values (maxStackSize)`);
    stack.push(value);
  };
  const pop = (): PickleValue => {
    const floor = marks.length === 0 ? 0 : marks[marks.length - 1]!;
    if (stack.length <= floor) bad("unpickling stack underflow");
    return stack.pop()!;
  };
  const top = (): PickleValue => {
    const floor = marks.length === 0 ? 0 : marks[marks.length - 1]!;
    if (stack.length <= floor) bad("unpickling stack underflow");
    return stack[stack.length - 1]!;
  };
  const popMark = (): PickleValue[] => {
    const mark = marks.pop();
    if (mark === undefined) bad("could not find MARK");
    return stack.splice(mark);
  };
  const tuple = (items: readonly PickleValue[]): PyTuple => {
    count();
    let depth = 0;
    for (const item of items) depth = Math.max(depth, depthOf(item));
    return { kind: "tuple", items, depth: deeper(depth + 1) };
  };
  const grow = (container: PyList | PyDict | PySet | PyOpaque, value: PickleValue): void => {
    container.depth = Math.max(container.depth, deeper(depthOf(value) + 1));
  };
  const opaque = (callee: string, given: PickleValue[]): PyOpaque => {
    count();
    opaqueCalls.add(callee);
    let depth = 0;
    for (const item of given) depth = Math.max(depth, depthOf(item));
    return { kind: "opaque", callee, given, depth: deeper(depth + 1) };
  };
  const symbolName = (value: PickleValue): string =>
    value !== null && typeof value === "object" && value.kind === "global" ? `${value.module}.${value.name}` : `a call of ${describeValue(value)}`;
  const int = (value: bigint): number | bigint =>
    value >= BigInt(Number.MIN_SAFE_INTEGER) && value <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(value) : value;
  const signedLittle = (bytes: Uint8Array): bigint => {
    let value = 0n;
    for (let i = bytes.byteLength - 1; i >= 0; i--) value = (value << 8n) | BigInt(bytes[i]!);
    if (bytes.byteLength > 0 && (bytes[bytes.byteLength - 1]! & 0x80) !== 0) value -= 1n << BigInt(8 * bytes.byteLength);
    return value;
  };
  const decimal = (bytes: Uint8Array, what: string, suffix = false): bigint => {
    let s = String.fromCharCode(...bytes).trim();
    if (suffix && s.endsWith("L")) s = s.slice(0, -1);
    if (!/^[+-]?\d+$/.test(s)) bad(`${what} ${JSON.stringify(s.slice(0, 40))} is not an integer`);
    return BigInt(s);
  };
  const memoIndex = (value: number | bigint): number => {
    if (typeof value === "bigint" || value < 0) bad(`negative or huge memo index ${value}`);
    return value as number;
  };
  const put = (index: number): void => {
    if (!memo.has(index) && memo.size >= maxMemo) throw new StConvertError("LimitExceeded", `the pickle memoizes more than ${maxMemo} values (maxMemoEntries)`);
    memo.set(index, top());
  };
  const get = (index: number): void => {
    if (!memo.has(index)) bad(`Memo value not found at index ${index}`);
    push(memo.get(index)!);
  };
  const setItem = (target: PickleValue, key: PickleValue, value: PickleValue): void => {
    if (target !== null && typeof target === "object" && target.kind === "dict") {
      const mutable = unhashable(key);
      if (mutable !== undefined) bad(`unhashable type: '${mutable}' (a dict key must be hashable, as Python requires)`);
      target.entries.set(
        dictKey(key, () => `#${identities++}`, count),
        { key, value },
      );
      grow(target, key);
      grow(target, value);
      return;
    }
    if (target !== null && typeof target === "object" && target.kind === "opaque") {
      target.given.push(key, value);
      grow(target, value);
      return;
    }
    bad(`SETITEM on ${describeValue(target)}`);
  };
  const append = (target: PickleValue, value: PickleValue): void => {
    if (target !== null && typeof target === "object" && (target.kind === "list" || target.kind === "opaque" || target.kind === "set")) {
      (target.kind === "list" ? target.items : target.kind === "set" ? target.items : target.given).push(value);
      grow(target, value);
      return;
    }
    bad(`APPEND to ${describeValue(target)}`);
  };
  const call = (callee: PickleValue, given: PickleValue): PickleValue => {
    // torch's weights-only unpickler calls func(*args): a list serves as a tuple, a dict as the
    // tuple of its keys (in their order), and a set of at most one item too (a longer set's order
    // is Python's hash order, which nothing here can know).
    let args = given;
    if (args !== null && typeof args === "object" && (args.kind === "list" || (args.kind === "set" && args.items.length <= 1))) {
      count(args.items.length);
      args = { kind: "tuple", items: [...args.items], depth: args.depth };
    } else if (args !== null && typeof args === "object" && args.kind === "dict") {
      count(args.entries.size);
      args = { kind: "tuple", items: Array.from(args.entries.values(), (e) => e.key), depth: args.depth };
    }
    if (args === null || typeof args !== "object" || args.kind !== "tuple")
      bad(`the arguments of ${symbolName(callee)} are ${describeValue(args)}, not a tuple`);
    if (callee !== null && typeof callee === "object" && callee.kind === "global") {
      const made = pickledBytes(callee, args as PyTuple) ?? hooks.reduce?.(callee, args as PyTuple, count);
      if (made !== undefined) return made;
    }
    return opaque(symbolName(callee), [args]);
  };
  const pyString = (raw: Uint8Array): string => {
    // Protocol 0 STRING: a quoted Python 2 str literal, decoded as UTF-8 (torch.load's encoding).
    const s = String.fromCharCode(...raw).trimEnd();
    const quote = s[0];
    if (s.length < 2 || (quote !== "'" && quote !== '"') || s[s.length - 1] !== quote) bad("the STRING opcode argument must be quoted");
    const out: number[] = [];
    const body = s.slice(1, -1);
    for (let i = 0; i < body.length; i++) {
      const c = body.charCodeAt(i);
      if (c !== 0x5c) {
        out.push(c & 0xff);
        continue;
      }
      const next = body[++i];
      const simple: Record<string, number> = { "\\": 0x5c, "'": 0x27, '"': 0x22, n: 0x0a, r: 0x0d, t: 0x09, a: 0x07, b: 0x08, f: 0x0c, v: 0x0b };
      if (next !== undefined && simple[next] !== undefined) out.push(simple[next]!);
      else if (next === "x" && /^[0-9a-fA-F]{2}$/.test(body.slice(i + 1, i + 3))) {
        out.push(Number.parseInt(body.slice(i + 1, i + 3), 16));
        i += 2;
      } else if (next !== undefined && /[0-7]/.test(next)) {
        const digits = /^[0-7]{1,3}/.exec(body.slice(i))![0];
        out.push(Number.parseInt(digits, 8) & 0xff);
        i += digits.length - 1;
      } else bad("invalid escape in a STRING opcode argument");
    }
    return text(Uint8Array.from(out), "a STRING opcode argument");
  };
  const rawUnicode = (raw: Uint8Array): string => {
    // Protocol 0 UNICODE: raw-unicode-escape (\uXXXX, \UXXXXXXXX; every other byte is Latin-1).
    let out = "";
    for (let i = 0; i < raw.byteLength; i++) {
      const c = raw[i]!;
      if (c === 0x5c && (raw[i + 1] === 0x75 || raw[i + 1] === 0x55)) {
        const width = raw[i + 1] === 0x75 ? 4 : 8;
        const hex = String.fromCharCode(...raw.subarray(i + 2, i + 2 + width));
        if (hex.length !== width || !/^[0-9a-fA-F]+$/.test(hex)) bad("truncated \\uXXXX escape in a UNICODE opcode argument");
        const code = Number.parseInt(hex, 16);
        if (code > 0x10ffff) bad("\\U escape past U+10FFFF in a UNICODE opcode argument");
        out += String.fromCodePoint(code);
        i += 1 + width;
      } else out += String.fromCharCode(c);
    }
    return out;
  };
  const string = (value: string): string => {
    count();
    return value;
  };

  for (;;) {
    need(1);
    const op = data[pos++]!;
    switch (op) {
      case 0x80: {
        // PROTO
        const protocol = take(1)[0]!;
        if (protocol > 5) bad(`unsupported pickle protocol: ${protocol}`);
        break;
      }
      case 0x95: // FRAME: a length that only tells how much to buffer; the opcodes that follow are read as they come.
        take(8);
        break;
      case 0x2e: {
        // STOP
        const value = pop();
        return { value, end: pos, opaqueCalls: [...opaqueCalls] };
      }
      case 0x28: // MARK
        if (marks.length >= maxStack) throw new StConvertError("LimitExceeded", `the pickle opens more than ${maxStack} marks (maxStackSize)`);
        marks.push(stack.length);
        break;
      case 0x30: // POP
        if (stack.length > (marks.length === 0 ? 0 : marks[marks.length - 1]!)) stack.pop();
        else popMark();
        break;
      case 0x31: // POP_MARK
        popMark();
        break;
      case 0x32: // DUP
        push(top());
        break;
      case 0x4e: // NONE
        push(null);
        break;
      case 0x88: // NEWTRUE
        push(true);
        break;
      case 0x89: // NEWFALSE
        push(false);
        break;
      case 0x49: {
        // INT: decimal line; "01"/"00" are True/False
        const raw = line();
        const s = String.fromCharCode(...raw);
        push(s === "01" ? true : s === "00" ? false : int(decimal(raw, "INT")));
        break;
      }
      case 0x4a: // BININT
        need(4);
        push(view.getInt32(pos, true));
        pos += 4;
        break;
      case 0x4b: // BININT1
        push(take(1)[0]!);
        break;
      case 0x4d: // BININT2
        need(2);
        push(view.getUint16(pos, true));
        pos += 2;
        break;
      case 0x4c: // LONG: decimal line with an optional L
        push(int(decimal(line(), "LONG", true)));
        break;
      case 0x8a: // LONG1
        push(int(signedLittle(take(take(1)[0]!))));
        break;
      case 0x8b: {
        // LONG4
        need(4);
        const n = view.getInt32(pos, true);
        pos += 4;
        if (n < 0) bad("LONG pickle has negative byte count");
        push(int(signedLittle(take(n))));
        break;
      }
      case 0x46: {
        // FLOAT: repr line
        const s = String.fromCharCode(...line()).trim();
        if (!/^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|inf|nan)$/i.test(s)) bad(`FLOAT ${JSON.stringify(s.slice(0, 40))} is not a number`);
        count();
        push({ kind: "float", value: /inf/i.test(s) ? (s.startsWith("-") ? -Infinity : Infinity) : /nan/i.test(s) ? Number.NaN : Number.parseFloat(s) });
        break;
      }
      case 0x47: // BINFLOAT: big-endian double
        need(8);
        count();
        push({ kind: "float", value: view.getFloat64(pos, false) });
        pos += 8;
        break;
      case 0x53: // STRING
        push(string(pyString(line())));
        break;
      case 0x54: {
        // BINSTRING: signed 4-byte length
        need(4);
        const n = view.getInt32(pos, true);
        pos += 4;
        if (n < 0) bad("BINSTRING pickle has negative byte count");
        push(string(text(take(n), "a BINSTRING")));
        break;
      }
      case 0x55: // SHORT_BINSTRING
        push(string(text(take(take(1)[0]!), "a SHORT_BINSTRING")));
        break;
      case 0x56: // UNICODE
        push(string(rawUnicode(line())));
        break;
      case 0x58: // BINUNICODE
        need(4);
        pos += 4;
        push(string(text(take(view.getUint32(pos - 4, true)), "a BINUNICODE string")));
        break;
      case 0x8c: // SHORT_BINUNICODE
        push(string(text(take(take(1)[0]!), "a SHORT_BINUNICODE string")));
        break;
      case 0x8d: // BINUNICODE8
        need(8);
        pos += 8;
        push(string(text(take(view.getBigUint64(pos - 8, true)), "a BINUNICODE8 string")));
        break;
      case 0x42: // BINBYTES
        need(4);
        pos += 4;
        count();
        push({ kind: "bytes", bytes: take(view.getUint32(pos - 4, true)) });
        break;
      case 0x43: // SHORT_BINBYTES
        count();
        push({ kind: "bytes", bytes: take(take(1)[0]!) });
        break;
      case 0x8e: // BINBYTES8
      case 0x96: // BYTEARRAY8
        need(8);
        pos += 8;
        count();
        push({ kind: "bytes", bytes: take(view.getBigUint64(pos - 8, true)) });
        break;
      case 0x29: // EMPTY_TUPLE
        push(tuple([]));
        break;
      case 0x74: // TUPLE
        push(tuple(popMark()));
        break;
      case 0x85: // TUPLE1
        push(tuple([pop()]));
        break;
      case 0x86: {
        // TUPLE2
        const b = pop();
        push(tuple([pop(), b]));
        break;
      }
      case 0x87: {
        // TUPLE3
        const c = pop();
        const b = pop();
        push(tuple([pop(), b, c]));
        break;
      }
      case 0x5d: // EMPTY_LIST
        count();
        push({ kind: "list", items: [], depth: 1 });
        break;
      case 0x6c: {
        // LIST
        const list: PyList = { kind: "list", items: [], depth: 1 };
        count();
        for (const item of popMark()) append(list, item);
        push(list);
        break;
      }
      case 0x61: {
        // APPEND
        const value = pop();
        append(top(), value);
        break;
      }
      case 0x65: {
        // APPENDS
        const items = popMark();
        const target = top();
        for (const item of items) append(target, item);
        break;
      }
      case 0x7d: // EMPTY_DICT
        count();
        push({ kind: "dict", entries: new Map(), depth: 1 });
        break;
      case 0x64: {
        // DICT
        const items = popMark();
        if (items.length % 2 !== 0) bad("odd number of items for DICT");
        const dict: PyDict = { kind: "dict", entries: new Map(), depth: 1 };
        count();
        for (let i = 0; i < items.length; i += 2) setItem(dict, items[i]!, items[i + 1]!);
        push(dict);
        break;
      }
      case 0x73: {
        // SETITEM
        const value = pop();
        const key = pop();
        setItem(top(), key, value);
        break;
      }
      case 0x75: {
        // SETITEMS
        const items = popMark();
        if (items.length % 2 !== 0) bad("odd number of items for SETITEMS");
        const target = top();
        for (let i = 0; i < items.length; i += 2) setItem(target, items[i]!, items[i + 1]!);
        break;
      }
      case 0x8f: // EMPTY_SET
        count();
        push({ kind: "set", items: [], depth: 1 });
        break;
      case 0x90: {
        // ADDITEMS
        const items = popMark();
        const target = top();
        if (target === null || typeof target !== "object" || target.kind !== "set") bad(`ADDITEMS to ${describeValue(target)}`);
        for (const item of items) append(target, item);
        break;
      }
      case 0x91: {
        // FROZENSET
        const set: PySet = { kind: "set", items: [], depth: 1 };
        count();
        for (const item of popMark()) append(set, item);
        push(set);
        break;
      }
      case 0x67: // GET
        get(memoIndex(int(decimal(line(), "GET"))));
        break;
      case 0x68: // BINGET
        get(take(1)[0]!);
        break;
      case 0x6a: // LONG_BINGET
        need(4);
        pos += 4;
        get(view.getUint32(pos - 4, true));
        break;
      case 0x70: // PUT
        put(memoIndex(int(decimal(line(), "PUT"))));
        break;
      case 0x71: // BINPUT
        put(take(1)[0]!);
        break;
      case 0x72: // LONG_BINPUT
        need(4);
        pos += 4;
        put(view.getUint32(pos - 4, true));
        break;
      case 0x94: // MEMOIZE
        put(memo.size);
        break;
      case 0x63: {
        // GLOBAL: module and name lines
        // Python 2's module name for the builtins, which pickle's protocol-2 GLOBAL maps (torch's too).
        const written = text(line(), "a GLOBAL module name");
        const module = written === "__builtin__" ? "builtins" : written;
        const name = text(line(), "a GLOBAL name");
        count();
        const symbol: PyGlobal = { kind: "global", module, name };
        hooks.symbol?.(symbol);
        push(symbol);
        break;
      }
      case 0x93: {
        // STACK_GLOBAL
        const name = pop();
        const module = pop();
        if (typeof name !== "string" || typeof module !== "string") bad("STACK_GLOBAL requires str");
        count();
        const symbol: PyGlobal = { kind: "global", module: module as string, name: name as string };
        hooks.symbol?.(symbol);
        push(symbol);
        break;
      }
      case 0x52: {
        // REDUCE
        const args = pop();
        const callee = pop();
        push(call(callee, args));
        break;
      }
      case 0x81: {
        // NEWOBJ: cls.__new__(cls, *args)
        const args = pop();
        const cls = pop();
        const made = cls !== null && typeof cls === "object" && cls.kind === "global" ? hooks.newObject?.(cls, args) : undefined;
        push(made ?? call(cls, args));
        break;
      }
      case 0x92: {
        // NEWOBJ_EX: cls.__new__(cls, *args, **kwargs)
        const kwargs = pop();
        const args = pop();
        const cls = pop();
        push(opaque(symbolName(cls), [args, kwargs]));
        break;
      }
      case 0x69: {
        // INST: module and name lines, arguments since the mark
        const module = text(line(), "an INST module name");
        const name = text(line(), "an INST name");
        const symbol: PyGlobal = { kind: "global", module, name };
        hooks.symbol?.(symbol);
        const args = popMark();
        push(call(symbol, tuple(args)));
        break;
      }
      case 0x6f: {
        // OBJ: the class and its arguments since the mark
        const items = popMark();
        if (items.length === 0) bad("OBJ without a class");
        push(call(items[0]!, tuple(items.slice(1))));
        break;
      }
      case 0x62: {
        // BUILD
        // torch's weights-only rules: an OrderedDict takes `__dict__.update(state)`; the other
        // allowed types pickle's own `load_build` (split a pair into state and slot state, and
        // update `__dict__` only with a true state, which a set or a torch.Size has none of).
        const state = pop();
        const target = top();
        if (target !== null && typeof target === "object") {
          if (target.kind === "native") {
            const built = hooks.build?.(target, state);
            if (built !== undefined) {
              stack[stack.length - 1] = built;
              break;
            }
            bad(`BUILD on a torch value with ${describeValue(state)} as its state`);
          }
          const withoutDict = target.kind === "set" || (target.kind === "opaque" && WITHOUT_DICT.has(target.callee));
          if (withoutDict) {
            const [dictState, slotState] = splitState(state);
            if (pyTruth(dictState) === true || pyTruth(slotState) === true) {
              bad(
                `BUILD on ${describeValue(target)} with ${describeValue(state)} as its state: it has no attributes to set (torch: "object has no attribute '__dict__'")`,
              );
            }
          }
          if (target.kind === "dict" || (target.kind === "opaque" && target.callee === "collections.OrderedDict")) {
            // An OrderedDict's BUILD sets its attributes: a state dict's `_metadata` (per-module
            // versions, and the metadata the torch writer keeps there), kept for the reader.
            // A shared list of pairs given to BUILD again and again is walked each time: charged.
            if (state !== null && typeof state === "object" && (state.kind === "list" || state.kind === "tuple" || state.kind === "set"))
              count(state.items.length);
            const why = dictUpdateRefusal(state);
            if (why !== undefined) bad(`BUILD on an OrderedDict with ${describeValue(state)} as its state: dict.update refuses it (${why})`);
            if (target.kind === "dict") {
              target.attributes = state;
              break;
            }
          }
          if (target.kind === "opaque") {
            if (hooks.build?.(target, state) !== undefined) break;
            target.given.push(state);
            grow(target, state);
            break;
          }
          if (target.kind === "set") break;
        }
        bad(`BUILD on ${describeValue(target)}`);
        break;
      }
      case 0x51: // BINPERSID
        push(hooks.persistentLoad(pop()));
        break;
      case 0x50: // PERSID
        push(hooks.persistentLoad(string(text(line(), "a PERSID"))));
        break;
      case 0x82:
      case 0x83:
      case 0x84:
        bad(`the extension registry (EXT${op === 0x82 ? 1 : op === 0x83 ? 2 : 4}) has no place in a checkpoint`);
        break;
      case 0x97:
      case 0x98:
        bad(`out-of-band buffers (${op === 0x97 ? "NEXT_BUFFER" : "READONLY_BUFFER"}) have no place in a checkpoint`);
        break;
      default:
        bad(`invalid load key, '\\x${op.toString(16).padStart(2, "0")}' at byte ${pos - 1}`);
    }
  }
}
