/** `st-convert [convert] <input> <output>`: one file into another. */
import { stat } from "node:fs/promises";
import type { ByteSink, ByteSource } from "@st-convert/core";
import { CONVERT_OPTIONS, GLOBAL_OPTIONS, type ParsedValues, SELECTION_OPTIONS, UsageError, WRITE_OPTIONS, stringValue } from "./cliOptions.js";
import { type Command, type CommandContext, EXIT_OK, printReport } from "./command.js";
import { folderEntryOf } from "./formats.js";
import { formatLines, formatOptionLines, optionLines, section } from "./helpText.js";
import { formatSize } from "./progress.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { STDIN_NAME, STDOUT_NAME } from "./stdio.js";
import { plural } from "./text.js";

const OPTIONS = { ...SELECTION_OPTIONS, ...WRITE_OPTIONS, ...CONVERT_OPTIONS };

export const convertCommand: Command = {
  name: "convert",
  summary: "convert one file into another (the default command: the word convert may be left out)",
  options: OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert [convert] <input> <output> [options]
       st-convert [convert] <input> -o <output> [options]

Converts one tensor file into another. The formats come from the file names (the longest known
extension), else from --from/--to; an input whose name says nothing is recognised by its content.
The output is written to a temporary file beside it and renamed into place only on success; an
existing output is replaced only with --force, keeping its permissions. A FIFO or a character
device (/dev/stdout) is written through, never replaced; a directory is refused.

- as the input reads stdin (the format from --from, else from the content); stdin that is not a
file is first copied to a scratch file in the temporary folder (TMPDIR), since readers need random
access. - as the output writes stdout (--to is then needed); with --json the report then goes to
stderr. A reader that goes away (| head) ends the conversion quietly with status 141.

--max-shard-size SIZE writes a sharded checkpoint as huggingface_hub splits it and transformers'
save_pretrained indexes it (model-00001-of-0000N.safetensors + model.safetensors.index.json; torch:
pytorch_model-….bin); the output is then the index, a checkpoint name (weights.safetensors: its
shards are weights-0000k-of-0000N.safetensors) or a folder (any other name: out, out/), and an output
that names an index (*.index.json) shards at 5GB without the option. A GGUF output is split as
gguf-py's GGUFWriter(split_max_size=...) splits it: model-0000k-of-0000N.gguf, each a GGUF with
split.no/split.count/split.tensors.count, no index (the output names the first file). All files of
a set appear together or not at all; --force replaces an existing set whole.

A folder that holds a .metadata file is a distributed checkpoint (torch.distributed.checkpoint) and
converts as one file: st-convert CKPT_DIR model.safetensors; st-convert model.safetensors CKPT_DIR
--to dcp writes one (a single-rank folder). Any other folder as the input is a model folder: st-convert MODEL_DIR OUT_DIR --to FORMAT converts each
of its checkpoints (single files, indexes with their shards), named as the Hub names them and
sharded as the source was (or as --max-shard-size says); --copy-other-files copies config.json,
tokenizer files and the rest, which are otherwise listed. Nothing lands in OUT_DIR unless all of it
succeeded.
${section("Options", optionLines(OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section("Format options", formatOptionLines(formats, formatOptions))}${section("Formats", formatLines(formats))}
Exit status: 0 on success, 1 when the input is refused or the conversion fails, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    const named = stringValue(values, "output");
    if (named !== undefined && positionals.length > 1) {
      throw new UsageError(
        positionals.length === 2
          ? "the output is given twice: as the second file and with -o"
          : "-o names one output file; for many inputs use --out-dir DIR (-O)",
      );
    }
    if (positionals.length === 0 || (positionals.length === 1 && named === undefined)) throw new UsageError("expected an input and an output file");
    if (positionals.length > 2) throw new UsageError(`expected two files (or --out-dir DIR for many), got ${positionals.length}`);
    const input = positionals[0]!;
    const output = named ?? positionals[1]!;
    const report = context.report;
    if (report.command !== "convert") throw new Error("convert runs with a convert report");
    if (
      input !== "-" &&
      (await stat(input).then(
        (s) => s.isDirectory(),
        () => false,
      )) &&
      (await folderEntryOf(input)) === undefined
    )
      return convertFolder(input, output, values, context);

    let source: (ByteSource & { close(): Promise<void> }) | undefined;
    try {
      if (input === "-") {
        if (context.io.openStdin === undefined) throw new UsageError("- as the input (stdin) is not available here");
        source = await context.io.openStdin();
      }
      let sink: ByteSink | undefined;
      if (output === "-") {
        if (context.io.stdoutSink === undefined) throw new UsageError("- as the output (stdout) is not available here");
        sink = context.io.stdoutSink();
        context.reportTo = "stderr";
      }
      if (output === "-" && values["max-shard-size"] !== undefined)
        throw new UsageError("--max-shard-size writes files; name a folder or an index as the output");
      report.input = { file: input === "-" ? STDIN_NAME : input, format: null };
      report.output = { file: output === "-" ? STDOUT_NAME : output, format: null };
      // Loaded here, not at start-up: `st-convert info` needs none of the writing code.
      const { convert } = await import("./convert.js");
      const result = await convert(source ?? input, sink ?? output, {
        ...commonConvertOptions(values, context),
        to: stringValue(values, "to"),
        force: values.force === true,
        allowEmpty: values["allow-empty"] === true,
        verify: values.verify === true,
        maxShardSize: stringValue(values, "max-shard-size"),
        signal: context.io.signal,
        onProgress: (done, total) => context.progress?.update(input, done, total),
      });
      context.progress?.clear();
      report.input.format = result.inputFormat;
      report.output.format = result.outputFormat;
      report.tensors = result.tensors;
      report.bytes = result.bytes;
      report.output.file = result.output;
      report.files = result.files;
      if (result.digest !== undefined) report.digest = result.digest;
      report.ok = true;
      if (context.json) printReport(context);
      else if (!context.quiet) {
        context.io.stderr(
          `st-convert: ${result.input} (${result.inputFormat}) -> ${result.output} (${result.outputFormat}${filesNote(result.files, result.output)}): ${plural(result.tensors, "tensor")}, ${formatSize(result.bytes)}\n`,
        );
      }
      return EXIT_OK;
    } finally {
      await source?.close();
    }
  },
};

/**
 * `st-convert MODEL_DIR OUT_DIR --to FORMAT`: every checkpoint of a model folder (single files and
 * indexes with their shards) into the same checkpoint in FORMAT; the other files copied with
 * --copy-other-files, else listed.
 */
async function convertFolder(input: string, output: string, values: ParsedValues, context: CommandContext): Promise<number> {
  const to = stringValue(values, "to");
  if (to === undefined) throw new UsageError("a model folder converts with --to FORMAT (the format of its checkpoints)");
  if (output === "-") throw new UsageError("a model folder converts into a folder, not stdout");
  const report = context.report;
  if (report.command !== "convert") throw new Error("convert runs with a convert report");
  report.input = { file: input, format: "model-folder" };
  report.output = { file: output, format: to };
  const { convertModel } = await import("./convertModel.js");
  const result = await convertModel(input, output, {
    ...commonConvertOptions(values, context),
    to,
    force: values.force === true,
    allowEmpty: values["allow-empty"] === true,
    verify: values.verify === true,
    maxShardSize: stringValue(values, "max-shard-size"),
    copyOtherFiles: values["copy-other-files"] === true,
    signal: context.io.signal,
  });
  for (const file of result.notCopied) context.warn(file, "not copied (not a checkpoint; --copy-other-files copies it)");
  report.output.format = result.outputFormat;
  report.files = [...result.checkpoints.flatMap((c) => c.files), ...result.copied];
  report.tensors = result.checkpoints.reduce((n, c) => n + c.tensors, 0);
  report.bytes = result.checkpoints.reduce((n, c) => n + c.bytes, 0);
  report.ok = true;
  if (context.json) printReport(context);
  else if (!context.quiet) {
    const lines = result.checkpoints.map((c) => `  ${c.input} -> ${c.output}${c.files.length > 1 ? ` (${filesNote(c.files, c.output).slice(2)})` : ""}`);
    if (result.copied.length > 0) lines.push(`  copied ${plural(result.copied.length, "other file")}`);
    context.io.stderr(
      `${lines.join("\n")}\nst-convert: ${input} -> ${output} (${result.outputFormat}): ${plural(result.checkpoints.length, "checkpoint")}, ${plural(report.tensors, "tensor")}, ${formatSize(report.bytes)}\n`,
    );
  }
  return EXIT_OK;
}

/** `, 2 shards and the index` for a sharded checkpoint, `, 3 files` for a split set without an index, nothing for one file. */
function filesNote(files: readonly string[], output: string): string {
  if (files.length <= 1) return "";
  return !output.endsWith(".index.json") ? `, ${plural(files.length, "file")} of a split set` : `, ${plural(files.length - 1, "shard")} and the index`;
}
