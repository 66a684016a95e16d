/** The options convert, batch and info share, turned from parsed values into `convert()` options. */
import { type ParsedValues, listValue, pickFormatOptions, stringValue } from "./cliOptions.js";
import type { CommandContext } from "./command.js";
import type { ConvertOptions } from "./convert.js";
import { parseCastRule } from "@st-convert/core";
import type { RemoteInputOptions } from "./remoteInput.js";
import { parseMetadataEntries, parsePattern, parseRenameRule } from "./transforms.js";

/** `from`, the transforms, the formats' options, the warning listener, and how URL inputs are read. */
export function commonConvertOptions(values: ParsedValues, context: CommandContext): ConvertOptions & { remote: RemoteInputOptions } {
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
    remote: remoteInputOptions(values, context),
  };
}

/**
 * How URL inputs are opened: `--allow-download`, and their traffic (an index's and its shards'
 * together) counted on the progress line and in the report's `fetched`; a whole-file download
 * shows as the line's progress until the conversion starts.
 */
export function remoteInputOptions(values: ParsedValues, context: CommandContext): RemoteInputOptions {
  let fetched = 0;
  return {
    allowDownload: values["allow-download"] === true,
    onFetched: (bytes) => {
      fetched += bytes;
      context.report.fetched = fetched;
      context.progress?.fetched(fetched);
    },
    onDownload: (done, size, input) => context.progress?.update(`downloading ${input}`, done, size),
  };
}
