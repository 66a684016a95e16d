/** `st-convert info <file>`: a file's format, metadata and tensors, from its header. */
import { GLOBAL_OPTIONS, SELECTION_OPTIONS, UsageError } from "./cliOptions.js";
import { type Command, EXIT_OK, printReport } from "./command.js";
import { type FileReport, inspect } from "./convert.js";
import { formatOptionLines, optionLines, section } from "./helpText.js";
import { formatSize } from "./progress.js";
import { fillInfoReport, infoTotals } from "./report.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { STDIN_NAME } from "./stdio.js";
import { groupDigits, plural } from "./text.js";

const OPTIONS = { from: SELECTION_OPTIONS.from!, filter: SELECTION_OPTIONS.filter!, exclude: SELECTION_OPTIONS.exclude!, cast: SELECTION_OPTIONS.cast! };

export const infoCommand: Command = {
  name: "info",
  summary: "list a file's format, metadata and tensors (reads headers only)",
  options: OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert info <file> [--json] [options]

Lists what a tensor file holds: its format, its metadata and, for each tensor, the name, dtype,
shape and byte length, with the totals. Only headers are read (a compressed archive may need
more). <file> may be - for stdin (copied to a scratch file first when it is a pipe).

With --json, one line on stdout: {"version", "command": "info", "ok", "input": {"file", "format"},
"metadata", "tensors": [{"name", "dtype", "shape", "bytes"}], "totals": {"tensors", "parameters",
"bytes"}, "warnings", "error"?} (report.schema.json in the package describes every command's report).
${section("Options", optionLines(OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section(
  "Format options",
  formatOptionLines(formats, formatOptions).filter((l) => !l.includes("when writing")),
)}
Exit status: 0 on success, 1 when the file is refused, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    if (positionals.length !== 1) throw new UsageError("info takes one file: st-convert info <file> [--json]");
    const file = positionals[0]!;
    const report = context.report;
    if (report.command !== "info") throw new Error("info runs with an info report");
    report.input = { file: file === "-" ? STDIN_NAME : file, format: null };
    const stdin = file === "-" ? await openStdin(context) : undefined;
    try {
      const { formatOptions, from, formats, onWarning, filter, exclude, cast } = commonConvertOptions(values, context);
      const found = await inspect(stdin ?? file, { formatOptions, from, formats, onWarning, filter, exclude, cast, recordCast: false });
      fillInfoReport(report, report.input.file, found);
      report.ok = true;
      if (context.json) printReport(context);
      else context.io.stdout(infoTable(report.input.file, found));
      return EXIT_OK;
    } finally {
      await stdin?.close();
    }
  },
};

async function openStdin(context: Parameters<Command["run"]>[1]) {
  if (context.io.openStdin === undefined) throw new UsageError("- as the input (stdin) is not available here");
  return context.io.openStdin();
}

function infoTable(file: string, found: FileReport): string {
  const rows = found.tensors.map((t) => [t.name, t.dtype, `[${t.shape.join(", ")}]`, groupDigits(t.byteLength)]);
  const header = ["name", "dtype", "shape", "bytes"];
  // A loop, not Math.max(...rows): spreading 120,000+ arguments overflows the stack.
  const widths = header.map((h) => h.length);
  for (const row of rows) for (let i = 0; i < row.length; i++) widths[i] = Math.max(widths[i]!, row[i]!.length);
  const line = (cells: string[]) =>
    cells
      .map((cell, i) => (i === cells.length - 1 ? cell.padStart(widths[i]!) : cell.padEnd(widths[i]!)))
      .join("  ")
      .trimEnd();
  const totals = infoTotals(found);
  const metadata =
    found.metadata === null
      ? "none"
      : Object.entries(found.metadata)
          .map(([k, v]) => `${k}=${JSON.stringify(v)}`)
          .join(", ") || "{}";
  return [
    `${file}: ${found.format}`,
    `metadata: ${metadata}`,
    "",
    line(header),
    ...rows.map(line),
    "",
    `${plural(totals.tensors, "tensor")}, ${plural(totals.parameters, "parameter")}, ${formatSize(totals.bytes)} (${plural(totals.bytes, "byte")})`,
    "",
  ].join("\n");
}
