/** The options convert, batch and info share, turned from parsed values into `convert()` options. */
import { type ParsedValues, listValue, pickFormatOptions, stringValue } from "./cliOptions.js";
import type { CommandContext } from "./command.js";
import type { ConvertOptions } from "./convert.js";
import { parseCastRule } from "@st-convert/core";
import { parseMetadataEntries, parsePattern, parseRenameRule } from "./transforms.js";

/** `from`, the transforms, the formats' options and the warning listener. */
export function commonConvertOptions(values: ParsedValues, context: CommandContext): ConvertOptions {
  return {
    from: stringValue(values, "from"),
    formatOptions: pickFormatOptions(values, context.formatOptions),
    formats: context.formats,
    onWarning: (message, file) => context.warn(file, message),
    metadata: parseMetadataEntries(listValue(values, "metadata")),
    rename: listValue(values, "rename").map(parseRenameRule),
    filter: listValue(values, "filter").map((p) => parsePattern(p, "--filter")),
    exclude: listValue(values, "exclude").map((p) => parsePattern(p, "--exclude")),
    cast: listValue(values, "cast").map(parseCastRule),
    recordCast: values["no-record"] !== true,
  };
}
