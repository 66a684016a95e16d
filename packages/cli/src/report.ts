/**
 * The one JSON report every command prints with `--json`: a single object on one line of stdout,
 * the same shape whether the command succeeded or failed. `report.schema.json` (in the package)
 * is its JSON Schema; `REPORT_VERSION` changes when a field changes meaning or goes away (adding a
 * field does not).
 */
import { isStConvertError } from "@st-convert/core";
import type { InspectedFile } from "./inspect.js";
import type { TensorTreeNode } from "@st-convert/core";
import { parameterCount } from "./text.js";

/** Version of the report's shape (`"version"` in every report). */
export const REPORT_VERSION = 2 as const;

/** A number for the report: NaN and the infinities spelled as strings (JSON has none). */
export function reportNumber(value: number): ReportNumber {
  if (Number.isFinite(value)) return value;
  return Number.isNaN(value) ? "NaN" : value > 0 ? "Infinity" : "-Infinity";
}

/** A non-fatal notice, with the file it concerns. */
export interface Warning {
  file: string;
  message: string;
}

/** Why a command failed: the error's code, its one-line message, and where. */
export interface ReportError {
  code: string;
  message: string;
  file: string | null;
  tensor: string | null;
}

/** A file and the format it was read or written as (null when the failure came first). */
export interface FileRef {
  file: string;
  format: string | null;
}

interface ReportBase {
  version: typeof REPORT_VERSION;
  ok: boolean;
  warnings: Warning[];
  error?: ReportError;
  /** Bytes fetched over the network for remote inputs (URLs, `hf://`; an index with its shards), retried ones included; absent when no input was remote. */
  fetched?: number;
}

/** `st-convert IN OUT --json`. */
export interface ConvertReport extends ReportBase {
  command: "convert";
  input: FileRef | null;
  output: FileRef | null;
  /** Every file written: the output alone, or a sharded checkpoint's shards and its index. */
  files: string[];
  tensors: number;
  bytes: number;
  /** With `--verify`: the checkpoint digest of the tensors written and read back (as `hash` gives it). */
  digest?: string;
}

/** `st-convert info FILE --json`. */
export interface InfoReport extends ReportBase {
  command: "info";
  input: FileRef | null;
  metadata: Record<string, string> | null;
  /** `stored`: how the file stores the tensor, where its format says (a GGUF tensor's ggml type and bytes). */
  tensors: { name: string; dtype: string; shape: number[]; bytes: number; stored?: { type: string; bytes: number } }[];
  totals: { tensors: number; parameters: number; bytes: number };
  /** Symbols the file's pickle names outside its reader's allow-list, none of them run (`[]` for formats that cannot name code). */
  globals?: string[];
  /** With `--tree`: the names grouped by their dotted prefixes, repeated groups folded. */
  tree?: TensorTreeNode;
}

/** One file of a batch. */
export interface BatchItem {
  input: FileRef;
  output: FileRef | null;
  status: "converted" | "planned" | "skipped" | "failed" | "interrupted";
  tensors: number | null;
  bytes: number | null;
  reason: string | null;
  error: ReportError | null;
  /** The checkpoint digest of the output's tensors, when taken (`--verify`, `--manifest`, an output `--skip-existing` read back). */
  digest?: string;
}

/** `st-convert INPUTS... --out-dir DIR --to FORMAT --json`. */
export interface BatchReport extends ReportBase {
  command: "batch";
  dryRun: boolean;
  outDir: string | null;
  files: BatchItem[];
  ignored: string[];
  stopped: boolean;
  totals: { converted: number; planned: number; skipped: number; failed: number; interrupted: number; tensors: number; bytes: number };
}

/** `st-convert hash FILE --json`. */
export interface HashReport extends ReportBase {
  command: "hash";
  input: FileRef | null;
  /** The checkpoint's digest; null until every tensor was hashed. */
  digest: string | null;
  /** Sorted by name (code-point order). */
  tensors: { name: string; dtype: string; shape: number[]; sha256: string }[];
  totals: { tensors: number; bytes: number };
}

/** A statistic that may be NaN or infinite: JSON has no such numbers, so they are spelled as JavaScript does. */
export type ReportNumber = number | "NaN" | "Infinity" | "-Infinity";

/** `st-convert stats FILE --json`. */
export interface StatsReport extends ReportBase {
  command: "stats";
  input: FileRef | null;
  /** In the file's order. min/max/mean/std are null when the tensor has no non-NaN value or no numeric dtype. */
  tensors: {
    name: string;
    dtype: string;
    shape: number[];
    min: ReportNumber | null;
    max: ReportNumber | null;
    mean: ReportNumber | null;
    std: ReportNumber | null;
    nan: number;
    posinf: number;
    neginf: number;
    zeros: number;
  }[];
}

/** One tensor of a diff. */
export interface DiffItem {
  name: string;
  /** `same`; `onlyInA`/`onlyInB`; `dtype`/`shape` when they differ (values then not compared, unless tolerances allow other dtypes); `values` when elements differ. */
  status: "same" | "onlyInA" | "onlyInB" | "dtype" | "shape" | "values";
  dtype: { a: string | null; b: string | null };
  shape: { a: number[] | null; b: number[] | null };
  /** Elements that differ (0 when equal; null when not compared). */
  differing: number | null;
  /** Largest |a − b| and |a − b| / |b| over the differing elements (null when none, or not comparable). */
  maxAbsDiff: ReportNumber | null;
  maxRelDiff: ReportNumber | null;
  /** Index (one number per dim) of the first differing element, in C order. */
  firstIndex: number[] | null;
}

/** `st-convert diff A B --json`. */
export interface DiffReport extends ReportBase {
  command: "diff";
  a: FileRef | null;
  b: FileRef | null;
  /** True when A and B are the same (by the rule asked for); null until both were compared. */
  same: boolean | null;
  /** The tolerances asked for; null for an exact comparison. */
  tolerance: { atol: number; rtol: number } | null;
  /** Sorted by name (code-point order); every name of either side. */
  tensors: DiffItem[];
  metadata: { onlyInA: string[]; onlyInB: string[]; differ: string[] };
  totals: { same: number; differ: number; onlyInA: number; onlyInB: number };
}

/** Any command's report; a usage error reports as the command it was meant for. */
export type Report = ConvertReport | InfoReport | BatchReport | HashReport | StatsReport | DiffReport;

/** The report's `error` for anything thrown. */
export function reportError(error: unknown, code = "Internal"): ReportError {
  if (isStConvertError(error)) return { code: error.code, message: error.message, file: error.file ?? null, tensor: error.tensor ?? null };
  const message = error instanceof Error ? error.message : String(error);
  return { code: (error as { name?: string } | null)?.name === "UsageError" ? "Usage" : code, message, file: null, tensor: null };
}

/** An empty report of `command`, to be filled as the command goes. */
export function emptyReport<C extends Report["command"]>(command: C): Extract<Report, { command: C }> {
  return blankReport(command) as Extract<Report, { command: C }>;
}

function blankReport(command: Report["command"]): Report {
  const base = { version: REPORT_VERSION, ok: false, warnings: [] as Warning[] };
  switch (command) {
    case "convert":
      return { ...base, command, input: null, output: null, files: [], tensors: 0, bytes: 0 };
    case "info":
      return { ...base, command, input: null, metadata: null, tensors: [], totals: { tensors: 0, parameters: 0, bytes: 0 } };
    case "hash":
      return { ...base, command, input: null, digest: null, tensors: [], totals: { tensors: 0, bytes: 0 } };
    case "stats":
      return { ...base, command, input: null, tensors: [] };
    case "diff":
      return {
        ...base,
        command,
        a: null,
        b: null,
        same: null,
        tolerance: null,
        tensors: [],
        metadata: { onlyInA: [], onlyInB: [], differ: [] },
        totals: { same: 0, differ: 0, onlyInA: 0, onlyInB: 0 },
      };
    case "batch":
      return {
        ...base,
        command,
        dryRun: false,
        outDir: null,
        files: [],
        ignored: [],
        stopped: false,
        totals: { converted: 0, planned: 0, skipped: 0, failed: 0, interrupted: 0, tensors: 0, bytes: 0 },
      };
  }
}

/** Fills an info report from what `inspectEntries()` found. */
export function fillInfoReport(report: InfoReport, file: string, found: InspectedFile): void {
  report.input = { file, format: found.format };
  report.metadata = found.metadata === null ? null : { ...found.metadata };
  const storedForm = found.formatSpec?.storedForm;
  report.tensors = found.tensors.map((t) => {
    const stored = storedForm?.call(found.formatSpec, t);
    const row = { name: t.name, dtype: t.dtype, shape: [...t.shape], bytes: t.byteLength };
    return stored === undefined ? row : { ...row, stored: { type: stored.type, bytes: stored.bytes } };
  });
  report.totals = infoTotals(found);
  report.globals = [...(found.globals ?? [])];
}

/** Tensors, parameters (elements) and bytes of a file's tensors. */
export function infoTotals(found: InspectedFile): { tensors: number; parameters: number; bytes: number } {
  let parameters = 0;
  let bytes = 0;
  for (const t of found.tensors) {
    parameters += parameterCount(t.shape);
    bytes += t.byteLength;
  }
  return { tensors: found.tensors.length, parameters, bytes };
}

/** One line for a failure: the error's own message (file, tensor, rule) and its code. */
export function describeError(error: unknown): string {
  if (isStConvertError(error)) return `${error.message} [${error.code}]`;
  return `internal error: ${error instanceof Error ? error.message : String(error)} (please report this)`;
}
