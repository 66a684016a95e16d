/**
 * A parser for the Python literals that `ast.literal_eval` accepts, which is how numpy reads an
 * npy header (`numpy/lib/_format_impl.py` `_read_array_header`). Nothing is ever evaluated:
 * names other than `True`, `False` and `None`, calls, operators and f-strings are refused, as
 * `literal_eval` refuses them ("malformed node or string").
 *
 * Grammar (Python 3.11 lexical rules, restricted to what a literal can contain): dicts, sets,
 * lists and tuples (a trailing comma allowed, a bare top-level tuple too); str and bytes literals
 * in both quote styles, triple-quoted, with `r`/`u`/`b` prefixes, escapes and implicit
 * concatenation; ints (decimal, `0x`, `0o`, `0b`, underscores) of any size; floats and imaginary
 * numbers (kept as text: a header never needs their value); unary `+`/`-` on a number and
 * `real ± imaginary`, the only arithmetic `literal_eval` allows; comments, newlines inside
 * brackets and backslash continuations.
 */
import { StConvertError } from "@st-convert/core";
import { CHARACTER_NAMES } from "./characterNames.js";

/** A value of the literal language. Floats and complex numbers are kept as their source text. */
export type PyValue =
  | { readonly kind: "str"; readonly value: string }
  /** Bytes, as a string of char codes 0–255. */
  | { readonly kind: "bytes"; readonly value: string }
  | { readonly kind: "int"; readonly value: bigint }
  | { readonly kind: "float"; readonly text: string }
  | { readonly kind: "complex"; readonly text: string }
  | { readonly kind: "bool"; readonly value: boolean }
  | { readonly kind: "none" }
  | { readonly kind: "ellipsis" }
  | { readonly kind: "tuple" | "list" | "set"; readonly items: readonly PyValue[] }
  | { readonly kind: "dict"; readonly entries: readonly (readonly [PyValue, PyValue])[] };

/**
 * Deepest bracket and unary-sign nesting accepted; CPython's tokenizer stops at 200 nested
 * parentheses ("too many nested parentheses"), and the bound keeps our recursion shallow.
 */
export const MAX_LITERAL_DEPTH = 200;

/** Options of {@link parsePythonLiteral}. */
export interface ParsePythonLiteralOptions {
  /**
   * Drop a name `L` that directly follows a number, as numpy's `_filter_header` does when it
   * retries a version 1.0/2.0 header written by Python 2 (`(2L, 3L)`). Default false.
   */
  allowLongSuffix?: boolean;
}

type Token =
  | { readonly type: "num"; readonly pos: number; readonly value: PyValue }
  | { readonly type: "str"; readonly pos: number; readonly bytes: boolean; readonly fstring: boolean; readonly value: string }
  | { readonly type: "name"; readonly pos: number; readonly value: string }
  | { readonly type: "op"; readonly pos: number; readonly value: string }
  | { readonly type: "end"; readonly pos: number };

/** How a parsed expression was written: `literal_eval` accepts signs and `+`/`-` only around number literals. */
type Form = "number" | "signed" | "other";

interface Node {
  readonly value: PyValue;
  readonly form: Form;
}

const HEX = /0[xX](?:_?[0-9a-fA-F])+/y;
const OCT = /0[oO](?:_?[0-7])+/y;
const BIN = /0[bB](?:_?[01])+/y;
const DECIMAL = /(?:[0-9](?:_?[0-9])*(?:\.(?:[0-9](?:_?[0-9])*)?)?|\.[0-9](?:_?[0-9])*)(?:[eE][+-]?[0-9](?:_?[0-9])*)?[jJ]?/y;
const STRING_START = /([rRbBuUfF]{1,2})?('''|"""|'|")/y;
const NAME = /[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*/y;
const STRING_PREFIXES = new Set(["", "r", "u", "b", "br", "rb", "f", "fr", "rf"]);
const SIMPLE_ESCAPES: Readonly<Record<string, string>> = {
  "\\": "\\",
  "'": "'",
  '"': '"',
  a: "\x07",
  b: "\b",
  f: "\f",
  n: "\n",
  r: "\r",
  t: "\t",
  v: "\v",
};

/**
 * Parses `text` as one Python literal expression.
 * @throws StConvertError `InvalidHeader` for a syntax error, a non-literal (a name, a call, an
 *   operator, an f-string), an unhashable dict key or set item, or nesting past {@link MAX_LITERAL_DEPTH}.
 */
export function parsePythonLiteral(text: string, options: ParsePythonLiteralOptions = {}): PyValue {
  return new LiteralParser(text, options.allowLongSuffix === true).parse();
}

class LiteralParser {
  readonly #text: string;
  readonly #dropLongSuffix: boolean;
  #at = 0;
  /** Bracket nesting of the tokenizer: newlines inside brackets are whitespace. */
  #brackets = 0;
  #emitted = false;
  #lineEnded = false;
  #previous: Token | undefined;
  #previousEnd = 0;
  #token: Token;
  #depth = 0;

  constructor(text: string, dropLongSuffix: boolean) {
    this.#text = text;
    this.#dropLongSuffix = dropLongSuffix;
    const nul = text.indexOf("\0");
    if (nul >= 0) this.#fail("source code cannot contain null bytes", nul);
    this.#token = this.#next();
  }

  parse(): PyValue {
    if (this.#token.type === "end") this.#fail("unexpected end of header: no expression", this.#token.pos);
    const value = this.#expressionList();
    const after = this.#current();
    if (after.type !== "end") this.#fail(`unexpected ${describe(after)}`, after.pos);
    this.#checkLastLine();
    return value.value;
  }

  /**
   * Python's tokenizer refuses a last line, after a newline that ends the expression, that holds
   * only blanks reaching past column 0 with no newline of its own ("unexpected indent"): a form
   * feed sets the column back to 0, a tab moves it to the next multiple of 8, a comment or a line
   * continuation before the newline makes the line no new line at all.
   */
  #checkLastLine(): void {
    let text = this.#text;
    // numpy's Python 2 clean-up (_filter_header) re-joins the text from its "\n"-ended lines, and
    // so drops blanks after the last "\n" (not after a lone "\r").
    if (this.#dropLongSuffix) {
      const last = text.lastIndexOf("\n");
      if (last >= 0 && /^[ \t\f]*$/.test(text.slice(last + 1))) text = text.slice(0, last + 1);
    }
    const newline = Math.max(text.lastIndexOf("\n"), text.lastIndexOf("\r"));
    if (newline < 0 || newline === text.length - 1) return;
    const lineStart = text[newline] === "\n" && text[newline - 1] === "\r" ? newline - 1 : newline;
    if (text[lineStart - 1] === "\\") return;
    let column = 0;
    for (let i = newline + 1; i < text.length; i++) {
      const c = text[i];
      if (c === " ") column++;
      else if (c === "\t") column = (Math.floor(column / 8) + 1) * 8;
      else if (c === "\f") column = 0;
      else return;
    }
    if (column > 0) this.#fail("unexpected indent", newline + 1);
  }

  #fail(reason: string, pos: number): never {
    throw new StConvertError("InvalidHeader", `cannot parse header: ${reason} at character ${pos}`);
  }

  /** The lookahead token, re-read (TypeScript would otherwise keep an earlier narrowing of the field). */
  #current(): Token {
    return this.#token;
  }

  #isOp(value: string): boolean {
    return this.#token.type === "op" && this.#token.value === value;
  }

  #expect(value: string): void {
    if (!this.#isOp(value)) this.#fail(`expected '${value}', found ${describe(this.#token)}`, this.#token.pos);
    this.#advance();
  }

  #advance(): void {
    this.#token = this.#next();
  }

  #enter(pos: number): void {
    if (++this.#depth > MAX_LITERAL_DEPTH) this.#fail(`more than ${MAX_LITERAL_DEPTH} nested brackets or signs`, pos);
  }

  /** `a` or `a, b, …` (a bare tuple), as the top level of `eval` mode allows. */
  #expressionList(): Node {
    const first = this.#expression();
    if (!this.#isOp(",")) return first;
    const items = [first.value];
    while (this.#isOp(",")) {
      this.#advance();
      if (!this.#startsExpression()) break;
      items.push(this.#expression().value);
    }
    return { value: { kind: "tuple", items }, form: "other" };
  }

  #startsExpression(): boolean {
    const t = this.#token;
    if (t.type === "end") return false;
    if (t.type !== "op") return true;
    return ["(", "[", "{", "+", "-", "..."].includes(t.value);
  }

  /** A unary expression, or `real ± imaginary`, the only binary operation `literal_eval` allows. */
  #expression(): Node {
    const start = this.#token.pos;
    let left = this.#unary();
    while (this.#isOp("+") || this.#isOp("-")) {
      const minus = this.#isOp("-");
      this.#advance();
      const right = this.#unary();
      const realLeft = (left.form === "number" || left.form === "signed") && (left.value.kind === "int" || left.value.kind === "float");
      if (!realLeft || right.form !== "number" || right.value.kind !== "complex") {
        this.#fail("arithmetic is not a literal (only real ± imaginary is)", start);
      }
      left = { value: { kind: "complex", text: `${numberText(left.value)}${minus ? "-" : "+"}${numberText(right.value)}` }, form: "other" };
    }
    return left;
  }

  #unary(): Node {
    if (!this.#isOp("+") && !this.#isOp("-")) return this.#atom();
    const minus = this.#isOp("-");
    const pos = this.#token.pos;
    this.#advance();
    this.#enter(pos);
    const operand = this.#unary();
    this.#depth--;
    if (operand.form !== "number") this.#fail("a sign applies only to a number literal", pos);
    const v = operand.value;
    let value: PyValue;
    if (v.kind === "int") value = { kind: "int", value: minus ? -v.value : v.value };
    else if (v.kind === "float" || v.kind === "complex") value = { kind: v.kind, text: minus ? `-${v.text}` : v.text };
    else return this.#fail("a sign applies only to a number literal", pos);
    return { value, form: "signed" };
  }

  #atom(): Node {
    const t = this.#token;
    switch (t.type) {
      case "num":
        this.#advance();
        return { value: t.value, form: "number" };
      case "str":
        return this.#strings();
      case "name":
        this.#advance();
        if (t.value === "True" || t.value === "False") return { value: { kind: "bool", value: t.value === "True" }, form: "other" };
        if (t.value === "None") return { value: { kind: "none" }, form: "other" };
        return this.#fail(`the name ${JSON.stringify(t.value)} is not a literal (nothing in a header is evaluated)`, t.pos);
      case "end":
        return this.#fail("unexpected end of header", t.pos);
      case "op":
        break;
    }
    switch (t.value) {
      case "...":
        this.#advance();
        return { value: { kind: "ellipsis" }, form: "other" };
      case "(":
        return this.#parenthesized();
      case "[":
        return this.#list();
      case "{":
        return this.#dictOrSet();
      default:
        return this.#fail(`unexpected ${describe(t)}`, t.pos);
    }
  }

  /** Adjacent string literals concatenate; str and bytes do not mix. */
  #strings(): Node {
    const first = this.#token as Extract<Token, { type: "str" }>;
    let value = "";
    let fstring = false;
    while (this.#token.type === "str") {
      if (this.#token.bytes !== first.bytes) this.#fail("cannot mix bytes and nonbytes literals", this.#token.pos);
      fstring ||= this.#token.fstring;
      value += this.#token.value;
      this.#advance();
    }
    if (fstring) this.#fail("an f-string is not a literal", first.pos);
    return { value: first.bytes ? { kind: "bytes", value } : { kind: "str", value }, form: "other" };
  }

  /** An opening bracket, what `body` parses, and `close`: one level of nesting. */
  #bracketed(close: string, body: () => Node): Node {
    this.#enter(this.#token.pos);
    this.#advance();
    const node = body();
    this.#expect(close);
    this.#depth--;
    return node;
  }

  #parenthesized(): Node {
    return this.#bracketed(")", () => {
      if (this.#isOp(")")) return { value: { kind: "tuple", items: [] }, form: "other" };
      const first = this.#expression();
      // Parentheses make no node: `(1)` is the literal 1, `-(1)` a signed literal.
      if (!this.#isOp(",")) return first;
      return { value: { kind: "tuple", items: [first.value, ...this.#rest(")", () => this.#expression().value)] }, form: "other" };
    });
  }

  #list(): Node {
    return this.#bracketed("]", () => ({ value: { kind: "list", items: this.#items("]", () => this.#expression().value) }, form: "other" }));
  }

  /** Comma-separated items up to `close`, a trailing comma allowed. */
  #items<T>(close: string, item: () => T): T[] {
    const items: T[] = [];
    while (!this.#isOp(close)) {
      items.push(item());
      if (!this.#isOp(",")) break;
      this.#advance();
    }
    return items;
  }

  /** After a first item: `, item, …` up to `close`, or nothing when no comma follows it. */
  #rest<T>(close: string, item: () => T): T[] {
    if (!this.#isOp(",")) return [];
    this.#advance();
    return this.#items(close, item);
  }

  /** `{}` is a dict; after the first item, a `:` tells a dict from a set. */
  #dictOrSet(): Node {
    return this.#bracketed("}", () => {
      if (this.#isOp("}")) return { value: { kind: "dict", entries: [] }, form: "other" };
      const firstPos = this.#token.pos;
      const first = this.#expression().value;
      if (this.#isOp(":")) {
        const entries = [this.#entry(first, firstPos), ...this.#rest("}", () => this.#entry())];
        return { value: { kind: "dict", entries }, form: "other" };
      }
      this.#checkHashable(first, firstPos);
      return { value: { kind: "set", items: [first, ...this.#rest("}", () => this.#hashable())] }, form: "other" };
    });
  }

  /**
   * `key: value`, the key parsed here unless given (with its position); the key is checked once
   * its value is parsed, so that a broken value is reported first.
   */
  #entry(key?: PyValue, keyPos = this.#token.pos): readonly [PyValue, PyValue] {
    const k = key ?? this.#expression().value;
    this.#expect(":");
    const value = this.#expression().value;
    this.#checkHashable(k, keyPos);
    return [k, value];
  }

  /** A set item, checked as soon as it is parsed. */
  #hashable(): PyValue {
    const pos = this.#token.pos;
    const item = this.#expression().value;
    this.#checkHashable(item, pos);
    return item;
  }

  /** Python refuses a list, dict or set (or a tuple holding one) as a dict key or set item. */
  #checkHashable(value: PyValue, pos: number): void {
    if (value.kind === "list" || value.kind === "dict" || value.kind === "set") this.#fail(`unhashable ${value.kind} as a dict key or set item`, pos);
    if (value.kind === "tuple") for (const item of value.items) this.#checkHashable(item, pos);
  }

  // ----- tokenizer -----

  #next(): Token {
    for (;;) {
      const token = this.#lex();
      // _filter_header drops a NAME `L` right after a NUMBER token; a comment or newline between
      // them would be a token of its own, so only spaces may separate them.
      if (
        this.#dropLongSuffix &&
        token.type === "name" &&
        token.value === "L" &&
        this.#previous?.type === "num" &&
        !/[#\n\r]/.test(this.#text.slice(this.#previousEnd, token.pos))
      ) {
        continue;
      }
      this.#previous = token;
      this.#previousEnd = this.#at;
      return token;
    }
  }

  #lex(): Token {
    this.#skipSpace();
    const text = this.#text;
    const pos = this.#at;
    if (pos >= text.length) return { type: "end", pos };
    if (this.#lineEnded) this.#fail("content after the end of the expression", pos);
    const token = this.#lexToken(pos);
    this.#emitted = true;
    return token;
  }

  #lexToken(pos: number): Token {
    const text = this.#text;
    const c = text[pos]!;
    if ((c >= "0" && c <= "9") || (c === "." && /[0-9]/.test(text[pos + 1] ?? ""))) return this.#number(pos);
    STRING_START.lastIndex = pos;
    const quote = STRING_START.exec(text);
    if (quote !== null && STRING_PREFIXES.has((quote[1] ?? "").toLowerCase())) return this.#string(pos, (quote[1] ?? "").toLowerCase(), quote[2]!);
    NAME.lastIndex = pos;
    const name = NAME.exec(text);
    if (name !== null) {
      this.#at = NAME.lastIndex;
      return { type: "name", pos, value: name[0] };
    }
    if (text.startsWith("...", pos)) {
      this.#at = pos + 3;
      return { type: "op", pos, value: "..." };
    }
    if ("([{".includes(c)) this.#brackets++;
    if (")]}".includes(c)) this.#brackets = Math.max(0, this.#brackets - 1);
    this.#at = pos + 1;
    return { type: "op", pos, value: c };
  }

  #skipSpace(): void {
    const text = this.#text;
    while (this.#at < text.length) {
      const c = text[this.#at]!;
      if (c === " " || c === "\t" || c === "\f") {
        this.#at++;
      } else if (c === "\n" || c === "\r") {
        // A newline outside brackets ends the expression (eval mode); blank lines before it do not.
        if (this.#brackets === 0 && this.#emitted) this.#lineEnded = true;
        this.#at++;
      } else if (c === "#") {
        while (this.#at < text.length && text[this.#at] !== "\n" && text[this.#at] !== "\r") this.#at++;
      } else if (c === "\\") {
        const after = text[this.#at + 1];
        if (after !== "\n" && after !== "\r") this.#fail("unexpected character after line continuation character", this.#at);
        this.#at += text.startsWith("\r\n", this.#at + 1) ? 3 : 2;
        if (this.#at >= text.length) this.#fail("unexpected end of header after a line continuation", this.#at);
      } else {
        return;
      }
    }
  }

  #number(pos: number): Token {
    const text = this.#text;
    for (const pattern of [HEX, OCT, BIN]) {
      pattern.lastIndex = pos;
      const m = pattern.exec(text);
      if (m !== null) {
        this.#at = pattern.lastIndex;
        return { type: "num", pos, value: { kind: "int", value: BigInt(m[0].replaceAll("_", "")) } };
      }
    }
    DECIMAL.lastIndex = pos;
    const m = DECIMAL.exec(text)!;
    const literal = m[0];
    this.#at = DECIMAL.lastIndex;
    if (/[jJ]$/.test(literal)) return { type: "num", pos, value: { kind: "complex", text: literal } };
    if (/[.eE]/.test(literal)) return { type: "num", pos, value: { kind: "float", text: literal } };
    const digits = literal.replaceAll("_", "");
    if (digits.length > 1 && digits.startsWith("0") && /[1-9]/.test(digits)) {
      this.#fail("leading zeros in decimal integer literals are not permitted", pos);
    }
    return { type: "num", pos, value: { kind: "int", value: BigInt(digits) } };
  }

  #string(pos: number, prefix: string, quote: string): Token {
    const text = this.#text;
    const raw = prefix.includes("r");
    const bytes = prefix.includes("b");
    const triple = quote.length === 3;
    let at = pos + prefix.length + quote.length;
    let value = "";
    for (;;) {
      if (at >= text.length) this.#fail("unterminated string literal", pos);
      if (text.startsWith(quote, at)) {
        at += quote.length;
        break;
      }
      const c = text[at]!;
      if ((c === "\n" || c === "\r") && !triple) this.#fail("unterminated string literal", pos);
      if (c !== "\\") {
        if (bytes && c.charCodeAt(0) > 0x7f) this.#fail("bytes can only contain ASCII literal characters", at);
        value += c;
        at++;
        continue;
      }
      const next = text[at + 1];
      if (next === undefined) this.#fail("unterminated string literal", pos);
      if (raw) {
        // A raw string keeps the backslash, which still stops the next character from closing it.
        value += c + next;
        at += 2;
        continue;
      }
      const escaped = this.#escape(at, bytes);
      value += escaped.value;
      at = escaped.end;
    }
    this.#at = at;
    return { type: "str", pos, bytes, fstring: prefix.includes("f"), value };
  }

  /** The escape sequence at `at` (which holds the backslash). */
  #escape(at: number, bytes: boolean): { value: string; end: number } {
    const text = this.#text;
    const e = text[at + 1]!;
    if (e === "\n") return { value: "", end: at + 2 };
    if (e === "\r") return { value: "", end: text[at + 2] === "\n" ? at + 3 : at + 2 };
    const simple = SIMPLE_ESCAPES[e];
    if (simple !== undefined) return { value: simple, end: at + 2 };
    if (e >= "0" && e <= "7") {
      const digits = /^[0-7]{1,3}/.exec(text.slice(at + 1, at + 4))![0];
      // Python 3.11 keeps the low 8 bits of a bytes escape past \377 (with a DeprecationWarning).
      const code = parseInt(digits, 8);
      return { value: String.fromCharCode(bytes ? code & 0xff : code), end: at + 1 + digits.length };
    }
    const hexLength = e === "x" ? 2 : !bytes && e === "u" ? 4 : !bytes && e === "U" ? 8 : 0;
    if (hexLength > 0) {
      const digits = text.slice(at + 2, at + 2 + hexLength);
      if (!new RegExp(`^[0-9a-fA-F]{${hexLength}}$`).test(digits)) this.#fail(`truncated \\${e} escape`, at);
      const code = parseInt(digits, 16);
      if (code > 0x10ffff) this.#fail("illegal Unicode character in a \\U escape", at);
      return { value: String.fromCodePoint(code), end: at + 2 + hexLength };
    }
    if (!bytes && e === "N") return this.#namedEscape(at);
    // An unknown escape keeps its backslash (Python warns, then does the same).
    return { value: `\\${e}`, end: at + 2 };
  }

  /**
   * `\N{name}` at `at`: a Unicode character by name, compared in upper case as CPython does.
   * Names outside {@link CHARACTER_NAMES} (ASCII, µ, μ) are refused: no header key or dtype string
   * st-convert reads can hold another character.
   */
  #namedEscape(at: number): { value: string; end: number } {
    const text = this.#text;
    if (text[at + 2] !== "{") this.#fail("malformed \\N character escape", at);
    let close = at + 3;
    // A name never holds a quote, a backslash or a line end; meeting one means no name here.
    while (close < text.length && !"}'\"\\\n\r".includes(text[close]!)) close++;
    if (text[close] !== "}" || close === at + 3) this.#fail("malformed \\N character escape", at);
    const name = text.slice(at + 3, close);
    const code = CHARACTER_NAMES.get(name.replace(/[a-z]+/g, (letters) => letters.toUpperCase()));
    if (code === undefined) {
      this.#fail(
        `\\N{${name.length > 60 ? `${name.slice(0, 60)}…` : name}} is not the name of an ASCII character (nor of µ or μ); no header key or dtype string holds another`,
        at,
      );
    }
    return { value: String.fromCodePoint(code!), end: close + 1 };
  }
}

function numberText(value: PyValue): string {
  if (value.kind === "int") return value.value.toString();
  if (value.kind === "float" || value.kind === "complex") return value.text;
  return "";
}

function describe(token: Token): string {
  switch (token.type) {
    case "end":
      return "end of header";
    case "num":
      return "number";
    case "str":
      return "string";
    case "name":
      return `name ${JSON.stringify(token.value)}`;
    case "op":
      return `'${token.value}'`;
  }
}
