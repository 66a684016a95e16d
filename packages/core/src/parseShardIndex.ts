/**
 * The index of a sharded checkpoint (`model.safetensors.index.json`, `pytorch_model.bin.index.json`)
 * judged as huggingface_hub's loader judges it: `json.load` of the file opened as UTF-8 (so a byte
 * order mark is refused, and `NaN`, `Infinity`, `-Infinity` are numbers), a `weight_map` object of
 * strings, and shard names that stay in the index's folder. The `metadata` is not the loader's
 * business: one that is not an object is ignored, with a notice.
 */
import { StConvertError, quoteName } from "./StConvertError.js";

/**
 * Deepest nesting of arrays and objects accepted, the top-level object counted. Python's `json`
 * recurses once per level and raises RecursionError near its default limit of 1,000 frames (an
 * index 995 deep fails under `json.load` in a script, 990 loads): past this, the loaders refuse.
 */
export const MAX_INDEX_DEPTH = 990;

/** An index, parsed. */
export interface ShardIndex {
  /** Tensor → shard file, in the file's order; shard names normalized (`./x` and `x` are one file). */
  readonly weightMap: ReadonlyMap<string, string>;
  /** Shard names (normalized) in the order they first appear in the weight map. */
  readonly shards: readonly string[];
  /** The index's own `metadata` object (`total_size`, …); null when it has none or it is not an object. */
  readonly metadata: Readonly<Record<string, unknown>> | null;
}

/** Options of {@link parseShardIndex}. */
export interface ParseShardIndexOptions {
  /** The index's name, for messages. */
  file?: string;
  /** A shard name must end in one of these; default: any name. */
  extensions?: readonly string[];
  /** Deepest nesting accepted. Default {@link MAX_INDEX_DEPTH}. */
  maxDepth?: number;
  /** Receives non-fatal notices (a `metadata` that is not an object). */
  onWarning?: (message: string) => void;
}

/**
 * Parses an index's bytes.
 * @throws StConvertError `InvalidIndex` for bytes that are not UTF-8, start with a byte order mark,
 *   are not JSON as Python reads it, or are not an index (no `weight_map` object, a shard that is
 *   not a string, an absolute name, a `..` part, a name without one of `extensions`);
 *   `LimitExceeded` for nesting deeper than `maxDepth`.
 */
export function parseShardIndex(bytes: Uint8Array, options: ParseShardIndexOptions = {}): ShardIndex {
  const bad = (rule: string, tensor?: string): never => {
    throw new StConvertError("InvalidIndex", rule, { file: options.file, tensor });
  };
  if (bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf) {
    bad("not a JSON index: it starts with a UTF-8 byte order mark, which Python's json.load (and so huggingface_hub's loader) refuses");
  }
  let text = "";
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    bad("not a JSON index: the bytes are not UTF-8");
  }
  const parsed = parsePythonJson(text, options.maxDepth ?? MAX_INDEX_DEPTH, options.file);
  if (!(parsed instanceof Map)) return bad('not an index: a JSON object with a "weight_map" is expected');
  const weightMap = parsed.get("weight_map");
  if (!(weightMap instanceof Map)) return bad('not an index: "weight_map" must be an object mapping tensor names to shard files');
  const metadata = parsed.get("metadata");
  if (metadata !== undefined && metadata !== null && !(metadata instanceof Map)) {
    options.onWarning?.(`the index's "metadata" is ${describe(metadata)}, not an object; ignored, as huggingface_hub's loader ignores it`);
  }
  const map = new Map<string, string>();
  for (const [name, shard] of weightMap as Map<string, unknown>) {
    if (typeof shard !== "string") return bad(`weight_map maps ${quoteName(name)} to ${describe(shard)}, not to a file name`, name);
    map.set(name, checkShardName(shard, options.extensions, bad));
  }
  return { weightMap: map, shards: [...new Set(map.values())], metadata: metadata instanceof Map ? toPlain(metadata) : null };
}

/**
 * The loaders' rule (huggingface_hub parses names as Windows paths and refuses a drive, a root or
 * a `..` part), with the format's extension required: an index cannot make st-convert read a
 * file outside its folder. `.` parts and repeated slashes name the same file and are dropped.
 */
function checkShardName(name: string, extensions: readonly string[] | undefined, bad: (rule: string) => never): string {
  const shown = JSON.stringify(name);
  if (name === "" || name.includes("\0")) bad(`shard name ${shown} is not a file name`);
  if (/^[A-Za-z]:/.test(name) || name.startsWith("/") || name.startsWith("\\"))
    bad(`shard name ${shown} is an absolute path; shards must lie beside the index`);
  if (name.split(/[\\/]/).includes("..")) bad(`shard name ${shown} climbs out of the index's folder with ".."`);
  if (extensions !== undefined && !extensions.some((e) => name.endsWith(e))) bad(`shard name ${shown} does not end in ${extensions.join(", ")}`);
  const normalized = name
    .split("/")
    .filter((part) => part !== "" && part !== ".")
    .join("/");
  if (normalized === "") bad(`shard name ${shown} is not a file name`);
  return normalized;
}

function describe(value: unknown): string {
  if (value instanceof Map) return "an object";
  if (Array.isArray(value)) return "an array";
  return JSON.stringify(value) ?? String(value);
}

/** A parsed object as a plain record (null prototype: a key named `__proto__` stays a key). */
function toPlain(map: Map<string, unknown>): Record<string, unknown> {
  const out: Record<string, unknown> = Object.create(null);
  for (const [key, value] of map)
    out[key] = value instanceof Map ? toPlain(value) : Array.isArray(value) ? value.map((v) => (v instanceof Map ? toPlain(v) : v)) : value;
  return out;
}

const WHITESPACE = new Set([" ", "\t", "\n", "\r"]);
const ESCAPES: Readonly<Record<string, string>> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };
const PLAIN_RUN = /[^"\\\u0000-\u001f]*/y;
const NUMBER = /-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?/y;

/**
 * JSON as Python's `json.loads` reads it: objects become Maps (their order kept, a repeated key's
 * last value winning, as in a dict), `NaN`, `Infinity` and `-Infinity` are numbers, control
 * characters in strings are refused (`strict=True`). An explicit stack, not recursion, so that the
 * depth limit is a refusal and never a crash.
 */
function parsePythonJson(text: string, maxDepth: number, file: string | undefined): unknown {
  let at = 0;
  const fail = (rule: string): never => {
    const before = text.slice(0, at);
    const line = before.split("\n").length;
    const column = at - before.lastIndexOf("\n");
    throw new StConvertError("InvalidIndex", `not a JSON index: ${rule} at line ${line}, column ${column}`, { file });
  };
  const skip = () => {
    while (at < text.length && WHITESPACE.has(text[at]!)) at++;
  };
  const string = (): string => {
    at++;
    let out = "";
    for (;;) {
      const ch = text[at];
      if (ch === undefined) return fail("unterminated string");
      if (ch === '"') {
        at++;
        return out;
      }
      if (ch < " ") return fail("invalid control character in a string");
      if (ch !== "\\") {
        // The plain run up to the next quote, backslash or control character, in one slice.
        PLAIN_RUN.lastIndex = at;
        PLAIN_RUN.test(text);
        out += text.slice(at, PLAIN_RUN.lastIndex);
        at = PLAIN_RUN.lastIndex;
        continue;
      }
      const escaped = text[at + 1];
      if (escaped === "u") {
        const hex = text.slice(at + 2, at + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) return fail("invalid \\uXXXX escape");
        out += String.fromCharCode(Number.parseInt(hex, 16));
        at += 6;
      } else if (escaped !== undefined && ESCAPES[escaped] !== undefined) {
        out += ESCAPES[escaped];
        at += 2;
      } else {
        return fail("invalid escape");
      }
    }
  };
  const scalar = (): unknown => {
    for (const [word, value] of [
      ["true", true],
      ["false", false],
      ["null", null],
      ["NaN", Number.NaN],
      ["Infinity", Number.POSITIVE_INFINITY],
      ["-Infinity", Number.NEGATIVE_INFINITY],
    ] as const) {
      if (text.startsWith(word, at)) {
        at += word.length;
        return value;
      }
    }
    NUMBER.lastIndex = at;
    const match = NUMBER.exec(text);
    if (match === null) return fail("expecting a value");
    at += match[0].length;
    return Number(match[0]);
  };

  // Each open container, and for an object the key its next value goes under.
  const stack: { container: Map<string, unknown> | unknown[]; key?: string }[] = [];
  let result: unknown;
  let done = false;
  const place = (value: unknown) => {
    const top = stack[stack.length - 1];
    if (top === undefined) {
      result = value;
      done = true;
    } else if (top.container instanceof Map) top.container.set(top.key!, value);
    else top.container.push(value);
  };
  const open = (container: Map<string, unknown> | unknown[]) => {
    if (stack.length >= maxDepth) {
      throw new StConvertError(
        "LimitExceeded",
        `the index nests arrays and objects deeper than ${maxDepth} levels, where Python's json.load stops (RecursionError)`,
        {
          file,
        },
      );
    }
    stack.push({ container });
  };
  const key = () => {
    skip();
    if (text[at] !== '"') return fail("expecting a property name in double quotes");
    stack[stack.length - 1]!.key = string();
    skip();
    if (text[at] !== ":") return fail("expecting ':'");
    at++;
  };
  // A value begins here (after a key, a comma in an array, or at the top).
  let expectValue = true;
  while (!done || stack.length > 0) {
    skip();
    if (expectValue) {
      const ch = text[at];
      if (ch === "{") {
        at++;
        open(new Map());
        skip();
        if (text[at] === "}") {
          at++;
          const closed = stack.pop()!.container;
          place(closed);
          expectValue = false;
        } else key();
        continue;
      }
      if (ch === "[") {
        at++;
        open([]);
        skip();
        if (text[at] === "]") {
          at++;
          place(stack.pop()!.container);
          expectValue = false;
        }
        continue;
      }
      place(ch === '"' ? string() : scalar());
      expectValue = false;
      if (done) break;
      continue;
    }
    const top = stack[stack.length - 1];
    if (top === undefined) break;
    const ch = text[at];
    const isMap = top.container instanceof Map;
    if (ch === ",") {
      at++;
      if (isMap) key();
      expectValue = true;
    } else if (ch === (isMap ? "}" : "]")) {
      at++;
      place(stack.pop()!.container);
    } else {
      fail(isMap ? "expecting ',' or '}'" : "expecting ',' or ']'");
    }
  }
  skip();
  if (at < text.length) fail("extra data");
  return result;
}
