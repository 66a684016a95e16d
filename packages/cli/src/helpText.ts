/** Pieces of the help texts: option tables in columns, the formats' own options, the format list. */
import type { FormatOption, TensorFormat } from "@st-convert/core";
import type { OptionTable } from "./cliOptions.js";

/** Width of the flag column. */
const FLAG_WIDTH = 26;

/** `  -f, --force               replace …` lines for a table of options. */
export function optionLines(table: OptionTable): string[] {
  return Object.entries(table).map(([name, spec]) => {
    const flag = `${spec.short === undefined ? "    " : `-${spec.short}, `}--${name}${spec.type === "string" ? ` ${spec.valueName ?? "VALUE"}` : ""}`;
    return `  ${flag.padEnd(FLAG_WIDTH)} ${spec.description}`;
  });
}

/** The formats' options, each with the formats it belongs to and the side it applies to. */
export function formatOptionLines(formats: readonly TensorFormat[], formatOptions: readonly FormatOption[]): string[] {
  return formatOptions.map((o) => {
    const flag = `    --${o.name}${o.type === "string" ? ` ${o.valueName ?? "VALUE"}` : ""}`;
    const owners = formats.filter((f) => f.options?.some((x) => x.name === o.name)).map((f) => f.name);
    const side = o.appliesTo === "both" ? "" : o.appliesTo === "read" ? " when reading" : " when writing";
    return `  ${flag.padEnd(FLAG_WIDTH)} ${o.description}${o.multiple === true ? " (repeatable)" : ""} [${owners.join(", ")}${side}]`;
  });
}

/** One line per format: name, extensions, what it is. */
export function formatLines(formats: readonly TensorFormat[]): string[] {
  const nameWidth = Math.max(...formats.map((f) => f.name.length));
  const extensionWidth = Math.max(...formats.map((f) => f.extensions.join(", ").length));
  return formats.map((f) => `  ${f.name.padEnd(nameWidth)}  ${f.extensions.join(", ").padEnd(extensionWidth)}  ${f.description}`);
}

/** A titled block, or nothing when there are no lines. */
export function section(title: string, lines: readonly string[]): string {
  return lines.length === 0 ? "" : `\n${title}:\n${lines.join("\n")}\n`;
}
