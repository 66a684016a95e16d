/** `st-convert [batch] <inputs or folders...> --out-dir DIR --to FORMAT`: many files at once. */
import { BATCH_OPTIONS, DEFAULT_JOBS, GLOBAL_OPTIONS, SELECTION_OPTIONS, UsageError, WRITE_OPTIONS, stringValue } from "./cliOptions.js";
import { type Command, EXIT_FAILURE, EXIT_OK, printReport } from "./command.js";
import type { BatchSummary } from "./convertMany.js";
import { formatLines, formatOptionLines, optionLines, section } from "./helpText.js";
import { type BatchItem, type BatchReport, reportError } from "./report.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { plural } from "./text.js";

const OPTIONS = { ...BATCH_OPTIONS, ...SELECTION_OPTIONS, ...WRITE_OPTIONS };

export const batchCommand: Command = {
  name: "batch",
  summary: "convert many files and folders into one output folder (chosen by --out-dir)",
  options: OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert [batch] <inputs or folders...> --out-dir DIR --to FORMAT [--jobs N] [--dry-run]

Converts every input into DIR as FORMAT. A folder is searched recursively for files of a known
format, keeping its layout below DIR; hidden entries are skipped, and so is DIR when it lies inside
the folder (when DIR is the folder itself, only the files this run writes are left out). A .json
file is taken only if it is tensor JSON (config.json is ignored), a sharded checkpoint's index is
left out (its shards convert one by one), and a GGUF split set converts once, through its first
file (NAME-00001-of-0000N.gguf). Every file is attempted; an existing output is skipped
unless --force. The summary names every failure.
${section("Options", optionLines(OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section("Format options", formatOptionLines(formats, formatOptions))}${section("Formats", formatLines(formats))}
For many machines: --shard K/N does part K of N (the inputs in sorted order, cut into N runs), so
N runs (a Slurm array, a Kubernetes Indexed Job) do the batch once; --skip-existing skips outputs
that read back whole, so a re-run after a crash finishes only what is missing; --manifest FILE
appends one JSON line per input (input, output, status, tensors, bytes, digest).

Exit status: 0 when every file converted or was skipped, 1 when any failed, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    const outDir = stringValue(values, "out-dir");
    const to = stringValue(values, "to");
    if (outDir === undefined) throw new UsageError("a batch needs --out-dir DIR (the folder of the outputs)");
    if (to === undefined) throw new UsageError("--out-dir needs --to FORMAT (the format of the outputs)");
    if (positionals.length === 0) throw new UsageError("--out-dir needs at least one input file or folder");
    if (positionals.includes("-")) throw new UsageError("- (stdin) cannot be part of a batch; convert it on its own");
    const report = context.report;
    if (report.command !== "batch") throw new Error("batch runs with a batch report");
    report.outDir = outDir;
    report.dryRun = values["dry-run"] === true;
    let done = 0;
    let bytesBefore = 0;
    const current = new Map<string, number>();
    let planned = 0;
    // Loaded here, not at start-up (see convertCommand.ts).
    const { convertMany } = await import("./convertMany.js");
    const summary = await convertMany(positionals, {
      ...commonConvertOptions(values, context),
      outDir,
      to,
      jobs: parseJobs(stringValue(values, "jobs")),
      dryRun: report.dryRun,
      force: values.force === true,
      allowEmpty: values["allow-empty"] === true,
      verify: values.verify === true,
      shard: parseShard(stringValue(values, "shard")),
      skipExisting: values["skip-existing"] === true,
      manifest: stringValue(values, "manifest"),
      signal: context.io.signal,
      onWarning: undefined,
      onEvent: (event) => {
        if (event.type === "planned") planned = event.jobs.length;
        else if (event.type === "warning") context.warn(event.file, event.message);
        else if (event.type === "progress") {
          current.set(event.job.input, event.done);
          let bytes = bytesBefore;
          for (const value of current.values()) bytes += value;
          context.progress?.update(`${done}/${planned} files`, bytes, undefined);
        } else if (event.type === "converted" || event.type === "failed" || event.type === "skipped" || event.type === "interrupted") {
          if (event.type === "converted") bytesBefore += event.result.bytes;
          current.delete(event.job.input);
          done++;
        }
      },
    });
    context.progress?.clear();
    // The report is filled only when it is printed: an item per file costs a little at 2,000 files.
    if (context.json) {
      fillBatchReport(report, summary, to);
      printReport(context);
    } else if (!context.quiet || summary.failed.length > 0) context.io.stderr(batchText(summary, context.quiet));
    return summary.failed.length > 0 || summary.stopped ? EXIT_FAILURE : EXIT_OK;
  },
};

/** `K/N`, with 1 ≤ K ≤ N. */
function parseShard(text: string | undefined): { part: number; of: number } | undefined {
  if (text === undefined) return undefined;
  const match = /^(\d+)\/(\d+)$/.exec(text);
  const part = Number(match?.[1]);
  const of = Number(match?.[2]);
  if (match === null || part < 1 || part > of) throw new UsageError(`--shard ${JSON.stringify(text)}: expected K/N with 1 <= K <= N (e.g. 3/8)`);
  return { part, of };
}

function parseJobs(text: string | undefined): number {
  if (text === undefined) return DEFAULT_JOBS;
  const jobs = Number(text);
  if (!Number.isInteger(jobs) || jobs < 1 || jobs > 64) throw new UsageError(`--jobs ${JSON.stringify(text)}: expected a whole number from 1 to 64`);
  return jobs;
}

function fillBatchReport(report: BatchReport, summary: BatchSummary, to: string): void {
  const items: BatchItem[] = [];
  for (const job of summary.converted) {
    items.push({
      input: { file: job.input, format: job.inputFormat ?? null },
      output: { file: job.output, format: job.outputFormat ?? to },
      status: summary.dryRun ? "planned" : "converted",
      tensors: job.tensors ?? null,
      bytes: job.bytes ?? null,
      ...(job.digest === undefined ? {} : { digest: job.digest }),
      reason: null,
      error: null,
    });
  }
  for (const job of summary.skipped) {
    const whole = summary.whole.get(job.output);
    items.push({
      input: { file: job.input, format: null },
      output: { file: job.output, format: to },
      status: "skipped",
      tensors: whole?.tensors ?? null,
      bytes: whole?.bytes ?? null,
      ...(whole === undefined ? {} : { digest: whole.digest }),
      reason: job.reason,
      error: null,
    });
  }
  for (const job of summary.failed) {
    items.push({
      input: { file: job.input, format: null },
      output: job.output === undefined ? null : { file: job.output, format: to },
      status: "failed",
      tensors: null,
      bytes: null,
      reason: null,
      error: { code: job.code, message: job.message.replace(/ \[\w+\]$/, ""), file: job.input, tensor: null },
    });
  }
  for (const job of summary.interrupted) {
    items.push({
      input: { file: job.input, format: null },
      output: { file: job.output, format: to },
      status: "interrupted",
      tensors: null,
      bytes: null,
      reason: "stopped by a signal before it finished; the output was not written",
      error: null,
    });
  }
  report.files = items;
  report.ignored = [...summary.ignored];
  report.stopped = summary.stopped;
  report.totals = {
    converted: summary.dryRun ? 0 : summary.converted.length,
    planned: summary.dryRun ? summary.converted.length : 0,
    skipped: summary.skipped.length,
    failed: summary.failed.length,
    interrupted: summary.interrupted.length,
    tensors: summary.converted.reduce((n, job) => n + (job.tensors ?? 0), 0),
    bytes: summary.converted.reduce((n, job) => n + (job.bytes ?? 0), 0),
  };
  report.ok = summary.failed.length === 0 && !summary.stopped;
  if (summary.stopped) {
    const message = `stopped by a signal: ${plural(summary.interrupted.length, "file")} interrupted, ${stoppedText(summary)}`;
    report.error = reportError(new Error(message), "Aborted");
  } else if (summary.failed.length > 0) {
    const attempted = summary.converted.length + summary.skipped.length + summary.failed.length;
    report.error = { code: "BatchFailed", message: `${summary.failed.length} of ${plural(attempted, "file")} failed (see files)`, file: null, tensor: null };
  }
}

function batchText(summary: BatchSummary, quiet: boolean): string {
  const lines: string[] = [];
  if (!quiet) {
    for (const job of summary.converted) lines.push(`  ${summary.dryRun ? "would convert" : "converted"}: ${job.input} -> ${job.output}`);
    for (const job of summary.skipped) lines.push(`  skipped: ${job.input} -> ${job.output}: ${job.reason}`);
  }
  for (const job of summary.failed) lines.push(`  failed: ${job.message}`);
  for (const job of summary.interrupted) lines.push(`  interrupted: ${job.input} -> ${job.output}: the output was not written`);
  const total = summary.converted.length + summary.skipped.length + summary.failed.length + summary.interrupted.length + summary.notStarted;
  if (!quiet && summary.ignored.length > 0) {
    lines.push(`  ignored ${plural(summary.ignored.length, "file")} whose content is not a tensor file (e.g. ${summary.ignored[0]})`);
  }
  const verb = summary.dryRun ? "would convert" : "converted";
  lines.push(
    `st-convert: ${verb} ${summary.converted.length}, skipped ${summary.skipped.length}, failed ${summary.failed.length}${summary.interrupted.length > 0 ? `, interrupted ${summary.interrupted.length}` : ""} (of ${plural(total, "file")})${summary.stopped ? `; stopped by a signal, ${stoppedText(summary)}` : ""}`,
  );
  return `${lines.join("\n")}\n`;
}

/** How many files of a stopped batch were never started. */
function stoppedText(summary: BatchSummary): string {
  return `${summary.notStarted} not started`;
}
