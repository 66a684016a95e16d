/**
 * `st-convert`: the command and its library API. `convert()` turns one tensor file into another,
 * `inspect()` lists what a file holds; both behave exactly like the command.
 */
export { type ConvertOptions, type ConvertResult, type FileReport, type InspectOptions, convert, inspect } from "./convert.js";
export { FORMATS, detectInputFormat, detectOutputFormat, formatByExtension, formatByName } from "./formats.js";
export { type CliIo, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, main } from "./main.js";
