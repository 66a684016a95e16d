/**
 * The safetensors header parser: JSON as serde_json reads it for the reference's
 * `{__metadata__?: map<str,str>, <name>: TensorInfo}` shape, without a generic JSON tree.
 *
 * `JSON.parse` will not do: it keeps the last of duplicate keys, rounds integers past 2^53, cannot
 * tell `4` from `4.0` (serde refuses floats as dims) and has no depth limit. This parser reproduces
 * serde's accept/refuse decisions (probed against safetensors 0.8.0) and is stricter in one place,
 * where the format's README is: duplicate tensor names and duplicate metadata keys are refused.
 */
import { type Dtype, isDtype } from "./dtypes.js";
import { StConvertError, quoteName } from "./StConvertError.js";
import { createMetadata } from "./Tensor.js";

/** Deepest nesting of `[`/`{` the reference accepts (serde_json's recursion limit of 128 refuses the 128th level). */
export const MAX_HEADER_DEPTH = 127;

/** One tensor as its header entry states it, before the layout is validated. */
export interface RawTensorInfo {
  readonly name: string;
  readonly dtype: Dtype;
  /** Dimensions as u64, exactly as written. */
  readonly shape: readonly bigint[];
  /** `data_offsets`, as u64, relative to the start of the byte buffer. */
  readonly begin: bigint;
  readonly end: bigint;
}

/** A header's content in the order the file lists it. */
export interface ParsedSafetensorsHeader {
  readonly metadata: Record<string, string> | null;
  readonly tensors: readonly RawTensorInfo[];
}

export interface ParseHeaderOptions {
  /** Deepest nesting accepted. Default {@link MAX_HEADER_DEPTH}. */
  maxDepth?: number;
}

const U64_MAX = (1n << 64n) - 1n;
const I64_MIN = -(1n << 63n);

type NumberToken = { kind: "integer"; value: bigint } | { kind: "float"; text: string };

/** A JSON number's longest valid prefix: sign, integer part, fraction, exponent. */
const NUMBER = /(-?)(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?/y;
/** A run of string characters that need no escape handling (no quote, backslash or control character). */
const PLAIN_STRING = /[^"\\\u0000-\u001f]+/y;

/**
 * Parses header text (already checked to be UTF-8) into metadata and tensor entries.
 * @throws StConvertError `InvalidHeaderDeserialization` for anything serde_json would refuse,
 *   `DuplicateKey` for a repeated tensor name or metadata key.
 */
export function parseSafetensorsHeader(text: string, options: ParseHeaderOptions = {}): ParsedSafetensorsHeader {
  return new HeaderParser(text, options.maxDepth ?? MAX_HEADER_DEPTH).parse();
}

class HeaderParser {
  #pos = 0;
  #depth = 0;

  constructor(
    private readonly text: string,
    private readonly maxDepth: number,
  ) {}

  parse(): ParsedSafetensorsHeader {
    let metadata: Record<string, string> | null = null;
    let sawMetadata = false;
    const tensors: RawTensorInfo[] = [];
    const names = new Set<string>();

    const first = this.#peek();
    if (first !== 0x7b /* { */) this.#typeError(first, "struct HashMetadata");
    this.#enter();
    this.#forEachKey((key) => {
      if (key === "__metadata__") {
        if (sawMetadata) this.#fail("duplicate field `__metadata__`");
        sawMetadata = true;
        metadata = this.#metadata();
        return;
      }
      if (names.has(key)) {
        throw this.#error(
          "DuplicateKey",
          `duplicate tensor name ${quoteName(key)} (the format forbids duplicate keys; the reference reader would silently keep the last)`,
        );
      }
      names.add(key);
      tensors.push(this.#tensorInfo(key));
    });
    this.#leave();
    if (this.#peek() !== -1) this.#fail("trailing characters");
    return { metadata, tensors };
  }

  // ---- schema --------------------------------------------------------------------------

  #metadata(): Record<string, string> | null {
    const c = this.#peek();
    if (c === 0x6e /* n */) {
      this.#literal("null");
      return null;
    }
    if (c !== 0x7b) this.#typeError(c, "a map");
    const metadata = createMetadata();
    const seen = new Set<string>();
    this.#enter();
    this.#forEachKey((key) => {
      if (seen.has(key)) {
        throw this.#error("DuplicateKey", `duplicate metadata key ${quoteName(key)} (the format forbids duplicate keys)`);
      }
      seen.add(key);
      const v = this.#peek();
      if (v !== 0x22 /* " */) this.#typeError(v, "a string");
      metadata[key] = this.#string();
    });
    this.#leave();
    return metadata;
  }

  #tensorInfo(name: string): RawTensorInfo {
    const c = this.#peek();
    let dtype: Dtype | undefined;
    let shape: bigint[] | undefined;
    let offsets: [bigint, bigint] | undefined;
    if (c === 0x5b /* [ */) {
      // serde builds a struct from a sequence of its fields in declaration order.
      this.#enter();
      const at = this.#pos;
      this.#pos++;
      const fields = [() => (dtype = this.#dtype()), () => (shape = this.#shape()), () => (offsets = this.#offsets())];
      let count = 0;
      if (this.#peek() === 0x5d /* ] */) this.#pos++;
      else {
        for (;;) {
          const field = fields[count];
          if (field === undefined) this.#fail(`invalid length ${count + 1}, expected 3 elements in sequence`);
          field();
          count++;
          if (this.#commaOr(0x5d, "array")) break;
        }
      }
      if (count < 3) this.#fail(`invalid length ${count}, expected struct TensorInfo with 3 elements`, at);
      this.#leave();
    } else if (c === 0x7b) {
      this.#enter();
      this.#forEachKey((key) => {
        switch (key) {
          case "dtype":
            if (dtype !== undefined) this.#fail("duplicate field `dtype`");
            dtype = this.#dtype();
            return;
          case "shape":
            if (shape !== undefined) this.#fail("duplicate field `shape`");
            shape = this.#shape();
            return;
          case "data_offsets":
            if (offsets !== undefined) this.#fail("duplicate field `data_offsets`");
            offsets = this.#offsets();
            return;
          default:
            // Unknown fields are ignored by the reference, but must still be valid JSON within the depth limit.
            this.#skipValue();
        }
      });
      this.#leave();
      if (dtype === undefined) this.#fail("missing field `dtype`");
      if (shape === undefined) this.#fail("missing field `shape`");
      if (offsets === undefined) this.#fail("missing field `data_offsets`");
    } else {
      this.#typeError(c, "struct TensorInfo");
    }
    // The branches above either assigned all three or threw.
    return { name, dtype: dtype!, shape: shape!, begin: offsets![0], end: offsets![1] };
  }

  #dtype(): Dtype {
    const c = this.#peek();
    if (c === 0x22) return this.#dtypeName();
    if (c !== 0x7b) this.#typeError(c, "string or map");
    // serde's externally tagged form of a unit variant: {"F32": null}.
    this.#enter();
    this.#pos++;
    if (this.#peek() !== 0x22) this.#fail("invalid value: map, expected map with a single key");
    const dtype = this.#dtypeName();
    this.#colon();
    const v = this.#peek();
    if (v !== 0x6e) this.#typeError(v, "unit");
    this.#literal("null");
    if (this.#peek() !== 0x7d /* } */) this.#fail("invalid value: map, expected map with a single key");
    this.#pos++;
    this.#leave();
    return dtype;
  }

  #dtypeName(): Dtype {
    const at = this.#pos;
    const name = this.#string();
    if (!isDtype(name)) this.#fail(`unknown variant ${quoteName(name)}, expected one of the 22 safetensors dtypes`, at);
    return name;
  }

  #shape(): bigint[] {
    const c = this.#peek();
    if (c !== 0x5b) this.#typeError(c, "a sequence");
    const dims: bigint[] = [];
    this.#enter();
    this.#pos++;
    if (this.#peek() === 0x5d) this.#pos++;
    else {
      do dims.push(this.#usize());
      while (!this.#commaOr(0x5d, "array"));
    }
    this.#leave();
    return dims;
  }

  #offsets(): [bigint, bigint] {
    const c = this.#peek();
    if (c !== 0x5b) this.#typeError(c, "a tuple of size 2");
    this.#enter();
    const at = this.#pos;
    this.#pos++;
    const values: bigint[] = [];
    if (this.#peek() === 0x5d) this.#pos++;
    else {
      do {
        if (values.length === 2) this.#fail("invalid length 3, expected 2 elements in sequence");
        values.push(this.#usize());
      } while (!this.#commaOr(0x5d, "array"));
    }
    if (values.length < 2) this.#fail(`invalid length ${values.length}, expected a tuple of size 2`, at);
    this.#leave();
    return [values[0]!, values[1]!];
  }

  #usize(): bigint {
    const c = this.#peek();
    if (c !== 0x2d /* - */ && !(c >= 0x30 && c <= 0x39)) this.#typeError(c, "usize");
    const at = this.#pos;
    const token = this.#number();
    if (token.kind === "float") this.#fail(`invalid type: floating point \`${token.text}\`, expected usize`, at);
    if (token.value < 0n) this.#fail(`invalid value: integer \`${token.value}\`, expected usize`, at);
    return token.value;
  }

  // ---- JSON lexing -----------------------------------------------------------------------

  /** Calls `onKey` for each key of the object at the cursor, with the cursor on its value. */
  #forEachKey(onKey: (key: string) => void): void {
    this.#pos++; // {
    if (this.#peek() === 0x7d) {
      this.#pos++;
      return;
    }
    for (;;) {
      const c = this.#peek();
      if (c !== 0x22) {
        if (c === -1) this.#fail("EOF while parsing an object");
        this.#fail("key must be a string");
      }
      const key = this.#string();
      this.#colon();
      onKey(key);
      if (this.#commaOr(0x7d, "object")) return;
    }
  }

  /** After a value: consumes `,` (returns false) or the closing bracket (returns true). */
  #commaOr(close: number, what: "array" | "object"): boolean {
    const c = this.#peek();
    if (c === 0x2c /* , */) {
      this.#pos++;
      const next = this.#peek();
      if (next === close) this.#fail("trailing comma");
      return false;
    }
    if (c === close) {
      this.#pos++;
      return true;
    }
    if (c === -1) this.#fail(`EOF while parsing ${what === "array" ? "a list" : "an object"}`);
    this.#fail(`expected \`,\` or \`${what === "array" ? "]" : "}"}\``);
  }

  #colon(): void {
    const c = this.#peek();
    if (c !== 0x3a /* : */) this.#fail(c === -1 ? "EOF while parsing an object" : "expected `:`");
    this.#pos++;
  }

  #skipValue(): void {
    const c = this.#peek();
    switch (c) {
      case 0x22:
        this.#string();
        return;
      case 0x7b:
        this.#enter();
        this.#forEachKey(() => this.#skipValue());
        this.#leave();
        return;
      case 0x5b:
        this.#enter();
        this.#pos++;
        if (this.#peek() === 0x5d) this.#pos++;
        else {
          do this.#skipValue();
          while (!this.#commaOr(0x5d, "array"));
        }
        this.#leave();
        return;
      case 0x74:
        this.#literal("true");
        return;
      case 0x66:
        this.#literal("false");
        return;
      case 0x6e:
        this.#literal("null");
        return;
      default:
        if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
          this.#number();
          return;
        }
        this.#fail(c === -1 ? "EOF while parsing a value" : "expected value");
    }
  }

  #literal(word: string): void {
    if (!this.text.startsWith(word, this.#pos)) this.#fail("expected ident");
    this.#pos += word.length;
  }

  #number(): NumberToken {
    const start = this.#pos;
    // A sticky regex is native code: much faster than a character loop while the JIT is cold,
    // which is all of a CLI run.
    NUMBER.lastIndex = start;
    const m = NUMBER.exec(this.text);
    if (m === null || m[0] === "-") this.#fail("invalid number", start + (m?.[0].length ?? 0));
    const [raw, sign, int, frac, exp] = m as unknown as [string, string, string, string | undefined, string | undefined];
    const after = this.text.charCodeAt(start + raw.length);
    // serde refuses leading zeros (`01`) and a `.` or exponent without digits (`1.`, `1e`).
    if (isDigit(after) || after === 0x2e || after === 0x65 || after === 0x45) this.#fail("invalid number", start + raw.length);
    this.#pos = start + raw.length;
    if (frac === undefined && exp === undefined) {
      const magnitude = BigInt(int);
      // serde_json: non-negative integers up to u64::MAX and negative ones down to i64::MIN are
      // integers; `-0` and anything beyond those ranges become f64.
      if (sign === "" && magnitude <= U64_MAX) return { kind: "integer", value: magnitude };
      if (sign === "-" && magnitude !== 0n && -magnitude >= I64_MIN) return { kind: "integer", value: -magnitude };
    }
    return { kind: "float", text: formatFloat(Number(raw)) };
  }

  #string(): string {
    const text = this.text;
    const start = this.#pos + 1; // after the opening quote
    // Fast path, the common case: no escape and no control character before the closing quote.
    const close = text.indexOf('"', start);
    if (close !== -1) {
      PLAIN_STRING.lastIndex = start;
      if (PLAIN_STRING.test(text) && PLAIN_STRING.lastIndex === close) {
        this.#pos = close + 1;
        return text.slice(start, close);
      }
      if (close === start) {
        this.#pos = close + 1;
        return "";
      }
    }
    return this.#escapedString();
  }

  #escapedString(): string {
    const text = this.text;
    let i = this.#pos + 1; // opening quote
    let out = "";
    let runStart = i;
    for (;;) {
      const c = text.charCodeAt(i);
      if (Number.isNaN(c)) this.#fail("EOF while parsing a string", i);
      if (c === 0x22) {
        out += text.slice(runStart, i);
        this.#pos = i + 1;
        return out;
      }
      if (c < 0x20) this.#fail("control character (\\u0000-\\u001F) found while parsing a string", i);
      if (c !== 0x5c /* \ */) {
        i++;
        continue;
      }
      out += text.slice(runStart, i);
      const esc = text.charCodeAt(i + 1);
      i += 2;
      switch (esc) {
        case 0x22:
          out += '"';
          break;
        case 0x5c:
          out += "\\";
          break;
        case 0x2f:
          out += "/";
          break;
        case 0x62:
          out += "\b";
          break;
        case 0x66:
          out += "\f";
          break;
        case 0x6e:
          out += "\n";
          break;
        case 0x72:
          out += "\r";
          break;
        case 0x74:
          out += "\t";
          break;
        case 0x75: {
          const unit = this.#hex4(i);
          i += 4;
          if (unit >= 0xdc00 && unit <= 0xdfff) this.#fail("lone leading surrogate in hex escape", i);
          if (unit >= 0xd800 && unit <= 0xdbff) {
            if (text.charCodeAt(i) !== 0x5c || text.charCodeAt(i + 1) !== 0x75) this.#fail("unexpected end of hex escape", i);
            const low = this.#hex4(i + 2);
            i += 6;
            if (low < 0xdc00 || low > 0xdfff) this.#fail("lone leading surrogate in hex escape", i);
            out += String.fromCharCode(unit, low);
          } else {
            out += String.fromCharCode(unit);
          }
          break;
        }
        default:
          this.#fail(Number.isNaN(esc) ? "EOF while parsing a string" : "invalid escape", i - 1);
      }
      runStart = i;
    }
  }

  #hex4(at: number): number {
    const digits = this.text.slice(at, at + 4);
    if (!/^[0-9a-fA-F]{4}$/.test(digits)) this.#fail("invalid escape", at);
    return Number.parseInt(digits, 16);
  }

  /** The next non-whitespace character code, -1 at the end; the cursor moves past the whitespace. */
  #peek(): number {
    const text = this.text;
    let i = this.#pos;
    for (;;) {
      const c = text.charCodeAt(i);
      // JSON whitespace only: a form feed or NUL is not padding.
      if (c === 0x20 || c === 0x0a || c === 0x0d || c === 0x09) i++;
      else {
        this.#pos = i;
        return Number.isNaN(c) ? -1 : c;
      }
    }
  }

  #enter(): void {
    if (++this.#depth > this.maxDepth) this.#fail("recursion limit exceeded");
  }

  #leave(): void {
    this.#depth--;
  }

  #typeError(c: number, expected: string): never {
    const found = c === 0x7b ? "map" : c === 0x5b ? "sequence" : c === 0x22 ? "string" : c === 0x6e ? "null" : c === 0x74 || c === 0x66 ? "boolean" : undefined;
    if (found !== undefined) this.#fail(`invalid type: ${found}, expected ${expected}`);
    if (c === 0x2d || (c >= 0x30 && c <= 0x39)) {
      const at = this.#pos;
      const token = this.#number();
      const shown = token.kind === "integer" ? `integer \`${token.value}\`` : `floating point \`${token.text}\``;
      this.#fail(`invalid type: ${shown}, expected ${expected}`, at);
    }
    this.#fail(c === -1 ? "EOF while parsing a value" : "expected value");
  }

  #fail(rule: string, at = this.#pos): never {
    throw this.#error("InvalidHeaderDeserialization", `invalid JSON in header: ${rule}`, at);
  }

  #error(code: "InvalidHeaderDeserialization" | "DuplicateKey", rule: string, at = this.#pos): StConvertError {
    const { line, column } = lineAndColumn(this.text, at);
    return new StConvertError(code, `${rule} at line ${line} column ${column}`);
  }
}

function isDigit(c: number): boolean {
  return c >= 0x30 && c <= 0x39;
}

/** Rust's `{}` display of an f64 (`4.0`, `-0.0`, `1e20`), close enough to read like the reference. */
function formatFloat(value: number): string {
  if (Number.isInteger(value) && Math.abs(value) < 1e16) return Object.is(value, -0) ? "-0.0" : `${value}.0`;
  return String(value);
}

function lineAndColumn(text: string, at: number): { line: number; column: number } {
  let line = 1;
  let lineStart = 0;
  const end = Math.min(at, text.length);
  for (let i = text.indexOf("\n"); i !== -1 && i < end; i = text.indexOf("\n", i + 1)) {
    line++;
    lineStart = i + 1;
  }
  return { line, column: end - lineStart + 1 };
}
