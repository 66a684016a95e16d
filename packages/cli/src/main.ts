/**
 * The `st-convert` command: argument parsing, output and exit codes. The work is done by
 * `convert()` and `inspect()`; formats come from the registry.
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { type FormatOption, type FormatOptionValues, type TensorFormat, isStConvertError } from "@st-convert/core";
import { type FileReport, convert, inspect } from "./convert.js";
import { FORMATS } from "./formats.js";

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
}

class UsageError extends Error {}

const COMMON_OPTIONS = {
  from: { type: "string" },
  to: { type: "string" },
  force: { type: "boolean", short: "f" },
  json: { type: "boolean" },
  quiet: { type: "boolean", short: "q" },
  debug: { type: "boolean" },
  help: { type: "boolean", short: "h" },
  version: { type: "boolean", short: "V" },
} as const;

/** Runs the command with `argv` (without `node` and the script) and returns the exit status. */
export async function main(argv: readonly string[], io: CliIo, formats: readonly TensorFormat[] = FORMATS): Promise<number> {
  const formatOptions = collectFormatOptions(formats);
  let debug = argv.includes("--debug");
  try {
    const { values, positionals } = parseCommandLine(argv, formatOptions);
    debug = values.debug === true;
    if (values.help === true) {
      io.stdout(helpText(formats, formatOptions));
      return EXIT_OK;
    }
    if (values.version === true) {
      io.stdout(`${version()}\n`);
      return EXIT_OK;
    }
    const warn = values.quiet === true ? undefined : (message: string) => io.stderr(`st-convert: warning: ${message}\n`);
    const perFormat = pickFormatOptions(values, formatOptions);
    const from = stringValue(values, "from");

    if (positionals[0] === "info") {
      if (positionals.length !== 2) throw new UsageError("info takes one file: st-convert info <file> [--json]");
      const report = await inspect(positionals[1]!, { from, formatOptions: perFormat, onWarning: warn, formats });
      io.stdout(values.json === true ? `${JSON.stringify(infoJson(report), null, 2)}\n` : infoTable(positionals[1]!, report));
      return EXIT_OK;
    }

    if (positionals.length !== 2) {
      throw new UsageError(positionals.length < 2 ? "expected an input and an output file" : `expected two files, got ${positionals.length}`);
    }
    const [input, output] = positionals as [string, string];
    const result = await convert(input, output, {
      from,
      to: stringValue(values, "to"),
      force: values.force === true,
      formatOptions: perFormat,
      onWarning: warn,
      signal: io.signal,
      formats,
    });
    if (values.json === true) io.stdout(`${JSON.stringify(result)}\n`);
    else if (values.quiet !== true) {
      io.stderr(`st-convert: ${input} (${result.inputFormat}) -> ${output} (${result.outputFormat}): ${result.tensors} tensors, ${formatBytes(result.bytes)}\n`);
    }
    return EXIT_OK;
  } catch (error) {
    if (error instanceof UsageError || (isStConvertError(error) && error.code === "UnknownFormat")) {
      io.stderr(`st-convert: ${error.message}\nTry 'st-convert --help'.\n`);
      return EXIT_USAGE;
    }
    if (isStConvertError(error)) {
      io.stderr(`st-convert: ${error.message} [${error.code}]\n`);
      if (debug && error.stack !== undefined) io.stderr(`${error.stack}\n`);
      return EXIT_FAILURE;
    }
    // Anything else is a bug in st-convert, not a problem with the input.
    const message = error instanceof Error ? error.message : String(error);
    io.stderr(`st-convert: internal error: ${message} (please report this; rerun with --debug for details)\n`);
    if (debug && error instanceof Error && error.stack !== undefined) io.stderr(`${error.stack}\n`);
    return EXIT_FAILURE;
  }
}

type ParsedValues = Record<string, string | boolean | (string | boolean)[] | undefined>;

function stringValue(values: ParsedValues, name: string): string | undefined {
  const value = values[name];
  return typeof value === "string" ? value : undefined;
}

function parseCommandLine(argv: readonly string[], formatOptions: readonly FormatOption[]): { values: ParsedValues; positionals: string[] } {
  const options: Record<string, { type: "string" | "boolean"; short?: string; multiple?: boolean }> = { ...COMMON_OPTIONS };
  for (const option of formatOptions) options[option.name] = { type: option.type, multiple: option.multiple };
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
      if (known !== undefined && (known.type !== option.type || known.multiple !== option.multiple)) {
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
  const formatLines = formats.map((f) => `  ${f.name.padEnd(12)} ${f.extensions.join(", ").padEnd(16)} ${f.description}`);
  const optionLines = formatOptions.map((o) => {
    const flag = `--${o.name}${o.type === "string" ? ` ${o.valueName ?? "VALUE"}` : ""}`;
    return `  ${flag.padEnd(22)} ${o.description}${o.multiple === true ? " (repeatable)" : ""}`;
  });
  return `st-convert ${version()}: convert tensor files between safetensors and other formats, losslessly.

Usage:
  st-convert <input> <output> [options]   convert one file (formats from the extensions)
  st-convert info <file> [--json]         list a file's tensors and metadata

Options:
  --from FORMAT          read the input as FORMAT, whatever its name
  --to FORMAT            write the output as FORMAT, whatever its name
  -f, --force            replace an existing output (otherwise it is never touched)
  --json                 print a machine-readable report on stdout
  -q, --quiet            print nothing but errors
  --debug                show stack traces of errors
  -h, --help             show this help
  -V, --version          show the version
${optionLines.length > 0 ? `\nFormat options:\n${optionLines.join("\n")}\n` : ""}
Formats:
${formatLines.join("\n")}

Exit status: 0 on success, 1 when an input is refused or a conversion fails, 2 on a usage error.
The output is written to a temporary file beside it and renamed into place only on success.
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
  const rows = report.tensors.map((t) => [t.name, t.dtype, `[${t.shape.join(", ")}]`, String(t.byteLength)]);
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
    parameters += t.shape.reduce((n, d) => n * BigInt(d), 1n);
    bytes += t.byteLength;
  }
  const metadata = report.metadata === null ? "none" : Object.entries(report.metadata).map(([k, v]) => `${k}=${JSON.stringify(v)}`).join(", ") || "{}";
  return [
    `${file}: ${report.format}`,
    `metadata: ${metadata}`,
    "",
    line(header),
    ...rows.map(line),
    "",
    `${report.tensors.length} tensors, ${parameters.toLocaleString("en-US")} parameters, ${formatBytes(bytes)}`,
    "",
  ].join("\n");
}

function formatBytes(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${bytes} B` : `${value.toFixed(1)} ${units[unit]} (${bytes.toLocaleString("en-US")} bytes)`;
}
