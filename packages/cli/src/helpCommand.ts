/** `st-convert help [command]`, and the general help `st-convert --help` prints. */
import { readFileSync } from "node:fs";
import type { FormatOption, TensorFormat } from "@st-convert/core";
import { GLOBAL_OPTIONS, UsageError } from "./cliOptions.js";
import type { Command } from "./command.js";
import { EXIT_OK } from "./command.js";
import { formatLines, optionLines, section } from "./helpText.js";

/** The commands `help` knows, filled in by `main` (which owns the list). */
export const helpTopics: Command[] = [];

export const helpCommand: Command = {
  name: "help",
  summary: "show the help of a command (st-convert help info), or this overview",
  options: {},
  takesFormatOptions: false,
  help: generalHelp,
  async run({ positionals }, context) {
    if (positionals.length > 1) throw new UsageError("help takes at most one command: st-convert help [convert|batch|info|hash|stats|diff]");
    const topic = positionals[0];
    if (topic === undefined) {
      context.io.stdout(generalHelp(context.formats, context.formatOptions));
      return EXIT_OK;
    }
    const command = helpTopics.find((c) => c.name === topic);
    if (command === undefined) throw new UsageError(`no command ${JSON.stringify(topic)}; the commands are ${helpTopics.map((c) => c.name).join(", ")}`);
    context.io.stdout(command.help(context.formats, context.formatOptions));
    return EXIT_OK;
  },
};

/** The overview: the commands, the global options, the formats. */
export function generalHelp(formats: readonly TensorFormat[], _formatOptions: readonly FormatOption[]): string {
  const commands = helpTopics.map((c) => `  ${c.name.padEnd(8)} ${c.summary}`);
  return `st-convert ${version()}: convert tensor files between safetensors and other formats, losslessly.

Usage:
  st-convert <input> <output> [options]                 convert one file (formats from the extensions)
  st-convert <inputs or folders...> --out-dir DIR --to FORMAT [--jobs N] [--dry-run]
                                                        convert many; folders are searched recursively
  st-convert info <file> [--json]                       list a file's tensors and metadata
  st-convert hash|stats <file> [--json]                 digests / statistics of each tensor
  st-convert diff <a> <b> [--atol X] [--rtol Y]         whether two checkpoints hold the same tensors
  st-convert help <command>                             the options of a command
  - as a file is stdin or stdout. A sharded checkpoint is read through its index:
  st-convert model.safetensors.index.json model.npz
${section("Commands", commands)}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section("Formats", formatLines(formats))}
Exit status: 0 on success, 1 when an input is refused or a conversion fails (in a batch: when any
file failed), 2 on a usage error. Outputs are written to a temporary file beside them and renamed
into place only on success; a refused input, Ctrl-C or a closed terminal leaves nothing behind.
`;
}

/** The package's version (tsc's output sits in dist/, one folder below package.json; the bundle's chunks in dist/chunks/, two). */
export function version(): string {
  const dir = new URL(".", import.meta.url);
  const manifest = new URL(dir.pathname.endsWith("/chunks/") ? "../../package.json" : "../package.json", dir);
  const pkg = JSON.parse(readFileSync(manifest, "utf8")) as { version: string };
  return pkg.version;
}
