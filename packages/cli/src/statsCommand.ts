/** `st-convert stats <file>`: min, max, mean, std and NaN/Inf/zero counts of each tensor. */
import { GLOBAL_OPTIONS, UsageError } from "./cliOptions.js";
import { type Command, EXIT_OK, printReport } from "./command.js";
import { READ_OPTIONS, openStdin } from "./hashCommand.js";
import { formatOptionLines, optionLines, section } from "./helpText.js";
import { reportNumber } from "./report.js";
import { commonConvertOptions } from "./sharedOptions.js";
import type { TensorStats } from "./stats.js";
import { STDIN_NAME } from "./stdio.js";
import { groupDigits } from "./text.js";

export const statsCommand: Command = {
  name: "stats",
  summary: "min, max, mean, std and NaN/Inf/zero counts of each tensor",
  options: READ_OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert stats <file> [--filter REGEX] [--json] [options]

Reads every tensor once and prints, per tensor, the min, max, mean and standard deviation
(population, ddof=0) of its values that are not NaN, in float64, as numpy's nanmin, nanmax,
nanmean and nanstd give them, and its counts of NaN, +Inf, -Inf and zeros. Every dtype but the
packed F4/F6 and the complex C64 (whose statistics are left empty). <file> may be - for stdin.

With --json, one line on stdout: {"version", "command": "stats", "ok", "input": {"file",
"format"}, "tensors": [{"name", "dtype", "shape", "min", "max", "mean", "std", "nan", "posinf",
"neginf", "zeros"}], "warnings", "error"?}; NaN and infinities are the strings "NaN",
"Infinity" and "-Infinity", and min/max/mean/std are null for a tensor without a non-NaN value.
${section("Options", optionLines(READ_OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section(
  "Format options",
  formatOptionLines(formats, formatOptions).filter((l) => !l.includes("when writing")),
)}
Exit status: 0 on success, 1 when the file is refused, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    if (positionals.length !== 1) throw new UsageError("stats takes one file: st-convert stats <file> [--json]");
    const file = positionals[0]!;
    const report = context.report;
    if (report.command !== "stats") throw new Error("stats runs with a stats report");
    report.input = { file: file === "-" ? STDIN_NAME : file, format: null };
    const stdin = file === "-" ? await openStdin(context) : undefined;
    try {
      const { stats } = await import("./stats.js");
      const result = await stats(stdin ?? file, {
        ...commonConvertOptions(values, context),
        signal: context.io.signal,
        onProgress: (done, total) => context.progress?.update(`reading ${file}`, done, total),
      });
      context.progress?.clear();
      report.input.format = result.format;
      report.ok = true;
      if (context.json) {
        report.tensors = result.tensors.map((t) => ({
          name: t.name,
          dtype: t.dtype,
          shape: t.shape,
          min: orNull(t.min),
          max: orNull(t.max),
          mean: orNull(t.mean),
          std: orNull(t.std),
          nan: t.nan,
          posinf: t.posinf,
          neginf: t.neginf,
          zeros: t.zeros,
        }));
        printReport(context);
      } else context.io.stdout(statsTable(report.input.file, result.format, result.tensors));
      return EXIT_OK;
    } finally {
      await stdin?.close();
    }
  },
};

function orNull(value: number | null) {
  return value === null ? null : reportNumber(value);
}

/** A number in at most 7 significant digits, as a table cell. */
export function shortNumber(value: number | null): string {
  if (value === null) return "-";
  if (Number.isNaN(value)) return "nan";
  if (!Number.isFinite(value)) return value > 0 ? "inf" : "-inf";
  if (Number.isInteger(value) && Math.abs(value) < 1e7) return String(value);
  const text = value.toPrecision(7);
  // 1.500000 → 1.5, 1.000000e+10 → 1e+10
  return text.includes("e") ? text.replace(/\.?0+e/, "e") : text.replace(/\.?0+$/, "");
}

function statsTable(file: string, format: string, tensors: readonly TensorStats[]): string {
  const head = ["name", "dtype", "shape", "min", "max", "mean", "std", "nan", "+inf", "-inf", "zeros"];
  const rows = tensors.map((t) => [
    t.name,
    t.dtype,
    `[${t.shape.join(", ")}]`,
    shortNumber(t.min),
    shortNumber(t.max),
    shortNumber(t.mean),
    shortNumber(t.std),
    groupDigits(t.nan),
    groupDigits(t.posinf),
    groupDigits(t.neginf),
    groupDigits(t.zeros),
  ]);
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  // Name, dtype and shape to the left; numbers to the right.
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i < 3 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!)))
      .join("  ")
      .trimEnd();
  return `${file}: ${format}\n\n${[line(head), ...rows.map(line)].join("\n")}\n`;
}
