/**
 * JSON text as tokens with their positions, for mutators that edit a document token by token
 * (a safetensors header, st-convert's JSON form) without re-serializing it: duplicate keys,
 * number spellings and string escapes survive, since nothing is parsed into values.
 */

/** One token of a JSON text: `[start, end)` in the text. */
export interface JsonToken {
  readonly kind: "string" | "number" | "literal" | "punct";
  readonly start: number;
  readonly end: number;
  /** The token's text. */
  readonly text: string;
}

/** The tokens of `text`, or undefined when it is not tokenizable JSON. */
export function jsonTokens(text: string): JsonToken[] | undefined {
  const tokens: JsonToken[] = [];
  let at = 0;
  while (at < text.length) {
    const c = text[at]!;
    if (c === " " || c === "\t" || c === "\n" || c === "\r") {
      at++;
      continue;
    }
    const start = at;
    if ("{}[]:,".includes(c)) {
      at++;
      tokens.push({ kind: "punct", start, end: at, text: c });
    } else if (c === '"') {
      at++;
      while (at < text.length && text[at] !== '"') at += text[at] === "\\" ? 2 : 1;
      if (at >= text.length) return undefined;
      at++;
      tokens.push({ kind: "string", start, end: at, text: text.slice(start, at) });
    } else if (c === "-" || (c >= "0" && c <= "9")) {
      while (at < text.length && /[-+.eE0-9]/.test(text[at]!)) at++;
      tokens.push({ kind: "number", start, end: at, text: text.slice(start, at) });
    } else if (/[a-z]/.test(c)) {
      while (at < text.length && /[a-z]/.test(text[at]!)) at++;
      tokens.push({ kind: "literal", start, end: at, text: text.slice(start, at) });
    } else {
      return undefined;
    }
  }
  return tokens;
}

/** The value of a string token, or undefined if its escapes are malformed. */
export function stringValue(token: JsonToken): string | undefined {
  try {
    return JSON.parse(token.text) as string;
  } catch {
    return undefined;
  }
}

/** Index of the token that closes the value starting at `tokens[i]` (itself for a scalar). */
export function valueEnd(tokens: readonly JsonToken[], i: number): number {
  const first = tokens[i];
  if (first === undefined || (first.text !== "{" && first.text !== "[")) return i;
  let depth = 0;
  for (let j = i; j < tokens.length; j++) {
    const t = tokens[j]!.text;
    if (tokens[j]!.kind !== "punct") continue;
    if (t === "{" || t === "[") depth++;
    else if (t === "}" || t === "]") {
      depth--;
      if (depth === 0) return j;
    }
  }
  return tokens.length - 1;
}

/** Indexes of the value tokens that follow a key named `key` (`"key": VALUE`), anywhere in the document. */
export function valuesOfKey(tokens: readonly JsonToken[], key: string): number[] {
  const out: number[] = [];
  for (let i = 0; i + 2 < tokens.length; i++) {
    if (tokens[i]!.kind === "string" && tokens[i + 1]!.text === ":" && stringValue(tokens[i]!) === key) out.push(i + 2);
  }
  return out;
}

/** Indexes of the key tokens of the top-level object's members. */
export function topLevelKeys(tokens: readonly JsonToken[]): number[] {
  const out: number[] = [];
  if (tokens[0]?.text !== "{") return out;
  let i = 1;
  while (i < tokens.length && tokens[i]!.kind === "string" && tokens[i + 1]?.text === ":") {
    out.push(i);
    i = valueEnd(tokens, i + 2) + 1;
    if (tokens[i]?.text === ",") i++;
    else break;
  }
  return out;
}

/** `text` with the tokens `[from, to]` (inclusive) replaced by `insert`. */
export function replaceTokens(text: string, tokens: readonly JsonToken[], from: number, to: number, insert: string): string {
  return text.slice(0, tokens[from]!.start) + insert + text.slice(tokens[to]!.end);
}
