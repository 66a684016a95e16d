/**
 * The `st-convert` command: picks the command (convert, info, batch, help), parses its options and
 * runs it. Each command is a module of its own with its help text; the work is done by
 * `convert()`, `convertMany()` and `inspect()`; formats come from the registry.
 */
import type { TensorFormat } from "@st-convert/core";
import { nativeAbsence, nativeIo } from "@st-convert/native";
import { batchCommand } from "./batchCommand.js";
import {
  BATCH_OPTIONS,
  CONVERT_OPTIONS,
  GLOBAL_OPTIONS,
  type OptionTable,
  SELECTION_OPTIONS,
  UsageError,
  WRITE_OPTIONS,
  collectFormatOptions,
  parseCommandLine,
} from "./cliOptions.js";
import { type CliIo, type Command, type CommandContext, EXIT_OK, reportFailure } from "./command.js";
import { convertCommand } from "./convertCommand.js";
import { FORMATS } from "./formats.js";
import { generalHelp, helpCommand, helpTopics, version } from "./helpCommand.js";
import { diffCommand } from "./diffCommand.js";
import { hashCommand } from "./hashCommand.js";
import { infoCommand } from "./infoCommand.js";
import { statsCommand } from "./statsCommand.js";
import { createProgressLine } from "./progress.js";
import { emptyReport } from "./report.js";

export { type CliIo, EXIT_BROKEN_PIPE, EXIT_FAILURE, EXIT_OK, EXIT_USAGE } from "./command.js";

/** The commands, in the order the help lists them. */
const COMMANDS: readonly Command[] = [convertCommand, batchCommand, infoCommand, hashCommand, statsCommand, diffCommand, helpCommand];
helpTopics.push(...COMMANDS);

/** Every option name any command knows: format options may not reuse one. */
const RESERVED: OptionTable = { ...GLOBAL_OPTIONS, ...SELECTION_OPTIONS, ...WRITE_OPTIONS, ...CONVERT_OPTIONS, ...BATCH_OPTIONS };

/** Runs the command line `argv` (without `node` and the script) and returns the exit status. */
export async function main(argv: readonly string[], io: CliIo, formats: readonly TensorFormat[] = FORMATS): Promise<number> {
  const formatOptions = collectFormatOptions(formats, RESERVED);
  const { command, args, named } = pickCommand(argv);
  const json = args.includes("--json");
  const context: CommandContext = {
    io,
    formats,
    formatOptions,
    json,
    quiet: args.includes("--quiet") || args.includes("-q"),
    progress: undefined,
    report: emptyReport(command.name === "help" ? "convert" : command.name),
    reportTo: "stdout",
    warn(file, message) {
      context.report.warnings.push({ file, message });
      if (context.quiet) return;
      context.progress?.clear();
      io.stderr(`st-convert: warning: ${file}: ${message}\n`);
    },
  };
  let debug = args.includes("--debug");
  try {
    const table = { ...GLOBAL_OPTIONS, ...command.options };
    const parsed = parseCommandLine(args, table, command.takesFormatOptions ? formatOptions : [], command.name);
    debug = parsed.values.debug === true;
    if (parsed.values.version === true) {
      // In one word, whether the native helpers (kernel copies, CRC-32, cast and JSON loops) are in
      // use; with --debug, why not.
      const loaded = nativeIo() !== undefined;
      const line = `st-convert ${version()} (${loaded ? "native" : "javascript"})\n`;
      io.stdout(debug ? `${line}native helpers: ${loaded ? "loaded" : `not loaded: ${nativeAbsence}`}\n` : line);
      return EXIT_OK;
    }
    if (parsed.values.help === true) {
      // `st-convert --help` is the overview; `st-convert info --help` (or `convert --help`) a command's own.
      io.stdout(named ? command.help(formats, formatOptions) : generalHelp(formats, formatOptions));
      return EXIT_OK;
    }
    const quiet = parsed.values.quiet === true;
    const canDraw = io.stderrIsTTY === true && io.term !== "dumb" && !quiet && !json;
    const running: CommandContext = Object.assign(context, { quiet, progress: canDraw ? createProgressLine(io.stderr, io.columns) : undefined });
    const status = await command.run(parsed, running);
    running.progress?.clear();
    return status;
  } catch (error) {
    context.progress?.clear();
    return reportFailure(error, context, debug, command.name);
  }
}

/**
 * The command a command line asks for: its first word when that names one; else a batch when an
 * output folder is given, else a single conversion. (A file called `info` is `./info`.)
 */
function pickCommand(argv: readonly string[]): { command: Command; args: readonly string[]; named: boolean } {
  const first = argv[0];
  const named = COMMANDS.find((c) => c.name === first);
  if (named !== undefined) return { command: named, args: argv.slice(1), named: true };
  const batch = argv.some((a) => a === "--out-dir" || a.startsWith("--out-dir=") || a === "-O" || /^-[a-zA-Z]*O/.test(a));
  if (!batch && argv.some((a) => a === "--jobs" || a === "-j" || a.startsWith("--jobs=") || a === "--dry-run" || a === "-n")) {
    return { command: usageOnly("--jobs and --dry-run go with --out-dir (batch conversion)"), args: [], named: false };
  }
  return { command: batch ? batchCommand : convertCommand, args: argv, named: false };
}

/** A stand-in command that only reports a usage mistake found before parsing. */
function usageOnly(message: string): Command {
  return {
    ...convertCommand,
    run: async () => {
      throw new UsageError(message);
    },
  };
}
