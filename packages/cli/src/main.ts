/**
 * The `st-convert` command: argument parsing, output and exit codes. The work is done by
 * `convert()`, `convertMany()` and `inspect()`; formats come from the registry.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { type FormatOption, type FormatOptionValues, type TensorFormat, isStConvertError } from "@st-convert/core";
import { type FileReport, convert, inspect } from "./convert.js";
import { type BatchSummary, DEFAULT_JOBS, convertMany, describeError } from "./convertMany.js";
import { FORMATS } from "./formats.js";
import { type ProgressLine, createProgressLine, formatSize } from "./progress.js";
import { type TransformOptions, parseMetadataEntries, parsePattern, parseRenameRule } from "./transforms.js";

/** Exit status: success. */
export const EXIT_OK = 0;
/** Exit status: an input was refused or a conversion failed. */
export const EXIT_FAILURE = 1;
/** Exit status: the command line was wrong. */
export const EXIT_USAGE = 2;

/** Where the command writes; the real process or a test's buffers. */
export interface CliIo {
  stdout(text: string): void;
  stderr(text: string): void;
  /** Stops a running conversion (wired to SIGINT/SIGTERM by the bin). */
  signal?: AbortSignal;
  /** Whether stderr is a terminal: progress is drawn only there. */
  stderrIsTTY?: boolean;
  /** Terminal width for the progress line. */
  columns?: number;
}

class UsageError extends Error {}

const COMMON_OPTIONS = {
  from: { type: "string" },
  to: { type: "string" },
  "out-dir": { type: "string", short: "o" },
  jobs: { type: "string", short: "j" },
  "dry-run": { type: "boolean", short: "n" },
  force: { type: "boolean", short: "f" },
  metadata: { type: "string", multiple: true },
  rename: { type: "string", multiple: true },
  filter: { type: "string", multiple: true },
  exclude: { type: "string", multiple: true },
  json: { type: "boolean" },
  quiet: { type: "boolean", short: "q" },
  debug: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
} as const;

type ParsedValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** Runs the command with `argv` (without `node` and the script) and returns the exit status. */
export async function main(argv: readonly string[], io: CliIo, formats: readonly TensorFormat[] = FORMATS): Promise<number> {
  const formatOptions = collectFormatOptions(formats);
  let debug = argv.includes("--debug");
  let progress: ProgressLine | undefined;
  try {
    const { values, positionals } = parseCommandLine(argv, formatOptions);
    debug = values.debug === true;
    const quiet = values.quiet === true;
    if (io.stderrIsTTY === true && !quiet) progress = createProgressLine(io.stderr, io.columns);
    if (values.help === true) {
      io.stdout(helpText(formats, formatOptions));
      return EXIT_OK;
    }
    if (values.version === true) {
      io.stdout(`${version()}\n`);
      return EXIT_OK;
    }
    const warn = quiet
      ? undefined
      : (message: string) => {
          progress?.clear();
          io.stderr(`st-convert: warning: ${message}\n`);
        };
    const common = {
      from: stringValue(values, "from"),
      formatOptions: pickFormatOptions(values, formatOptions),
      onWarning: warn,
      formats,
      ...transformOptions(values),
    };

    const outDir = stringValue(values, "out-dir");
    if (positionals[0] === "info" && outDir === undefined) {
      if (positionals.length !== 2) throw new UsageError("info takes one file: st-convert info <file> [--json]");
      const report = await inspect(positionals[1]!, common);
      io.stdout(values.json === true ? `${JSON.stringify(infoJson(report), null, 2)}\n` : infoTable(positionals[1]!, report));
      return EXIT_OK;
    }

    if (outDir !== undefined) {
      const to = stringValue(values, "to");
      if (to === undefined) throw new UsageError("--out-dir needs --to FORMAT (the format of the outputs)");
      if (positionals.length === 0) throw new UsageError("--out-dir needs at least one input file or folder");
      const summary = await convertMany(positionals, {
        ...common,
        outDir,
        to,
        jobs: parseJobs(stringValue(values, "jobs")),
        dryRun: values["dry-run"] === true,
        force: values.force === true,
        signal: io.signal,
        onEvent: (event) => {
          if (event.type === "progress") progress?.update(event.job.input, event.done, event.total);
          else if (event.type === "converted" || event.type === "failed" || event.type === "skipped") progress?.clear();
        },
      });
      progress?.clear();
      if (values.json === true) io.stdout(`${JSON.stringify(summary, null, 2)}\n`);
      else if (!quiet || summary.failed.length > 0) io.stderr(batchReport(summary, quiet));
      return summary.failed.length > 0 || summary.stopped ? EXIT_FAILURE : EXIT_OK;
    }

    if (values.jobs !== undefined || values["dry-run"] === true) throw new UsageError("--jobs and --dry-run go with --out-dir (batch conversion)");
    if (positionals.length !== 2) {
      throw new UsageError(
        positionals.length < 2 ? "expected an input and an output file" : `expected two files (or --out-dir DIR for many), got ${positionals.length}`,
      );
    }
    const [input, output] = positionals as [string, string];
    const result = await convert(input, output, {
      ...common,
      to: stringValue(values, "to"),
      force: values.force === true,
      signal: io.signal,
      onProgress: (done, total) => progress?.update(input, done, total),
    });
    progress?.clear();
    if (values.json === true) io.stdout(`${JSON.stringify(result)}\n`);
    else if (!quiet)
      io.stderr(`st-convert: ${input} (${result.inputFormat}) -> ${output} (${result.outputFormat}): ${result.tensors} tensors, ${formatSize(result.bytes)}\n`);
    return EXIT_OK;
  } catch (error) {
    progress?.clear();
    return reportError(error, io, debug);
  }
}

function reportError(error: unknown, io: CliIo, debug: boolean): number {
  if (
    error instanceof UsageError ||
    (isStConvertError(error) && (error.code === "UnknownFormat" || (error.code === "InvalidArgument" && error.file === undefined)))
  ) {
    io.stderr(`st-convert: ${error.message}\nTry 'st-convert --help'.\n`);
    return EXIT_USAGE;
  }
  io.stderr(`st-convert: ${describeError(error)}${isStConvertError(error) ? "" : "; rerun with --debug for details"}\n`);
  if (debug && error instanceof Error && error.stack !== undefined) io.stderr(`${error.stack}\n`);
  return EXIT_FAILURE;
}

function transformOptions(values: ParsedValues): TransformOptions {
  const list = (name: string) => (values[name] as string[] | undefined) ?? [];
  return {
    metadata: parseMetadataEntries(list("metadata")),
    rename: list("rename").map(parseRenameRule),
    filter: list("filter").map((p) => parsePattern(p, "--filter")),
    exclude: list("exclude").map((p) => parsePattern(p, "--exclude")),
  };
}

function parseJobs(text: string | undefined): number {
  if (text === undefined) return DEFAULT_JOBS;
  const jobs = Number(text);
  if (!Number.isInteger(jobs) || jobs < 1 || jobs > 64) throw new UsageError(`--jobs ${JSON.stringify(text)}: expected a whole number from 1 to 64`);
  return jobs;
}

function stringValue(values: ParsedValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

function parseCommandLine(argv: readonly string[], formatOptions: readonly FormatOption[]): { values: ParsedValues; positionals: string[] } {
  const options: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }> = { ...COMMON_OPTIONS };
  for (const option of formatOptions) options[option.name] = { type: option.type, multiple: option.multiple ?? false };
  try {
    const { values, positionals } = parseArgs({ args: [...argv], options, allowPositionals: true, strict: true });
    return { values: values as ParsedValues, positionals };
  } catch (error) {
    throw new UsageError(error instanceof Error ? error.message : String(error));
  }
}

/** Format options, merged by name; two formats may share an option only if they agree on its type. */
function collectFormatOptions(formats: readonly TensorFormat[]): FormatOption[] {
  const byName = new Map<string, FormatOption>();
  for (const format of formats) {
    for (const option of format.options ?? []) {
      if (option.name in COMMON_OPTIONS) throw new Error(`format ${format.name} redefines the common option --${option.name}`);
      const known = byName.get(option.name);
      if (known !== undefined && (known.type !== option.type || (known.multiple ?? false) !== (option.multiple ?? false))) {
        throw new Error(`formats disagree on the type of --${option.name}`);
      }
      if (known === undefined) byName.set(option.name, option);
    }
  }
  return [...byName.values()];
}

function pickFormatOptions(values: ParsedValues, formatOptions: readonly FormatOption[]): FormatOptionValues {
  const picked: Record<string, string | boolean | readonly string[] | undefined> = {};
  for (const option of formatOptions) picked[option.name] = values[option.name] as string | boolean | string[] | undefined;
  return picked;
}

function version(): string {
  const pkg = JSON.parse(readFileSync(new URL("../package.json", import.meta.url), "utf8")) as { version: string };
  return pkg.version;
}

function helpText(formats: readonly TensorFormat[], formatOptions: readonly FormatOption[]): string {
  const nameWidth = Math.max(...formats.map((f) => f.name.length));
  const extensionWidth = Math.max(...formats.map((f) => f.extensions.join(", ").length));
  const formatLines = formats.map((f) => `  ${f.name.padEnd(nameWidth)} ${f.extensions.join(", ").padEnd(extensionWidth)} ${f.description}`);
  const optionLines = formatOptions.map((o) => {
    const flag = `--${o.name}${o.type === "string" ? ` ${o.valueName ?? "VALUE"}` : ""}`;
    const owners = formats.filter((f) => f.options?.some((x) => x.name === o.name)).map((f) => f.name);
    return `  ${flag.padEnd(24)} ${o.description}${o.multiple === true ? " (repeatable)" : ""} [${owners.join(", ")}]`;
  });
  return `st-convert ${version()}: convert tensor files between safetensors and other formats, losslessly.

Usage:
  st-convert <input> <output> [options]                 convert one file (formats from the extensions)
  st-convert <inputs or folders...> --out-dir DIR --to FORMAT [--jobs N] [--dry-run]
                                                        convert many; folders are searched recursively
  st-convert info <file> [--json]                       list a file's tensors and metadata
  A sharded checkpoint is read through its index: st-convert model.safetensors.index.json model.npz

Options:
  --from FORMAT            read inputs as FORMAT, whatever their names
  --to FORMAT              write the output as FORMAT, whatever its name
  -o, --out-dir DIR        batch: write outputs under DIR, keeping the layout below each folder
  -j, --jobs N             batch: conversions at once (default ${DEFAULT_JOBS})
  -n, --dry-run            batch: show what would be done, write nothing
  -f, --force              replace existing outputs (otherwise they are never touched)
  --metadata KEY=VALUE     add or override a metadata entry (repeatable)
  --rename FROM=TO         rename tensors: FROM is a regular expression, TO may use $1 (repeatable)
  --filter REGEX           keep only tensors whose name matches (repeatable: any of them)
  --exclude REGEX          drop tensors whose name matches (repeatable)
  --json                   print a machine-readable report on stdout
  -q, --quiet              print nothing but errors (no progress bar)
  --debug                  show stack traces of errors
  -h, --help               show this help
  -V, --version            show the version
${optionLines.length > 0 ? `\nFormat options:\n${optionLines.join("\n")}\n` : ""}
Formats:
${formatLines.join("\n")}

Exit status: 0 on success, 1 when an input is refused or a conversion fails (in a batch: when any
file failed), 2 on a usage error. Outputs are written to a temporary file beside them and renamed
into place only on success; a refused input or Ctrl-C leaves nothing behind.
`;
}

/** The `info --json` document: `{"format", "metadata", "tensors": [{"name", "dtype", "shape"}]}`. */
function infoJson(report: FileReport): object {
  return {
    format: report.format,
    metadata: report.metadata === null ? null : { ...report.metadata },
    tensors: report.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape })),
  };
}

function infoTable(file: string, report: FileReport): string {
  const rows = report.tensors.map((t) => [t.name, t.dtype, `[${t.shape.join(", ")}]`, groupDigits(t.byteLength)]);
  const header = ["name", "dtype", "shape", "bytes"];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  let parameters = 0n;
  let bytes = 0;
  for (const t of report.tensors) {
    let elements = 1;
    for (const d of t.shape) elements *= d;
    // Exact while below 2^53 (every tensor whose bytes fit in a file); BigInt only past that.
    parameters += Number.isSafeInteger(elements) ? BigInt(elements) : t.shape.reduce((n, d) => n * BigInt(d), 1n);
    bytes += t.byteLength;
  }
  const metadata =
    report.metadata === null
      ? "none"
      : Object.entries(report.metadata)
          .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
          .join(", ") || "{}";
  return [
    `${file}: ${report.format}`,
    `metadata: ${metadata}`,
    "",
    line(header),
    ...rows.map(line),
    "",
    `${report.tensors.length} tensors, ${groupDigits(parameters)} parameters, ${formatSize(bytes)} (${groupDigits(bytes)} bytes)`,
    "",
  ].join("\n");
}

/** `1234567` → `1,234,567` (Intl's toLocaleString costs a millisecond per thousand calls). */
function groupDigits(value: number | bigint): string {
  return String(value).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

function batchReport(summary: BatchSummary, quiet: boolean): string {
  const lines: string[] = [];
  if (!quiet) {
    for (const job of summary.converted) lines.push(`  ${summary.dryRun ? "would convert" : "converted"}: ${job.input} -> ${job.output}`);
    for (const job of summary.skipped) lines.push(`  skipped: ${job.input} -> ${job.output}: ${job.reason}`);
  }
  for (const job of summary.failed) lines.push(`  failed: ${job.message}`);
  const total = summary.converted.length + summary.skipped.length + summary.failed.length;
  if (!quiet && summary.ignored.length > 0)
    lines.push(`  ignored ${summary.ignored.length} file(s) whose content is not a tensor file (e.g. ${summary.ignored[0]})`);
  const verb = summary.dryRun ? "would convert" : "converted";
  lines.push(
    `st-convert: ${verb} ${summary.converted.length}, skipped ${summary.skipped.length}, failed ${summary.failed.length} (of ${total} files)${summary.stopped ? "; stopped before the end" : ""}`,
  );
  return `${lines.join("\n")}\n`;
}
