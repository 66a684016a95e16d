/**
 * A sliding window over a byte range of a `ByteSource`, for tokenizers that run synchronously
 * over the bytes at hand and ask for more only at the window's end. A token cut by the end of a
 * window is kept: the next window is appended to the bytes from the token's start.
 */
import type { ByteSource } from "@st-convert/core";
import { Leaf } from "./valueCodecs.js";

const EMPTY = new Uint8Array(0);

/** The bytes at hand of a source range, a cursor into them, and a way to read on. */
export class ByteWindow {
  /** The bytes at hand; `buf[0]` is at absolute offset `base`. */
  buf: Uint8Array = EMPTY;
  base: number;
  /** The cursor, an index into `buf`. */
  i = 0;
  /** Absolute offset of the next byte not yet read from the source. */
  next: number;

  /** The memory `buf` lies at the front of, when windows are read into it again and again. */
  #store: Uint8Array | undefined;
  /** The next window, being read into memory of its own while this one is parsed (see {@link #readAhead}). */
  #ahead: { offset: number; length: number; room: Uint8Array; read: Promise<void> } | undefined;
  /** The memory the window before was read ahead into: the next read ahead goes there. */
  #spare: Uint8Array | undefined;

  constructor(
    readonly source: ByteSource,
    start: number,
    /** Absolute offset where the range ends. */
    readonly end: number,
    readonly windowSize: number,
    /**
     * Read each window into the same memory (where the source can read into memory it is given):
     * the bytes of `buf` then change on the next `more()`, so the caller keeps no view of them.
     * A fresh 2 MiB array per window cost its page faults and, as memory outside the heap, pushed
     * the collector into extra collections.
     */
    readonly reuse = false,
  ) {
    this.base = start;
    this.next = start;
  }

  /** A window that holds all of `[start, start + bytes.byteLength)` already: nothing more to read. */
  static holding(source: ByteSource, start: number, bytes: Uint8Array): ByteWindow {
    const w = new ByteWindow(source, start, start + bytes.byteLength, Math.max(1, bytes.byteLength));
    // A plain Uint8Array view, as more() makes (one array type for the tokenizers' loops).
    w.buf = new Uint8Array(bytes.buffer, bytes.byteOffset, bytes.byteLength);
    w.next = w.end;
    return w;
  }

  /** Absolute offset of the cursor. */
  get position(): number {
    return this.base + this.i;
  }

  /** True when no byte is left beyond `buf`. */
  get drained(): boolean {
    return this.next >= this.end;
  }

  /**
   * Reads the next window and appends it to `buf[keep..]`, which moves to the front (the cursor
   * moves with it). Returns false, changing nothing, when the range is exhausted.
   */
  async more(keep: number = this.i): Promise<boolean> {
    if (this.next >= this.end) return false;
    const length = Math.min(this.windowSize, this.end - this.next);
    const kept = this.buf.length - keep;
    if (this.reuse && this.source.readInto !== undefined) await this.#readIntoStore(keep, kept, length);
    else {
      const fresh = await this.source.read(this.next, length);
      if (kept === 0) {
        // A plain Uint8Array view even when the source returns a Buffer: the tokenizers' loops
        // then see one array type (monomorphic element access is markedly faster in V8).
        this.buf = new Uint8Array(fresh.buffer, fresh.byteOffset, fresh.byteLength);
      } else {
        const joined = new Uint8Array(kept + length);
        joined.set(this.buf.subarray(keep));
        joined.set(fresh, kept);
        this.buf = joined;
      }
    }
    this.next += length;
    this.base = this.next - length - kept;
    this.i -= keep;
    return true;
  }

  /** The kept bytes moved to the front of the store, the next window read in after them. */
  async #readIntoStore(keep: number, kept: number, length: number): Promise<void> {
    const ahead = this.#ahead;
    if (ahead !== undefined) {
      this.#ahead = undefined;
      // Settled before anything else is read into that memory, whether it is used or not.
      await ahead.read;
      if (ahead.offset === this.next && ahead.length === length && kept <= AHEAD_ROOM) {
        // The kept bytes (a token cut at the window's end) go just before the window read ahead.
        const { room } = ahead;
        room.set(this.buf.subarray(keep), AHEAD_ROOM - kept);
        this.#spare = this.#store;
        this.#store = room;
        this.buf = new Uint8Array(room.buffer, room.byteOffset + AHEAD_ROOM - kept, kept + length);
        this.#readAhead(this.next + length);
        return;
      }
    }
    let store = this.#store;
    if (store === undefined || store.byteLength < kept + length) {
      // Room for a token cut at a window's end on top of the window, so that the store is made once.
      const grown = new Uint8Array(Math.max(kept + length, this.windowSize + (this.windowSize >> 3)));
      grown.set(this.buf.subarray(keep));
      store = grown;
      this.#store = grown;
    } else if (kept > 0) {
      // `buf` lies in the store: at its front, or just past the room kept there when it was read ahead.
      const from = this.buf.byteOffset - store.byteOffset + keep;
      store.copyWithin(0, from, from + kept);
    }
    const target = store.subarray(kept, kept + length);
    // A local file is read synchronously: the scan has nothing to do meanwhile, and a hop
    // through Node's thread pool waits for a thread, tens of ms on a busy machine.
    if (this.source.readIntoSync !== undefined) this.source.readIntoSync(this.next, target);
    else await this.source.readInto!(this.next, target);
    this.buf = new Uint8Array(store.buffer, store.byteOffset, kept + length);
    this.#readAhead(this.next + length);
  }

  /**
   * Starts reading the window at `offset` into memory of its own, on Node's thread pool, while the
   * caller parses the one at hand: the copy from the page cache then runs on the other core (a
   * 2 MiB window takes about 0.5 ms to read here, a fifth to a half of its parse). Only for a range
   * with at least {@link AHEAD_FROM} bytes left, read asynchronously where the source can.
   */
  #readAhead(offset: number): void {
    const length = Math.min(this.windowSize, this.end - offset);
    if (length < AHEAD_FROM || this.source.readInto === undefined) return;
    let room = this.#spare;
    if (room === undefined || room.byteLength < AHEAD_ROOM + length) room = new Uint8Array(AHEAD_ROOM + this.windowSize);
    this.#spare = undefined;
    const read = this.source.readInto(offset, room.subarray(AHEAD_ROOM, AHEAD_ROOM + length));
    // A failure is reported when the window is asked for; one never asked for (the caller stopped) is dropped.
    read.catch(() => {});
    this.#ahead = { offset, length, room, read };
  }
}

/** Windows at least this long are read ahead ({@link ByteWindow}'s reuse mode). */
const AHEAD_FROM = 256 * 1024;
/** Bytes kept before a window read ahead, for a token cut at the end of the one before (a number is at most 4,096). */
const AHEAD_ROOM = 8192;

/** Returned by the token scanners when the bytes at hand end inside a token. */
export const NEED_MORE = -1;

/** JSON whitespace: space, tab, line feed, carriage return. */
export function isWhitespace(c: number): boolean {
  return c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09;
}

/** Flags {@link numberEnd} leaves behind about the token it scanned. */
export const numberToken = {
  /** Has a fraction or an exponent. */
  float: false,
  /** Has a non-zero digit before any exponent (so `-0`, `-0.0e5` are not negative). */
  nonZero: false,
  /** Why the token is malformed, when {@link numberEnd} returned {@link BAD_NUMBER}. */
  reason: "",
};

/** Returned by {@link numberEnd} for a malformed number. */
export const BAD_NUMBER = -2;

/**
 * The end of the JSON number token starting at `buf[i]` (`-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?`,
 * followed by a delimiter), {@link NEED_MORE} when `buf` ends inside it and more may come, or
 * {@link BAD_NUMBER}. With `final`, the end of `buf` ends the token.
 */
export function numberEnd(buf: Uint8Array, i: number, final: boolean): number {
  const n = buf.length;
  let j = i;
  let nonZero = false;
  let float = false;
  if (buf[j] === 0x2d) j++;
  if (j >= n) return final ? bad("a lone '-'") : NEED_MORE;
  let c = buf[j]!;
  if (c === 0x30) {
    j++;
  } else if (c >= 0x31 && c <= 0x39) {
    nonZero = true;
    for (j++; j < n && (c = buf[j]!) >= 0x30 && c <= 0x39; j++);
  } else {
    return bad(c === 0x49 ? 'bare -Infinity is not JSON; write the string "-Infinity"' : "a '-' not followed by a digit");
  }
  if (j >= n) return final ? done(j, nonZero, float) : NEED_MORE;
  c = buf[j]!;
  if (c === 0x2e) {
    float = true;
    j++;
    if (j >= n) return final ? bad("no digit after '.'") : NEED_MORE;
    c = buf[j]!;
    if (c < 0x30 || c > 0x39) return bad("no digit after '.'");
    for (; j < n && (c = buf[j]!) >= 0x30 && c <= 0x39; j++) if (c !== 0x30) nonZero = true;
    if (j >= n) return final ? done(j, nonZero, float) : NEED_MORE;
    c = buf[j]!;
  }
  if (c === 0x65 || c === 0x45) {
    float = true;
    j++;
    if (j >= n) return final ? bad("no digit in the exponent") : NEED_MORE;
    c = buf[j]!;
    if (c === 0x2b || c === 0x2d) {
      j++;
      if (j >= n) return final ? bad("no digit in the exponent") : NEED_MORE;
      c = buf[j]!;
    }
    if (c < 0x30 || c > 0x39) return bad("no digit in the exponent");
    for (; j < n && (c = buf[j]!) >= 0x30 && c <= 0x39; j++);
    if (j >= n) return final ? done(j, nonZero, float) : NEED_MORE;
    c = buf[j]!;
  }
  // A number ends at a delimiter; "01", "1x", "1.5.2" are not numbers.
  if (c === 0x2c || c === 0x5d || c === 0x7d || isWhitespace(c)) return done(j, nonZero, float);
  return bad(c >= 0x30 && c <= 0x39 ? "a leading zero" : `'${String.fromCharCode(c)}' inside a number`);
}

function done(j: number, nonZero: boolean, float: boolean): number {
  numberToken.nonZero = nonZero;
  numberToken.float = float;
  return j;
}

function bad(reason: string): number {
  numberToken.reason = reason;
  return BAD_NUMBER;
}

/** True when `buf[i..]` starts with the ASCII `word` (the caller made sure the bytes are there). */
export function startsWith(buf: Uint8Array, i: number, word: string): boolean {
  for (let k = 0; k < word.length; k++) if (buf[i + k] !== word.charCodeAt(k)) return false;
  return true;
}

/** What {@link leafEnd} found: the leaf's kind (`Leaf` flags), or why it is not a leaf. */
export const leafToken = {
  kind: 0,
  /**
   * Set when {@link leafEnd} returns {@link BAD_LEAF}: `number` (see `numberToken.reason`),
   * `string` (not one of the three; `shownEnd` says how far to show it), `unterminated`,
   * `literal`, `null`, `bare` (NaN or Infinity without quotes), `object`, `byte`.
   */
  problem: "",
  shownEnd: 0,
};

/** Returned by {@link leafEnd} for something that is not a leaf of `data`. */
export const BAD_LEAF = -3;

/**
 * The end of the leaf of a `data` array at `buf[i]` (a number, `"NaN"`, `"Infinity"`,
 * `"-Infinity"`, `true` or `false`), with its kind in {@link leafToken}; {@link NEED_MORE} when
 * `buf` ends inside it and more may come (unless `final`); {@link BAD_LEAF} otherwise.
 */
export function leafEnd(buf: Uint8Array, i: number, final: boolean): number {
  const n = buf.length;
  const c = buf[i]!;
  if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
    const end = numberEnd(buf, i, final);
    if (end === NEED_MORE) return NEED_MORE;
    if (end === BAD_NUMBER) return badLeaf("number");
    leafToken.kind = (numberToken.float ? Leaf.Float : Leaf.Integer) | (c === 0x2d && numberToken.nonZero ? Leaf.Negative : 0);
    return end;
  }
  if (c === 0x22) {
    // Nothing longer than `"-Infinity"`.
    let j = i + 1;
    while (j < n && buf[j] !== 0x22 && j - i <= 10) j++;
    if (j - i > 10) return badLeaf("string", j);
    if (j >= n) return final ? badLeaf("unterminated") : NEED_MORE;
    const length = j - i - 1;
    if (length === 3 && startsWith(buf, i + 1, "NaN")) leafToken.kind = Leaf.NaN;
    else if (length === 8 && startsWith(buf, i + 1, "Infinity")) leafToken.kind = Leaf.Infinity;
    else if (length === 9 && startsWith(buf, i + 1, "-Infinity")) leafToken.kind = Leaf.NegativeInfinity;
    else return badLeaf("string", j + 1);
    return j + 1;
  }
  const word = LITERALS.get(c);
  if (word !== undefined) {
    if (i + word.length > n) return final ? badLeaf("literal") : NEED_MORE;
    if (!startsWith(buf, i, word)) return badLeaf("literal");
    if (c === 0x6e) return badLeaf("null");
    if (c === 0x4e || c === 0x49) return badLeaf("bare");
    leafToken.kind = c === 0x74 ? Leaf.True : Leaf.False;
    return i + word.length;
  }
  return badLeaf(c === 0x7b ? "object" : "byte");
}

const LITERALS = new Map<number, string>([
  [0x74, "true"],
  [0x66, "false"],
  [0x6e, "null"],
  [0x4e, "NaN"],
  [0x49, "Infinity"],
]);

function badLeaf(problem: string, shownEnd = 0): number {
  leafToken.problem = problem;
  leafToken.shownEnd = shownEnd;
  return BAD_LEAF;
}
