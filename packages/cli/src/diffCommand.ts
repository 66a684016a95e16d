/** `st-convert diff <a> <b>`: whether two checkpoints hold the same tensors, exactly or within tolerances. */
import { GLOBAL_OPTIONS, type ParsedValues, UsageError, stringValue } from "./cliOptions.js";
import { type Command, EXIT_FAILURE, EXIT_OK, printReport } from "./command.js";
import type { DiffResult, TensorDiff } from "./diff.js";
import { READ_OPTIONS, openStdin } from "./hashCommand.js";
import { formatOptionLines, optionLines, section } from "./helpText.js";
import { type DiffItem, reportNumber } from "./report.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { shortNumber } from "./statsCommand.js";
import { STDIN_NAME } from "./stdio.js";
import { plural } from "./text.js";

const OPTIONS = {
  atol: { type: "string", valueName: "X", description: "absolute tolerance: values equal when |a - b| <= atol + rtol * |b| (torch.testing.assert_close)" },
  rtol: { type: "string", valueName: "Y", description: "relative tolerance (B is the expected side); with either, dtypes may differ" },
  metadata: { type: "boolean", description: "metadata differences count: exit 1 when the metadata differ too" },
  ...READ_OPTIONS,
} as const;

export const diffCommand: Command = {
  name: "diff",
  summary: "compare two checkpoints in any formats: names, dtypes, shapes and values",
  options: OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert diff <a> <b> [--atol X] [--rtol Y] [--metadata] [--json] [options]

Compares two checkpoints, in any formats st-convert reads; the selection (--filter, --exclude),
--rename, --cast and the format options apply to both. By default exactly: the same names, dtypes,
shapes and bytes. With --atol/--rtol, values are compared as torch.testing.assert_close does:
|a - b| <= atol + rtol * |b| (B the expected side), NaN equal to NaN, an infinity only to itself;
dtypes may then differ, every value compared in float64. Each tensor is read once from each file,
in blocks. Lists, per tensor, what differs: only in A or B, dtype or shape, or how many elements,
with the largest absolute and relative difference and the first differing index. Metadata
differences are listed, and count only with --metadata.

With --json, one line on stdout: {"version", "command": "diff", "ok", "a", "b", "same",
"tolerance", "tensors": [{"name", "status", "dtype": {"a", "b"}, "shape": {"a", "b"},
"differing", "maxAbsDiff", "maxRelDiff", "firstIndex"}], "metadata": {"onlyInA", "onlyInB",
"differ"}, "totals", "warnings", "error"?}.
${section("Options", optionLines(OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section(
  "Format options",
  formatOptionLines(formats, formatOptions).filter((l) => !l.includes("when writing")),
)}
Exit status: 0 when A and B are the same, 1 when they differ or an input is refused, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    if (positionals.length !== 2) throw new UsageError("diff takes two files: st-convert diff <a> <b> [--json]");
    const [a, b] = positionals as [string, string];
    if (a === "-" && b === "-") throw new UsageError("only one side of a diff can be - (stdin)");
    const atol = tolerance(values, "atol");
    const rtol = tolerance(values, "rtol");
    const report = context.report;
    if (report.command !== "diff") throw new Error("diff runs with a diff report");
    report.a = { file: a === "-" ? STDIN_NAME : a, format: null };
    report.b = { file: b === "-" ? STDIN_NAME : b, format: null };
    const stdin = a === "-" || b === "-" ? await openStdin(context) : undefined;
    try {
      const { diff } = await import("./diff.js");
      // --metadata is diff's own switch here, not convert's KEY=VALUE entries.
      const { metadata: compareMetadata, ...readValues } = values;
      const result = await diff(a === "-" ? stdin! : a, b === "-" ? stdin! : b, {
        ...commonConvertOptions(readValues, context),
        compareMetadata: compareMetadata === true,
        atol,
        rtol,
        signal: context.io.signal,
        onProgress: (done, total) => context.progress?.update(`comparing ${a} and ${b}`, done, total),
      });
      context.progress?.clear();
      const same = result.same;
      report.a.format = result.a.format;
      report.b.format = result.b.format;
      report.same = same;
      report.tolerance = result.tolerance;
      report.tensors = result.tensors.map(reportItem);
      report.metadata = result.metadata;
      report.totals = result.totals;
      report.ok = true;
      if (context.json) printReport(context);
      // -q: only the exit status says, as `cmp -s` does.
      else if (!context.quiet) context.io.stdout(diffText(result, report.a.file, report.b.file, same));
      return same ? EXIT_OK : EXIT_FAILURE;
    } finally {
      await stdin?.close();
    }
  },
};

function tolerance(values: ParsedValues, name: "atol" | "rtol"): number | undefined {
  const text = stringValue(values, name);
  if (text === undefined) return undefined;
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || value < 0) throw new UsageError(`--${name} ${JSON.stringify(text)}: expected a number of at least 0`);
  return value;
}

function reportItem(t: TensorDiff): DiffItem {
  const n = (v: number | null) => (v === null ? null : reportNumber(v));
  return { ...t, maxAbsDiff: n(t.maxAbsDiff), maxRelDiff: n(t.maxRelDiff) };
}

function diffText(result: DiffResult, a: string, b: string, same: boolean): string {
  const lines: string[] = [`--- ${a} (${result.a.format})`, `+++ ${b} (${result.b.format})`];
  for (const t of result.tensors) {
    switch (t.status) {
      case "same":
        continue;
      case "onlyInA":
        lines.push(`- ${t.name}: only in A (${t.dtype.a} [${t.shape.a!.join(", ")}])`);
        break;
      case "onlyInB":
        lines.push(`+ ${t.name}: only in B (${t.dtype.b} [${t.shape.b!.join(", ")}])`);
        break;
      case "dtype":
        lines.push(`! ${t.name}: dtype ${t.dtype.a} vs ${t.dtype.b}`);
        break;
      case "shape":
        lines.push(`! ${t.name}: shape [${t.shape.a!.join(", ")}] vs [${t.shape.b!.join(", ")}]`);
        break;
      case "values": {
        const where = t.firstIndex === null ? "" : `, first at [${t.firstIndex.join(", ")}]`;
        const size = t.maxAbsDiff === null ? "" : `, max abs diff ${shortNumber(t.maxAbsDiff)}, max rel diff ${shortNumber(t.maxRelDiff)}`;
        lines.push(`! ${t.name}: ${plural(t.differing ?? 0, "element")} differ${t.differing === 1 ? "s" : ""}${size}${where}`);
        break;
      }
    }
  }
  const m = result.metadata;
  for (const k of m.onlyInA) lines.push(`- metadata ${JSON.stringify(k)}: only in A`);
  for (const k of m.onlyInB) lines.push(`+ metadata ${JSON.stringify(k)}: only in B`);
  for (const k of m.differ) lines.push(`! metadata ${JSON.stringify(k)}: values differ`);
  const { totals } = result;
  const rule = result.tolerance === null ? "exactly" : `within atol ${result.tolerance.atol}, rtol ${result.tolerance.rtol}`;
  lines.push(
    `st-convert: ${same ? "same" : "different"} (${rule}): ${plural(totals.same, "tensor")} equal, ${totals.differ} differ, ${totals.onlyInA} only in A, ${totals.onlyInB} only in B`,
  );
  return `${lines.join("\n")}\n`;
}
