/**
 * The command line's vocabulary: every option of every command, parsing in the tool's own voice
 * (parseArgs' messages rewritten, the nearest option suggested for a typo), and the usage error.
 */
import { parseArgs } from "node:util";
import type { FormatOption, FormatOptionValues, TensorFormat } from "@st-convert/core";

/** A mistake on the command line: exit status 2, with a pointer to the command's help. */
export class UsageError extends Error {
  override readonly name = "UsageError";
}

/** One option as the help shows it and parseArgs takes it. */
export interface OptionSpec {
  readonly type: "string" | "boolean";
  readonly short?: string;
  readonly multiple?: boolean;
  /** Placeholder in help, e.g. `FORMAT`. */
  readonly valueName?: string;
  readonly description: string;
}

export type OptionTable = Readonly<Record<string, OptionSpec>>;

/** Default number of conversions at once (`--jobs`). */
export const DEFAULT_JOBS = 2;

/** Options every command takes. */
export const GLOBAL_OPTIONS: OptionTable = {
  json: { type: "boolean", description: "print one JSON report on stdout (schema: report.schema.json in the package)" },
  quiet: { type: "boolean", short: "q", description: "print nothing but errors (no warnings, no progress line)" },
  debug: { type: "boolean", description: "show stack traces of errors" },
  help: { type: "boolean", short: "h", description: "show this help" },
  version: { type: "boolean", short: "V", description: "show the version and whether the native helpers are in use (--debug: why not)" },
};

/** Options about the inputs (convert, batch, info): how they are read, and which tensors are kept and how reshaped. */
export const SELECTION_OPTIONS: OptionTable = {
  from: { type: "string", valueName: "FORMAT", description: "read inputs as FORMAT, whatever their names" },
  filter: { type: "string", multiple: true, valueName: "REGEX", description: "keep only tensors whose name matches (repeatable: any of them)" },
  exclude: { type: "string", multiple: true, valueName: "REGEX", description: "drop tensors whose name matches (repeatable)" },
  rename: { type: "string", multiple: true, valueName: "FROM=TO", description: "rename tensors: FROM is a regular expression, TO may use $1 (repeatable)" },
  cast: {
    type: "string",
    multiple: true,
    valueName: "RULE",
    description: "cast dtypes as torch's .to() does: F32=BF16, BF16 (every float), NAME_REGEX:FROM=TO (repeatable; the last that applies decides)",
  },
  "no-record": { type: "boolean", description: "do not record the casts in the metadata (st_convert.cast)" },
  "allow-download": {
    type: "boolean",
    description: "a URL whose server ignores ranges: download it whole (to a scratch file in TMPDIR) and read it from there; otherwise refused",
  },
};

/** Options of the commands that write. */
export const WRITE_OPTIONS: OptionTable = {
  to: { type: "string", valueName: "FORMAT", description: "write the output as FORMAT, whatever its name" },
  force: { type: "boolean", short: "f", description: "replace existing outputs (otherwise they are never touched)" },
  metadata: { type: "string", multiple: true, valueName: "KEY=VALUE", description: "add or override a metadata entry (repeatable)" },
  "allow-empty": { type: "boolean", description: "write an output even when no tensor is left to write" },
  verify: {
    type: "boolean",
    description: "read each output back and compare its tensors' SHA-256 with the input's; on a difference, exit 1 and remove the output",
  },
};

/** Options of a single conversion. */
export const CONVERT_OPTIONS: OptionTable = {
  output: { type: "string", short: "o", valueName: "FILE", description: "the output file (instead of the second argument); - is stdout" },
  "copy-other-files": { type: "boolean", description: "a model folder: copy the files that are not checkpoints (config.json, tokenizer files)" },
  "max-shard-size": {
    type: "string",
    valueName: "SIZE",
    description: "write shards of at most SIZE (5GB, 500MB, 2GiB, bytes) and an index; the output is the index, a checkpoint name or a folder",
  },
};

/** Options of a batch. */
export const BATCH_OPTIONS: OptionTable = {
  "out-dir": { type: "string", short: "O", valueName: "DIR", description: "write outputs under DIR, keeping the layout below each folder" },
  jobs: {
    type: "string",
    short: "j",
    valueName: "N",
    description: `conversions at once (default ${DEFAULT_JOBS}); a batch of 128 files or more also runs them in worker threads, one per job and core`,
  },
  "dry-run": { type: "boolean", short: "n", description: "show what would be done, write nothing" },
  shard: {
    type: "string",
    valueName: "K/N",
    description: "do part K of N: the inputs sorted, cut into N parts; N runs with K = 1..N do the whole batch once",
  },
  "skip-existing": {
    type: "boolean",
    description: "skip outputs that exist and read back whole; convert again over one that does not (half-written)",
  },
  manifest: { type: "string", valueName: "FILE", description: "append one JSON line per input to FILE: input, output, status, tensors, bytes, digest" },
};

export type ParsedValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** The parsed command line of one command. */
export interface ParsedCommandLine {
  values: ParsedValues;
  positionals: string[];
}

/**
 * Parses `argv` against `table` plus the formats' options.
 * @throws UsageError in the tool's voice: an unknown option (with the nearest known one), a missing
 *   or unexpected value.
 */
export function parseCommandLine(argv: readonly string[], table: OptionTable, formatOptions: readonly FormatOption[], command: string): ParsedCommandLine {
  const options: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }> = {};
  for (const [name, spec] of Object.entries(table)) {
    options[name] =
      spec.short === undefined
        ? { type: spec.type, multiple: spec.multiple ?? false }
        : { type: spec.type, short: spec.short, multiple: spec.multiple ?? false };
  }
  for (const option of formatOptions) options[option.name] ??= { type: option.type, multiple: option.multiple ?? false };
  try {
    const { values, positionals } = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
    return { values: values as ParsedValues, positionals };
  } catch (error) {
    throw new UsageError(rewordParseError(error, options, command));
  }
}

function rewordParseError(error: unknown, options: Record<string, { type: string; short?: string }>, command: string): string {
  const message = error instanceof Error ? error.message : String(error);
  const code = (error as { code?: string }).code;
  const quoted = /'(-[^' ]*)/.exec(message)?.[1];
  if (code === "ERR_PARSE_ARGS_UNKNOWN_OPTION" && quoted !== undefined) {
    const flag = quoted.split("=")[0]!;
    const nearest = nearestOption(flag, options);
    const where = command === "convert" ? "" : ` for ${command}`;
    return `unknown option ${flag}${where}${nearest === undefined ? "" : `; did you mean ${nearest}?`}`;
  }
  if (code === "ERR_PARSE_ARGS_INVALID_OPTION_VALUE" && quoted !== undefined) {
    const flag = /--[\w-]+/.exec(message)?.[0] ?? quoted.split(",")[0]!;
    if (message.includes("does not take an argument")) return `${flag} takes no value`;
    if (message.includes("ambiguous")) return `${flag} needs a value; to give one that starts with a dash, write ${flag}=VALUE`;
    return `${flag} needs a value`;
  }
  return message;
}

/** The known option closest to `flag` (`--froce` → `--force`), if one is close enough to be meant. */
export function nearestOption(flag: string, options: Record<string, { short?: string }>): string | undefined {
  const typed = flag.replace(/^-+/, "");
  let best: { name: string; distance: number } | undefined;
  for (const name of Object.keys(options)) {
    const distance = editDistance(typed, name);
    if (best === undefined || distance < best.distance) best = { name, distance };
  }
  // A third of the name, at least one edit: `--frce` and `--froce` find --force, `--x` finds nothing.
  if (best === undefined || best.distance > Math.max(1, Math.floor(typed.length / 3))) return undefined;
  return `--${best.name}`;
}

/** Levenshtein distance with adjacent transpositions counted as one edit. */
function editDistance(a: string, b: string): number {
  const rows = a.length + 1;
  const cols = b.length + 1;
  const d: number[] = new Array(rows * cols).fill(0);
  for (let i = 0; i < rows; i++) d[i * cols] = i;
  for (let j = 0; j < cols; j++) d[j] = j;
  for (let i = 1; i < rows; i++) {
    for (let j = 1; j < cols; j++) {
      const cost = a[i - 1] === b[j - 1] ? 0 : 1;
      let value = Math.min(d[(i - 1) * cols + j]! + 1, d[i * cols + j - 1]! + 1, d[(i - 1) * cols + j - 1]! + cost);
      if (i > 1 && j > 1 && a[i - 1] === b[j - 2] && a[i - 2] === b[j - 1]) value = Math.min(value, d[(i - 2) * cols + j - 2]! + 1);
      d[i * cols + j] = value;
    }
  }
  return d[rows * cols - 1]!;
}

/** Format options, merged by name; two formats may share an option only if they agree on its type. */
export function collectFormatOptions(formats: readonly TensorFormat[], reserved: OptionTable): FormatOption[] {
  const byName = new Map<string, FormatOption>();
  for (const format of formats) {
    for (const option of format.options ?? []) {
      if (option.name in reserved) throw new Error(`format ${format.name} redefines the common option --${option.name}`);
      const known = byName.get(option.name);
      if (known !== undefined && (known.type !== option.type || (known.multiple ?? false) !== (option.multiple ?? false))) {
        throw new Error(`formats disagree on the type of --${option.name}`);
      }
      if (known === undefined) byName.set(option.name, option);
    }
  }
  return [...byName.values()];
}

/** The values of the formats' options, by name, as `convert()` takes them. */
export function pickFormatOptions(values: ParsedValues, formatOptions: readonly FormatOption[]): FormatOptionValues {
  const picked: Record<string, string | boolean | readonly string[] | undefined> = {};
  for (const option of formatOptions) picked[option.name] = values[option.name] as string | boolean | string[] | undefined;
  return picked;
}

/** A string option's value, if given. */
export function stringValue(values: ParsedValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

/** A repeatable string option's values. */
export function listValue(values: ParsedValues, name: string): string[] {
  return (values[name] as string[] | undefined) ?? [];
}
