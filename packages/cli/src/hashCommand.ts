/** `st-convert hash <file>`: SHA-256 of each tensor and of the checkpoint, the same in every format. */
import { GLOBAL_OPTIONS, SELECTION_OPTIONS, UsageError } from "./cliOptions.js";
import { type Command, type CommandContext, EXIT_OK, printReport } from "./command.js";
import { formatOptionLines, optionLines, section } from "./helpText.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { STDIN_NAME } from "./stdio.js";

/** The options that choose what is read: the same for hash, stats and diff. */
export const READ_OPTIONS = {
  from: SELECTION_OPTIONS.from!,
  filter: SELECTION_OPTIONS.filter!,
  exclude: SELECTION_OPTIONS.exclude!,
  rename: SELECTION_OPTIONS.rename!,
  cast: SELECTION_OPTIONS.cast!,
  "allow-download": SELECTION_OPTIONS["allow-download"]!,
};

export const hashCommand: Command = {
  name: "hash",
  summary: "SHA-256 of each tensor and of the checkpoint, the same whatever the format",
  options: READ_OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert hash <file> [--json] [options]

Prints the SHA-256 of each tensor's bytes in C order, little-endian (what Python's
hashlib.sha256(t.numpy().tobytes()) gives), and the checkpoint's digest: the SHA-256 of one UTF-8
line per tensor, sorted by name in code-point order, "NAME<TAB>DTYPE<TAB>SHAPE<TAB>SHA256<LF>"
(the safetensors dtype code, the shape as JSON without spaces: [2,3], []). The same tensors give
the same digest in every format. <file> may be - for stdin.

With --json, one line on stdout: {"version", "command": "hash", "ok", "input": {"file", "format"},
"digest", "tensors": [{"name", "dtype", "shape", "sha256"}], "totals": {"tensors", "bytes"},
"warnings", "error"?}.
${section("Options", optionLines(READ_OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section(
  "Format options",
  formatOptionLines(formats, formatOptions).filter((l) => !l.includes("when writing")),
)}
Exit status: 0 on success, 1 when the file is refused, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    if (positionals.length !== 1) throw new UsageError("hash takes one file: st-convert hash <file> [--json]");
    const file = positionals[0]!;
    const report = context.report;
    if (report.command !== "hash") throw new Error("hash runs with a hash report");
    report.input = { file: file === "-" ? STDIN_NAME : file, format: null };
    const stdin = file === "-" ? await openStdin(context) : undefined;
    try {
      const { hash } = await import("./hash.js");
      const result = await hash(stdin ?? file, {
        ...commonConvertOptions(values, context),
        signal: context.io.signal,
        onProgress: (done, total) => context.progress?.update(`hashing ${file}`, done, total),
      });
      context.progress?.clear();
      report.input.format = result.format;
      report.digest = result.digest;
      report.tensors = result.tensors;
      report.totals = { tensors: result.tensors.length, bytes: result.bytes };
      report.ok = true;
      if (context.json) printReport(context);
      else {
        const lines = result.tensors.map((t) => `${t.sha256}  ${t.name}`);
        lines.push(`${result.digest}  ${report.input.file} (checkpoint digest)`);
        context.io.stdout(`${lines.join("\n")}\n`);
      }
      return EXIT_OK;
    } finally {
      await stdin?.close();
    }
  },
};

/** Opens stdin as the input, where the command line offers it. */
export async function openStdin(context: CommandContext) {
  if (context.io.openStdin === undefined) throw new UsageError("- as the input (stdin) is not available here");
  return context.io.openStdin();
}
