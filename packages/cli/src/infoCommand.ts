/** `st-convert info <file>`: a file's format, metadata and tensors, from its header. */
import { GLOBAL_OPTIONS, type OptionTable, SELECTION_OPTIONS, UsageError } from "./cliOptions.js";
import { type Command, EXIT_OK, printReport } from "./command.js";
import { type InspectedFile, inspectEntries } from "./inspect.js";
import { formatOptionLines, optionLines, section } from "./helpText.js";
import { formatSize } from "./progress.js";
import { fillInfoReport, infoTotals } from "./report.js";
import { type TensorTreeNode, tensorTree } from "@st-convert/core";
import { renderTensorTree } from "./renderTensorTree.js";
import { commonConvertOptions } from "./sharedOptions.js";
import { STDIN_NAME } from "./stdio.js";
import { groupDigits, parameterCount, plural } from "./text.js";

const OPTIONS: OptionTable = {
  from: SELECTION_OPTIONS.from!,
  filter: SELECTION_OPTIONS.filter!,
  exclude: SELECTION_OPTIONS.exclude!,
  cast: SELECTION_OPTIONS.cast!,
  "allow-download": SELECTION_OPTIONS["allow-download"]!,
  tree: {
    type: "boolean",
    description: "group names by their dotted prefixes, with parameters and bytes per group; repeated layers folded (layers.{0..31})",
  },
};

export const infoCommand: Command = {
  name: "info",
  summary: "list a file's format, metadata and tensors (reads headers only)",
  options: OPTIONS,
  takesFormatOptions: true,
  help: (formats, formatOptions) => `Usage: st-convert info <file> [--json] [options]

Lists what a tensor file holds: its format, its metadata and, for each tensor, the name, dtype,
shape and byte length, with the totals; where the file stores a tensor otherwise (a quantized GGUF
tensor), also how ("stored": the format's type and the bytes in the file). Long metadata values a
format can summarise (a GGUF tokenizer's token list) are shown as their type and length; --json
gives them whole. Only headers are read (a compressed archive may need
more). <file> may be - for stdin (copied to a scratch file first when it is a pipe).

With --json, one line on stdout: {"version", "command": "info", "ok", "input": {"file", "format"},
"metadata", "tensors": [{"name", "dtype", "shape", "bytes", "stored"?}], "totals": {"tensors", "parameters",
"bytes"}, "globals", "warnings", "error"?} (report.schema.json in the package describes every command's report).
"globals" lists the symbols a checkpoint's pickle names outside torch's weights-only allow-list
(none is ever run; one that runs code or reaches the system refuses the file: DangerousGlobal).
With --tree, also "tree": {"name", "tensors", "params", "bytes", "repeat"?, "dtype"?, "shape"?,
"children"}, a folded group's children describing one of its repeats.
${section("Options", optionLines(OPTIONS))}${section("Global options", optionLines(GLOBAL_OPTIONS))}${section(
  "Format options",
  formatOptionLines(formats, formatOptions).filter((l) => !l.includes("when writing")),
)}
Exit status: 0 on success, 1 when the file is refused, 2 on a usage error.
`,
  async run({ values, positionals }, context) {
    if (positionals.length !== 1) throw new UsageError("info takes one file: st-convert info <file> [--json]");
    const file = positionals[0]!;
    const report = context.report;
    if (report.command !== "info") throw new Error("info runs with an info report");
    report.input = { file: file === "-" ? STDIN_NAME : file, format: null };
    const stdin = file === "-" ? await openStdin(context) : undefined;
    try {
      const { formatOptions, from, formats, onWarning, filter, exclude, cast, remote } = commonConvertOptions(values, context);
      const found = await inspectEntries(stdin ?? file, { formatOptions, from, formats, onWarning, filter, exclude, cast, recordCast: false, remote });
      report.ok = true;
      // The report is filled only when it is printed: a copy of every entry costs ~10 ms at 50,000.
      const tree = values.tree === true ? tensorTree(found.tensors) : undefined;
      if (context.json) {
        fillInfoReport(report, report.input.file, found);
        if (tree !== undefined) report.tree = tree;
        printReport(context);
      } else {
        report.input.format = found.format;
        context.io.stdout(tree === undefined ? infoTable(report.input.file, found) : infoTree(report.input.file, found, tree));
      }
      return EXIT_OK;
    } finally {
      await stdin?.close();
    }
  },
};

/** The tree listing: the file, its metadata, the groups, the totals. */
function infoTree(file: string, found: InspectedFile, tree: TensorTreeNode): string {
  const totals = infoTotals(found);
  return `${file}: ${found.format}\nmetadata: ${metadataText(found)}\n\n${renderTensorTree(tree)}\n${plural(totals.tensors, "tensor")}, ${plural(totals.parameters, "parameter")}, ${formatSize(totals.bytes)} (${plural(totals.bytes, "byte")})\n`;
}

function metadataText(found: InspectedFile): string {
  // A long value its format can summarise (a GGUF tokenizer's token list) is shown short; --json gives it whole.
  const describe = found.formatSpec?.describeMetadata;
  return found.metadata === null
    ? "none"
    : Object.entries(found.metadata)
        .map(([k, v]) => `${k}=${describe?.call(found.formatSpec, k, v) ?? JSON.stringify(v)}`)
        .join(", ") || "{}";
}

async function openStdin(context: Parameters<Command["run"]>[1]) {
  if (context.io.openStdin === undefined) throw new UsageError("- as the input (stdin) is not available here");
  return context.io.openStdin();
}

/**
 * The listing, as one string written at once. Built column by column without an array per row:
 * a file of 50,000 tensors makes 50,000 lines, and neighbours usually share their shape and size,
 * whose text is then reused rather than made again.
 */
function infoTable(file: string, found: InspectedFile): string {
  const { tensors } = found;
  const count = tensors.length;
  const shapes: string[] = new Array(count);
  const sizes: string[] = new Array(count);
  // How the file stores each tensor, where its format says (a GGUF tensor's ggml type and bytes).
  const storedForm = found.formatSpec?.storedForm;
  const stored: string[] | undefined = storedForm === undefined ? undefined : new Array(count);
  const widths = [4, 5, 5, 5, 6]; // "name", "dtype", "shape", "bytes", "stored"
  let shape: readonly number[] = [];
  let shapeText = "[]";
  let size = 0;
  let sizeText = "0";
  // The totals, as infoTotals() counts them, in the same pass.
  let elements = 1;
  let parameters = 0;
  let bytes = 0;
  for (let i = 0; i < count; i++) {
    const t = tensors[i]!;
    if (!sameShape(t.shape, shape)) {
      shape = t.shape;
      shapeText = `[${shape.join(", ")}]`;
      elements = parameterCount(shape);
    }
    parameters += elements;
    bytes += t.byteLength;
    if (t.byteLength !== size) {
      size = t.byteLength;
      sizeText = groupDigits(size);
    }
    shapes[i] = shapeText;
    sizes[i] = sizeText;
    if (stored !== undefined) {
      const form = storedForm!(t);
      stored[i] = form === undefined ? "" : `${form.type} ${groupDigits(form.bytes)}`;
      if (stored[i]!.length > widths[4]!) widths[4] = stored[i]!.length;
    }
    if (t.name.length > widths[0]!) widths[0] = t.name.length;
    if (t.dtype.length > widths[1]!) widths[1] = t.dtype.length;
    if (shapeText.length > widths[2]!) widths[2] = shapeText.length;
    if (sizeText.length > widths[3]!) widths[3] = sizeText.length;
  }
  const [nameWidth, dtypeWidth, shapeWidth, sizeWidth, storedWidth] = widths as [number, number, number, number, number];
  const rest = (dtype: string, shapeCell: string, sizeCell: string, storedCell: string | undefined): string =>
    `  ${dtype.padEnd(dtypeWidth)}  ${shapeCell.padEnd(shapeWidth)}  ${sizeCell.padStart(sizeWidth)}${storedCell === undefined ? "" : `  ${storedCell.padEnd(storedWidth)}`.trimEnd()}`;
  const metadata = metadataText(found);
  // The text as parts joined once: a row is its name, its padding and what follows the name,
  // with no string made per row (50,000 rows made 100,000 strings for the collector to copy).
  const parts: string[] = new Array(3 * count + 5);
  parts[0] = `${file}: ${found.format}\nmetadata: ${metadata}\n\n`;
  parts[1] = "name".padEnd(nameWidth);
  parts[2] = `${rest("dtype", "shape", "bytes", stored === undefined ? undefined : "stored")}\n`;
  // Everything after the name, made again only when the row's dtype, shape, size or stored form changes.
  let dtype = "";
  let after = "";
  let storedText: string | undefined;
  const padding: string[] = [];
  let at = 3;
  for (let i = 0; i < count; i++) {
    const t = tensors[i]!;
    if (t.dtype !== dtype || shapes[i] !== shapeText || sizes[i] !== sizeText || stored?.[i] !== storedText || i === 0) {
      dtype = t.dtype;
      shapeText = shapes[i]!;
      sizeText = sizes[i]!;
      storedText = stored?.[i];
      after = `${rest(dtype, shapeText, sizeText, storedText)}\n`;
    }
    const pad = nameWidth - t.name.length;
    parts[at++] = t.name;
    parts[at++] = padding[pad] ??= " ".repeat(pad);
    parts[at++] = after;
  }
  parts[at++] = "\n";
  parts[at] = `${plural(count, "tensor")}, ${plural(parameters, "parameter")}, ${formatSize(bytes)} (${plural(bytes, "byte")})\n`;
  return parts.join("");
}

function sameShape(a: readonly number[], b: readonly number[]): boolean {
  if (a === b) return true;
  if (a.length !== b.length) return false;
  for (let j = 0; j < a.length; j++) if (a[j] !== b[j]) return false;
  return true;
}
