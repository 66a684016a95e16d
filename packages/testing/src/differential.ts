/**
 * The differential fuzzer: mutants of reference-made files go through st-convert's reader and
 * the reference's (`fixtures/reference_verdicts.py`, one long-running Python process), and every
 * file where one accepts and the other refuses, or both accept with different tensors, is a
 * failure unless a named, documented deliberate difference ({@link KNOWN_DIFFERENCES}, listed in
 * `docs/security.md` with its reason) explains it. The same property for writers: for random
 * tensor sets, what each writer emits reads back the same through our reader and the
 * reference's, or the writer refused before its first byte.
 *
 * Everything is seeded: mutant `i` of format `F` under seed `S` is the same file on every run, a
 * failure prints its seed and index and keeps the file in a temporary folder.
 *
 * This package does not depend on the readers (their tests depend on it): the caller passes our
 * reader and writers in, as functions that return verdicts.
 */
import { type ChildProcessWithoutNullStreams, spawn } from "node:child_process";
import { createHash } from "node:crypto";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { type Mutator, mutate } from "./mutators.js";
import { Random } from "./Random.js";
import { zipRecordsLie } from "./zipModel.js";

/** One tensor as a reader gives it: bytes by their SHA-256 (C order, little-endian). */
export interface TensorView {
  name: string;
  /** A safetensors code; from numpy also `V<n>` (raw void of n bytes) or numpy's name of a dtype safetensors lacks. */
  dtype: string;
  shape: number[];
  /** Null when the reference did not hash it (past its size bound); `bytes` then says how many. */
  sha256: string | null;
  bytes?: number;
}

/** What st-convert's reader made of a file. */
export type OurVerdict =
  | {
      ok: true;
      tensors: TensorView[];
      metadata?: Readonly<Record<string, string>> | null;
      /** Leaves (flax, torch) or members (npz) that are not tensors. */
      skipped?: number;
      /** Names of npz members skipped as not arrays. */
      others?: string[];
      aliases?: Readonly<Record<string, string>>;
      warnings: string[];
    }
  | { ok: false; code: string; message: string };

/** What the reference made of a file (`reference_verdicts.py`'s answer). */
export type ReferenceVerdict =
  | {
      ok: true;
      tensors: TensorView[];
      metadata?: Readonly<Record<string, string>> | null;
      skipped?: number;
      others?: { name: string; bytes: number }[];
      aliases?: Readonly<Record<string, string>>;
      kind?: "npy" | "npz";
    }
  | {
      ok: false;
      /** The exception's class; `ReferenceHung`, `ReferenceCrashed` or `ReferenceGarbled` when the process gave no answer. */
      error: string;
      message: string;
      /** The reference's error name (safetensors). */
      code?: string;
    };

/** Our reader, as the caller wires it: every tensor's bytes read and hashed. Rejects only on a bug (not an StConvertError). */
export type OurReader = (bytes: Uint8Array, fileName: string, options?: { dtypes?: readonly string[] }) => Promise<OurVerdict>;

/** Seconds the reference may take on one file before its process is killed and restarted. */
export const REFERENCE_TIMEOUT_MS = 60_000;
/** Time our reader may take on one mutant (a few KiB): far above need, it only catches hangs. */
export const OUR_TIMEOUT_MS = 10_000;
/** Examples kept (files on disk) per class of failure. */
export const EXAMPLES_PER_CLASS = 5;

const SCRIPT = fileURLToPath(new URL("../../../fixtures/reference_verdicts.py", import.meta.url));

/** The reference Python behind one long-running `reference_verdicts.py`, asked one file at a time. */
export class ReferenceReader {
  readonly #python: string;
  #child: ChildProcessWithoutNullStreams | undefined;
  #lines: AsyncIterator<string> | undefined;
  #stderr = "";
  #queue: Promise<unknown> = Promise.resolve();
  /** Times the process was restarted after a hang or a crash. */
  restarts = 0;

  constructor(python: string) {
    this.#python = python;
  }

  async #start(): Promise<void> {
    const child = spawn(this.#python, [SCRIPT], {
      stdio: ["pipe", "pipe", "pipe"],
      env: { ...process.env, PYTHONHASHSEED: "0", JAX_PLATFORMS: "cpu", OMP_NUM_THREADS: "1", PYTHONUNBUFFERED: "1" },
    });
    this.#stderr = "";
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (text: string) => {
      this.#stderr = (this.#stderr + text).slice(-4000);
    });
    child.stdin.on("error", () => {}); // a dead process: its next read reports it
    this.#child = child;
    this.#lines = createInterface({ input: child.stdout })[Symbol.asyncIterator]();
    const ready = await this.#next(REFERENCE_TIMEOUT_MS * 3);
    if (ready === undefined || !ready.startsWith('{"ready"')) {
      throw new Error(`reference_verdicts.py did not start: ${ready ?? "no answer"}\n${this.#stderr}`);
    }
  }

  async #next(timeout: number): Promise<string | undefined> {
    const lines = this.#lines!;
    let timer: NodeJS.Timeout | undefined;
    const expired = new Promise<"timeout">((resolve) => {
      timer = setTimeout(() => resolve("timeout"), timeout);
    });
    try {
      const result = await Promise.race([lines.next(), expired]);
      if (result === "timeout") return "timeout";
      return result.done === true ? undefined : result.value;
    } finally {
      clearTimeout(timer);
    }
  }

  #stop(): void {
    const child = this.#child;
    this.#child = undefined;
    this.#lines = undefined;
    if (child !== undefined && child.exitCode === null) child.kill("SIGKILL");
  }

  /** The reference's verdict on the file at `path`. */
  verdict(path: string): Promise<ReferenceVerdict> {
    const run = this.#queue.then(() => this.#ask(path));
    this.#queue = run.catch(() => {});
    return run;
  }

  async #ask(path: string): Promise<ReferenceVerdict> {
    if (this.#child === undefined) await this.#start();
    this.#child!.stdin.write(`${path}\n`);
    const line = await this.#next(REFERENCE_TIMEOUT_MS);
    if (line === "timeout" || line === undefined) {
      const stderr = this.#stderr.trim().split("\n").slice(-1)[0] ?? "";
      const signal = this.#child?.signalCode;
      this.#stop();
      this.restarts++;
      return line === "timeout"
        ? { ok: false, error: "ReferenceHung", message: `no verdict within ${REFERENCE_TIMEOUT_MS} ms` }
        : { ok: false, error: "ReferenceCrashed", message: `the reference process died (${signal ?? "exit"}): ${stderr}` };
    }
    try {
      return JSON.parse(line) as ReferenceVerdict;
    } catch {
      // Something printed to stdout besides the answer: the process is out of step, so restart it.
      this.#stop();
      this.restarts++;
      return { ok: false, error: "ReferenceGarbled", message: line.slice(0, 200) };
    }
  }

  /** Ends the process. */
  async close(): Promise<void> {
    await this.#queue;
    const child = this.#child;
    if (child === undefined) return;
    const exited = new Promise<void>((resolve) => child.once("exit", () => resolve()));
    child.stdin.end();
    const timer = setTimeout(() => child.kill("SIGKILL"), 5_000);
    await exited;
    clearTimeout(timer);
    this.#child = undefined;
  }
}

// -- comparing verdicts -----------------------------------------------------------------------

/** Bytes per element of each safetensors code (sub-byte types as fractions). */
const ITEM_BYTES: Readonly<Record<string, number>> = {
  BOOL: 1,
  U8: 1,
  I8: 1,
  F8_E5M2: 1,
  F8_E4M3: 1,
  F8_E8M0: 1,
  F8_E4M3FNUZ: 1,
  F8_E5M2FNUZ: 1,
  I16: 2,
  U16: 2,
  F16: 2,
  BF16: 2,
  I32: 4,
  U32: 4,
  F32: 4,
  C64: 8,
  F64: 8,
  I64: 8,
  U64: 8,
  F4: 0.5,
  F6_E2M3: 0.75,
  F6_E3M2: 0.75,
};

/** The safetensors codes, with their size in bits. */
export const DTYPE_BITS: Readonly<Record<string, number>> = Object.fromEntries(Object.entries(ITEM_BYTES).map(([k, v]) => [k, v * 8]));

/** True when two dtypes describe the same bytes: equal, or numpy's raw void (`V<n>`, either side) of the other's item size. */
function sameDtype(a: string, b: string): boolean {
  if (a === b) return true;
  const void_ = (v: string, code: string) => {
    const m = /^V(\d+)$/.exec(v);
    return m !== null && ITEM_BYTES[code] === Number(m[1]);
  };
  return void_(a, b) || void_(b, a);
}

const byName = (a: TensorView, b: TensorView): number => (a.name < b.name ? -1 : a.name > b.name ? 1 : (a.sha256 ?? "") < (b.sha256 ?? "") ? -1 : 1);

/** What differs between two tensor lists (as multisets by name), or undefined when nothing does. */
export function tensorDifference(reference: readonly TensorView[], ours: readonly TensorView[]): string | undefined {
  const r = [...reference].sort(byName);
  const o = [...ours].sort(byName);
  const names = (list: TensorView[]) => list.map((t) => JSON.stringify(t.name)).join(",");
  if (names(r) !== names(o)) return `names (reference ${names(r).slice(0, 200)}; ours ${names(o).slice(0, 200)})`;
  for (let i = 0; i < r.length; i++) {
    const a = r[i]!;
    const b = o[i]!;
    if (!sameDtype(a.dtype, b.dtype)) return `dtype of ${JSON.stringify(a.name)} (reference ${a.dtype}; ours ${b.dtype})`;
    if (a.shape.length !== b.shape.length || a.shape.some((d, k) => d !== b.shape[k])) {
      return `shape of ${JSON.stringify(a.name)} (reference [${a.shape}]; ours [${b.shape}])`;
    }
    if (a.sha256 !== null && b.sha256 !== null && a.sha256 !== b.sha256) return `bytes of ${JSON.stringify(a.name)}`;
  }
  return undefined;
}

function sameMetadata(a: Readonly<Record<string, string>> | null | undefined, b: Readonly<Record<string, string>> | null | undefined): boolean {
  const entries = (m: Readonly<Record<string, string>> | null | undefined) => JSON.stringify(Object.entries(m ?? {}).sort(([x], [y]) => (x < y ? -1 : 1)));
  return entries(a) === entries(b);
}

/** Whether and how two verdicts on one file disagree. */
export type Comparison =
  | { kind: "both-accept" }
  | { kind: "both-refuse" }
  | { kind: "we-accept" }
  | { kind: "we-refuse" }
  | { kind: "different"; what: string };

/** Compares the verdicts on a file of `format`. */
export function compareVerdicts(format: string, ours: OurVerdict, reference: ReferenceVerdict): Comparison {
  if (!ours.ok && !reference.ok) return { kind: "both-refuse" };
  if (ours.ok && !reference.ok) return { kind: "we-accept" };
  if (!ours.ok) return { kind: "we-refuse" };
  if (!reference.ok) throw new Error("unreachable");
  const tensors = tensorDifference(reference.tensors, ours.tensors);
  if (tensors !== undefined) return { kind: "different", what: tensors };
  if (format === "safetensors" && !sameMetadata(reference.metadata, ours.metadata)) {
    return { kind: "different", what: `metadata (reference ${JSON.stringify(reference.metadata)}; ours ${JSON.stringify(ours.metadata)})` };
  }
  if (format === "torch" && !sameMetadata(reference.aliases, ours.aliases)) {
    return { kind: "different", what: `aliases (reference ${JSON.stringify(reference.aliases)}; ours ${JSON.stringify(ours.aliases)})` };
  }
  if ((format === "flax" || format === "torch") && reference.skipped !== undefined && ours.skipped !== undefined && reference.skipped !== ours.skipped) {
    return { kind: "different", what: `skipped leaves (reference ${reference.skipped}; ours ${ours.skipped})` };
  }
  if (format === "npz" && reference.kind === "npz") {
    const a = (reference.others ?? []).map((o) => o.name).sort();
    const b = [...(ours.others ?? [])].sort();
    if (JSON.stringify(a) !== JSON.stringify(b))
      return { kind: "different", what: `members that are not arrays (reference ${JSON.stringify(a)}; ours ${JSON.stringify(b)})` };
  }
  return { kind: "both-accept" };
}

/** A message with its particulars (numbers, quoted names, paths) blanked, to group failures by class. */
export function messageShape(message: string): string {
  return message
    .replace(/\/[^\s'"]*\/st-convert-differential-[^\s'"]*/g, "FILE")
    .replace(/'[^']*'|"[^"]*"/g, "'…'")
    .replace(/0x[0-9a-f]+|\d+/gi, "N")
    .slice(0, 90);
}

/** The class a failure is counted under. */
export function failureClass(comparison: Comparison, ours: OurVerdict, reference: ReferenceVerdict): string {
  switch (comparison.kind) {
    case "we-accept":
      return `we accept; the reference refuses (${reference.ok ? "" : `${reference.error}: ${messageShape(reference.message)}`})`;
    case "we-refuse":
      return `we refuse (${ours.ok ? "" : ours.code}); the reference accepts`;
    case "different":
      return `both accept; ${comparison.what.split(" (")[0]!.replace(/ of ".*"$/, "")} differ`;
    default:
      return comparison.kind;
  }
}

// -- the documented differences -----------------------------------------------------------

/** One file, both verdicts, for the predicates of {@link KNOWN_DIFFERENCES}. */
export interface DifferentialCase {
  format: string;
  bytes: Uint8Array;
  ours: OurVerdict;
  reference: ReferenceVerdict;
  comparison: Comparison;
}

/** A deliberate difference from the reference, documented in docs/security.md under its `id`. */
export interface KnownDifference {
  /** Named in docs/security.md (a test checks it is there). */
  readonly id: string;
  readonly formats: readonly string[];
  /** What we do and what the reference does, in a few words. */
  readonly summary: string;
  /** Why we differ on purpose. */
  readonly reason: string;
  matches(c: DifferentialCase): boolean;
}

/** True when the reference's own view lists a name twice (zipfile keeps both members, np.load reads the last for both). */
function hasDuplicateNames(v: ReferenceVerdict): boolean {
  if (!v.ok) return false;
  const names = [...v.tensors.map((t) => t.name), ...(v.others ?? []).map((o) => o.name)];
  return new Set(names).size !== names.length;
}

const isZip = (bytes: Uint8Array): boolean => bytes[0] === 0x50 && bytes[1] === 0x4b;
/** The npy magic: `\x93NUMPY`. */
const isNpy = (bytes: Uint8Array): boolean =>
  bytes.byteLength >= 6 && bytes[0] === 0x93 && bytes[1] === 0x4e && bytes[2] === 0x55 && bytes[3] === 0x4d && bytes[4] === 0x50 && bytes[5] === 0x59;
/** Whether the archive's first local header names an `.npy` member (the content that makes a file npz). */
const firstMemberIsNpy = (bytes: Uint8Array): boolean => {
  if (bytes.byteLength < 30 || bytes[2] !== 0x03 || bytes[3] !== 0x04) return false;
  const length = bytes[26]! | (bytes[27]! << 8);
  return new TextDecoder("latin1").decode(bytes.subarray(30, 30 + length)).endsWith(".npy");
};
const refusesWith = (c: DifferentialCase, ...codes: string[]): boolean => !c.ours.ok && codes.includes(c.ours.code);
const referenceAccepts = (c: DifferentialCase): boolean => c.reference.ok;
const referenceRefuses = (c: DifferentialCase, pattern: RegExp): boolean =>
  c.ours.ok && !c.reference.ok && pattern.test(`${c.reference.error}: ${c.reference.message}`);
const referenceDtypes = (c: DifferentialCase): string[] => (c.reference.ok ? c.reference.tensors.map((t) => t.dtype) : []);
const referenceShapes = (c: DifferentialCase): number[][] => (c.reference.ok ? c.reference.tensors.map((t) => t.shape) : []);
const ourMessage = (c: DifferentialCase): string => (c.ours.ok ? "" : c.ours.message);

/**
 * The deliberate differences, each a predicate over both verdicts. A disagreement none of them
 * matches is a failure. Keep each as narrow as the rule it names: a predicate that matched every
 * refusal of ours would hide the next class.
 */
export const KNOWN_DIFFERENCES: readonly KnownDifference[] = [
  {
    id: "duplicate-keys",
    formats: ["safetensors", "flax", "npz", "torch"],
    summary: "a name or key given twice: we refuse (DuplicateKey, or the first entry's own fault); the reference keeps the last",
    reason: "the hidden first entry is a classic confusion attack; the safetensors README forbids duplicates, and one file must have one meaning",
    matches: (c) => referenceAccepts(c) && (refusesWith(c, "DuplicateKey") || (!c.ours.ok && hasDuplicateNames(c.reference))),
  },
  {
    id: "zip-records-that-lie",
    formats: ["npz", "torch"],
    summary:
      "a member whose CRC-32 or sizes the archive misstates (a stored member whose two sizes differ, data that inflates short or long, a size that runs into the next member or that DEFLATE cannot produce): we refuse (BadCrc, MemberSizeMismatch, OverlappingMembers, BadZipFile); zipfile checks only when a read reaches the member's end (np.load stops at the array's last byte), torch does not check CRCs",
    reason:
      "every member is checked whole, so that a tampered archive is refused whichever tool reads it, and an overlapping or impossible size (the zip-bomb shapes) is refused before a byte is inflated",
    matches: (c) =>
      referenceAccepts(c) &&
      refusesWith(c, "BadCrc", "MemberSizeMismatch", "OverlappingMembers", "BadZipFile") &&
      zipRecordsLie(c.bytes, { zeroCrcUnchecked: c.format === "torch" }),
  },
  {
    id: "torch-zip-by-zipfile-rules",
    formats: ["torch"],
    summary:
      "a torch archive that CPython's zipfile refuses but torch's miniz reads (a local header naming another member, a UTF-8 flag on a name that is not UTF-8, a directory signature or zip version zipfile rejects): we refuse (BadZipFile, Unsupported)",
    reason:
      "one zip reader serves npz and torch, with zipfile's rules (the stricter of the two on these points): a local header that disagrees with the directory is how zip parsers are made to read two different files",
    matches: (c) =>
      referenceAccepts(c) && (refusesWith(c, "BadZipFile") || (refusesWith(c, "Unsupported") && /zip version|encrypt|compression/i.test(ourMessage(c)))),
  },
  {
    id: "torch-crc-checked",
    formats: ["torch"],
    summary: "a torch record whose CRC-32 is not its bytes' (and not 0, torch's 'not computed'): we refuse (BadCrc); torch never checks CRCs",
    reason:
      "a record whose bytes changed after it was written is corrupt or tampered with; 0 is what torch writes when asked not to compute CRCs, so it is let through",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "BadCrc"),
  },
  {
    id: "zip-directory-overrun",
    formats: ["npz", "torch"],
    summary:
      "a central directory entry whose name, extra or comment length runs past the directory's declared size: we refuse (BadZipFile, 'Truncated central directory'); zipfile stops reading the directory there and drops the members after it without a word",
    reason: "a member dropped silently is a tensor lost; a directory that contradicts its own size is corrupt",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "BadZipFile") && /Truncated central directory/.test(ourMessage(c)),
  },
  {
    id: "zip-methods-numpy-never-writes",
    formats: ["npz"],
    summary:
      "a member compressed by a method other than stored or deflated (lzma, bzip2), or encrypted, even one that holds no array: we refuse (Unsupported); zipfile reads lzma and bzip2",
    reason: "numpy and torch write only stored and deflated members; each extra decompressor is attack surface for no real file",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "Unsupported") && /compression method|encrypt/i.test(ourMessage(c)),
  },
  {
    id: "dimension-past-2^53",
    formats: ["safetensors", "npy", "npz", "flax", "torch"],
    summary: "an empty tensor with a dimension past 2^53 − 1: we refuse (Unsupported); the reference reads it",
    reason: "a JavaScript number cannot hold the dimension exactly; no real file needs one",
    matches: (c) =>
      referenceAccepts(c) &&
      refusesWith(c, "Unsupported", "InvalidShape", "InvalidTensor") &&
      referenceShapes(c).some((s) => s.some((d) => d > Number.MAX_SAFE_INTEGER)),
  },
  {
    id: "no-safetensors-dtype",
    formats: ["npy", "npz", "flax", "torch"],
    summary: "a dtype safetensors has no code for (complex128, strings, objects, structured, datetime, int4…): we refuse by name; the reference reads it",
    reason: "st-convert's tensor model is safetensors' dtypes; a tensor it cannot represent is refused by name rather than dropped or reinterpreted",
    matches: (c) =>
      referenceAccepts(c) &&
      refusesWith(c, "UnsupportedDtype", "UnknownDtype", "InvalidDescr") &&
      referenceDtypes(c).some((d) => !(d in ITEM_BYTES) && !/^V\d+$/.test(d)),
  },
  {
    id: "void-without-dtype",
    formats: ["npy", "npz"],
    summary: "a raw void array of a size no declaration covers (V3, V16…): we refuse (UndeclaredVoidDtype, UnsupportedDtype); numpy returns raw bytes",
    reason: "safetensors has no untyped bytes; guessing a dtype would produce a plausible but wrong tensor",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "UndeclaredVoidDtype", "UnsupportedDtype") && referenceDtypes(c).some((d) => /^V\d+$/.test(d)),
  },
  {
    id: "comment-dtype-contradicts-member",
    formats: ["npz"],
    summary: "st-convert's archive comment records a dtype a member's bytes cannot hold, or is malformed: we refuse (InvalidMetadata); numpy ignores comments",
    reason:
      "the comment is st-convert's own record of true dtypes; a contradiction means the archive was altered, and believing either side could change the tensor",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidMetadata"),
  },
  {
    id: "npy-member-not-an-array",
    formats: ["npz"],
    summary: "a member named *.npy that does not start as an npy array: we refuse (BadMagic); numpy returns its raw bytes",
    reason: "a member named as an array that is not one is a corrupted or crafted archive; returning bytes where an array was named would drop a tensor",
    matches: (c) => c.reference.ok && c.reference.kind === "npz" && (c.reference.others ?? []).length > 0 && refusesWith(c, "BadMagic"),
  },
  {
    id: "archive-without-arrays",
    formats: ["npz"],
    summary: "an archive whose members hold no array at all: we refuse (NoArrays); numpy opens it and returns bytes",
    reason: "converting it would write an empty file and look like success (a PyTorch checkpoint named .npz is the common case)",
    matches: (c) => c.reference.ok && c.reference.tensors.length === 0 && (c.reference.others ?? []).length > 0 && refusesWith(c, "NoArrays"),
  },
  {
    id: "npz-name-is-npy",
    formats: ["npz"],
    summary: "a file named .npz that holds an .npy (no archive): we refuse (BadZipFile, AmbiguousFormat); np.load reads the array",
    reason: "the name promises an archive; np.load decides by content, so one file would convert two ways depending on the tool",
    matches: (c) => c.reference.ok && c.reference.kind === "npy" && !c.ours.ok,
  },
  {
    id: "ml-dtypes-f1",
    formats: ["npy", "npz"],
    summary: "ml_dtypes' own descr '<f1' (float8_e5m2): we read it; np.load cannot",
    reason: "ml_dtypes writes it for float8_e5m2 and its bytes are unambiguous",
    matches: (c) => referenceRefuses(c, /f1'/) && c.ours.ok && c.ours.tensors.some((t) => t.dtype === "F8_E5M2"),
  },
  {
    id: "npy-ambiguous-polyglot",
    formats: ["npy"],
    summary: "an .npy whose trailing bytes are a zip archive: we refuse (AmbiguousFormat); np.load reads the array",
    reason: "np.load reads the array, every unzip the archive: one file with two meanings",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "AmbiguousFormat"),
  },
  {
    id: "npy-header-escape-outside-ascii",
    formats: ["npy", "npz"],
    summary: "an npy header naming a character outside ASCII and µ/μ with \\N{…}: we refuse (InvalidHeader); ast.literal_eval reads it",
    reason: "no header key or dtype string can hold such a character; the literal parser keeps to the escapes headers use",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidHeader") && /\\N\{/.test(Buffer.from(c.bytes).toString("latin1")),
  },
  {
    id: "npy-big-endian-void",
    formats: ["npy", "npz"],
    summary: "a void descr of more than one byte marked big-endian ('>V2'): we refuse (UnsupportedDtype); numpy drops the byte order and keeps the raw bytes",
    reason:
      "ml_dtypes writes a big-endian bfloat16 as '>V2' and means the byte order; numpy ignores it: either reading gives one of them a wrong tensor (save such an array little-endian first)",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "UnsupportedDtype") && /marked big-endian/.test(ourMessage(c)),
  },
  {
    id: "npy-subarray-descr",
    formats: ["npy"],
    summary:
      "a subarray descr ('6i4', ('<f4', (2,))) whose data holds only shape × base elements: np.load of a file on disk reads it as the base type (numpy.fromfile); we refuse (UnsupportedDtype)",
    reason:
      "numpy itself gives such a file two verdicts: from a stream or an npz member it refuses it, from a file it reads the base elements; np.save never writes one",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "UnsupportedDtype") && /subarray/.test(ourMessage(c)),
  },
  {
    id: "flax-stricter-arrays",
    formats: ["flax"],
    summary:
      "ndarray payloads flax reads loosely (negative or -1 dimensions numpy infers, a shape that is a bare int, nil or a string rather than a list, array bytes as a msgpack str, dtype spellings other than dtype.name, chunks of mixed dtypes or of more than one dimension): we refuse (InvalidArray, UnknownDtype, InvalidChunkedArray)",
    reason:
      "a file with one meaning names each array's dtype and shape exactly as flax writes them; an inferred dimension or a reinterpreted string is a second meaning",
    matches: (c) =>
      referenceAccepts(c) &&
      (refusesWith(c, "InvalidChunkedArray") ||
        (refusesWith(c, "InvalidArray") && /not a msgpack bin|negative|not a list of dimensions/.test(ourMessage(c))) ||
        (refusesWith(c, "UnknownDtype") && referenceDtypes(c).every((d) => d in ITEM_BYTES || /^V\d+$/.test(d)))),
  },
  {
    id: "flax-names-past-limits",
    formats: ["flax"],
    summary:
      "names past MAX_NAME_LENGTH, a key that is not a string on an array's path, or a numpy-scalar (ext 3) map key anywhere: we refuse (LimitExceeded, InvalidName)",
    reason:
      "a tensor needs a name that survives every format; flax keeps any hashable key. A numpy scalar key equals the int, float, str or bytes of its value in Python, so which keys repeat would depend on numpy's equality for every dtype; flax never writes one",
    matches: (c) => referenceAccepts(c) && (refusesWith(c, "LimitExceeded") || (refusesWith(c, "InvalidName") && /key/.test(ourMessage(c)))),
  },
  {
    id: "torch-reads-more-than-weights-only",
    formats: ["torch"],
    summary:
      "pickles torch.load(weights_only=True) refuses for their opcodes or globals (protocols 1, 4, 5; argparse.Namespace, numpy scalars, any unknown callable): we read the tensors and skip the rest, running nothing",
    reason: "nothing in a pickle is ever called here, so an unknown global is only an opaque value; the tensors beside it are still the file's tensors",
    matches: (c) => c.ours.ok && !c.reference.ok && c.reference.error === "UnpicklingError",
  },
  {
    id: "torch-pickle-protocol-past-5",
    formats: ["torch"],
    summary: "a PROTO opcode past 5: we refuse (UnpicklingError), as CPython's pickle does; torch's weights-only unpickler does not check it",
    reason: "no pickler writes a protocol past pickle.HIGHEST_PROTOCOL (5); a file that claims one is corrupt or crafted",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "UnpicklingError") && /protocol/.test(ourMessage(c)),
  },
  {
    id: "torch-long-comment-einval",
    formats: ["torch"],
    summary: "a small archive whose comment runs close to 64 KiB: torch fails (OSError EINVAL); we read the checkpoint",
    reason:
      "miniz seeks to a negative offset when the file is shorter than the window it searches for the end record; the same archive past about 64 KiB reads in torch, so the refusal is a reference bug, not a rule of the format",
    matches: (c) => referenceRefuses(c, /Invalid argument/) && isZip(c.bytes),
  },
  {
    id: "torch-calls-that-fail-when-run",
    formats: ["torch"],
    summary:
      "a pickle whose rebuild arguments hold a call that fails when torch runs it (a _rebuild_sparse_tensor with missing arguments, an in-place operation on a leaf that requires grad): torch refuses; we read the tensors",
    reason:
      "st-convert runs nothing in a pickle, so it cannot know that a call would fail; refusing every unknown call in those positions would refuse what torch reads (torch.Size(), set())",
    matches: (c) => referenceRefuses(c, /in-place operation|required positional argument/),
  },
  {
    id: "torch-extension-npz-content",
    formats: ["torch"],
    summary:
      "a .pt/.bin file that is an .npy, or a zip whose first member is an .npy (and that also holds checkpoint records elsewhere): the content decides and we read it as npy or npz, as np.load does; torch refuses it ('not in a subdirectory'; no version record in the .npy's folder, which torch takes as the archive's root; miniz's own refusal of a zip detail that zipfile reads; or its legacy loader's), or reads the checkpoint records beside it while we refuse the file by the npz reader's rules",
    reason:
      "the torch extensions are shared by other files (.bin above all), so content decides; we read this file as an npz, by the npz reader's rules (the arrays np.load reads, and its documented differences)",
    matches: (c) =>
      (isNpy(c.bytes) && referenceRefuses(c, /./)) ||
      (isZip(c.bytes) &&
        (referenceRefuses(c, /not in a subdirectory: [^/]*\.npy$/) ||
          (referenceRefuses(c, /PytorchStreamReader failed reading zip archive|not in a subdirectory|hasRecord\("version"\)/) && firstMemberIsNpy(c.bytes)) ||
          (referenceAccepts(c) && !c.ours.ok && firstMemberIsNpy(c.bytes)))),
  },
  {
    id: "torch-directory-record",
    formats: ["torch"],
    summary:
      "a record torch reads (a storage, data.pkl, byteorder, version…) whose directory entry carries MS-DOS's directory attribute (0x10): we refuse (InvalidCheckpoint); torch's miniz extracts nothing from a 'directory', so torch.load returns whatever memory the buffer held (a different tensor on every load)",
    reason: "a tensor of uninitialised memory is not the file's content; st-convert never invents bytes",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidCheckpoint") && /marked as a directory/.test(ourMessage(c)),
  },
  {
    id: "torch-build-rewrites",
    formats: ["torch"],
    summary:
      "a BUILD that would rewrite a tensor or a storage (set_(*state) on a Tensor, a Parameter state of four or five items, a true state on a storage): we refuse (UnpicklingError); torch applies it",
    reason:
      "torch.save never writes these; applying them means running set_ and attribute updates that replace a tensor's storage, shape or data, which a reader that runs nothing should not imitate",
    matches: (c) =>
      referenceAccepts(c) &&
      refusesWith(c, "UnpicklingError") &&
      /BUILD on (a tensor with|a parameter with a state of [45] items|a storage with|an object made by torch\.)/.test(ourMessage(c)),
  },
  {
    id: "torch-storage-from-call",
    formats: ["torch"],
    summary:
      "a call of torch.storage.UntypedStorage or TypedStorage with arguments (a size, a sequence of bytes): we refuse (UnpicklingError); torch makes the storage, of uninitialised bytes for a size",
    reason: "a checkpoint's storages come from its persistent ids; one made by a call holds bytes the file does not carry",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "UnpicklingError") && /builds storages only from persistent ids/.test(ourMessage(c)),
  },
  {
    id: "torch-tensor-as-metadata",
    formats: ["torch"],
    summary:
      "a tensor given as a rebuild function's metadata argument: we refuse (InvalidTensor); torch tests its truth, which fails unless it has one element, and reads the file when that element is zero",
    reason: "metadata is a dict of tensor attributes; a tensor there is a crafted file, and its meaning would hang on a value nothing here reads",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidTensor") && /metadata argument .* is a tensor/.test(ourMessage(c)),
  },
  {
    id: "torch-stricter-storages",
    formats: ["torch"],
    summary:
      "a storage key declared with two classes or sizes: we refuse (InvalidStorage, StorageSizeMismatch); torch keeps the first (a storage record longer than its declaration both refuse now)",
    reason: "a storage has one dtype and one size; a longer record hides bytes no tensor accounts for",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidStorage", "StorageSizeMismatch"),
  },
  {
    id: "torch-big-endian-v3-dtypes",
    formats: ["torch"],
    summary: "a big-endian checkpoint's U16/U32/U64 tensors: we swap them; torch 2.13 leaves them unswapped",
    reason: "the byte order the file declares applies to every element; torch's omission is a bug in the reference",
    matches: (c) =>
      c.comparison.kind === "different" &&
      /^bytes of/.test(c.comparison.what) &&
      c.ours.ok &&
      c.ours.tensors.some(
        (t) => ["U16", "U32", "U64"].includes(t.dtype) && c.comparison.kind === "different" && c.comparison.what.includes(JSON.stringify(t.name)),
      ),
  },
  {
    id: "torch-storage-never-zero-filled",
    formats: ["torch"],
    summary:
      "a tensor whose storage key is not in a legacy checkpoint's key list (or has no data/<key> record): we refuse (MissingStorage); torch's legacy loader leaves that storage as allocated, uninitialised",
    reason: "a tensor of whatever memory held is a plausible but wrong output; st-convert never zero-fills or invents bytes",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "MissingStorage"),
  },
  {
    id: "torch-non-tensor-keys",
    formats: ["torch"],
    summary: "a tensor under a dict key that is neither str nor int: we refuse (InvalidName); torch.load returns the dict",
    reason: "the key becomes the tensor's name in every other format; a float or tuple key has no faithful spelling",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "InvalidName"),
  },
  {
    id: "expanded-view-past-limit",
    formats: ["torch"],
    summary: "a view whose C-order copy is larger than MAX_EXPANDED_BYTES (stride 0 over a small storage): we refuse (LimitExceeded); torch materialises it",
    reason: "an expansion bomb: 32 stored elements cannot earn gigabytes of output",
    matches: (c) => referenceAccepts(c) && refusesWith(c, "LimitExceeded"),
  },
];

/**
 * Classes of disagreement the differential fuzzer found that are not deliberate: bugs, reported
 * to the readers' owners with a reproducer (docs/security.md lists them). They are counted and
 * printed on every run but do not fail it, so that the run still catches the next class; remove
 * an entry when its fix lands (the predicate then never matches, and a regression fails the run).
 */
export const OPEN_DISAGREEMENTS: readonly KnownDifference[] = [];

// -- the mutant loop ----------------------------------------------------------------------

/** A format to fuzz: its reference-made seeds and its mutators. */
export interface DifferentialTarget {
  format: string;
  /** The extension mutants are saved with (the reference is chosen by it). */
  extension: string;
  seeds: readonly { name: string; bytes: Uint8Array }[];
  mutators: readonly Mutator[];
  /** False for st-convert's JSON form: only our verdict is checked (a coded refusal, never a crash). */
  hasReference: boolean;
}

/** One failure, kept on disk. */
export interface FailureExample {
  index: number;
  file: string;
  seedFile: string;
  steps: string[];
  ours: string;
  reference: string;
}

/** The figures of one run. */
export interface DifferentialReport {
  format: string;
  seed: number;
  mutants: number;
  bothAccept: number;
  bothRefuse: number;
  /** Mutants explained by each deliberate difference. */
  known: Record<string, number>;
  /** The first mutant each deliberate difference explained, for review. */
  knownExamples: Record<string, string>;
  /** Failures by class. */
  failures: Record<string, { count: number; examples: FailureExample[] }>;
  /** Mutants in each open (found, not yet fixed) class, with the first one's file kept. */
  open: Record<string, { count: number; example: FailureExample }>;
  /** Mutants the reference gave no verdict on (it hung or crashed). */
  referenceSilent: Record<string, number>;
  /** Folder holding the failures' files (removed when there were none). */
  dir: string;
}

/** Options of {@link runDifferential}. */
export interface DifferentialOptions {
  target: DifferentialTarget;
  /** Seeds of other formats, for polyglot mutants. */
  others: readonly Uint8Array[];
  ours: OurReader;
  reference?: ReferenceReader;
  seed: number;
  /** Mutants to run; with `deadline`, the run also stops when the time (ms since epoch) is up. */
  mutants: number;
  deadline?: number;
  /** Where mutants are written; default a fresh folder in the system's temporary folder. */
  dir?: string;
  known?: readonly KnownDifference[];
  open?: readonly KnownDifference[];
  /** Keep the first file of each open class (long runs, for reproducers). Default false: only failures' files stay. */
  keepOpenExamples?: boolean;
  /** Receives a progress line now and then. */
  log?: (line: string) => void;
}

/** A stable number for a format name, so that each format gets its own mutant stream under one seed. */
function formatNumber(format: string): number {
  let h = 0x811c9dc5;
  for (const c of format) h = Math.imul(h ^ c.charCodeAt(0), 0x01000193) >>> 0;
  return h;
}

/** Mutant `index` of `target` under `seed`: the same bytes on every run. */
export function differentialMutant(
  target: DifferentialTarget,
  others: readonly Uint8Array[],
  seed: number,
  index: number,
): { seedFile: string; bytes: Uint8Array; steps: string[] } {
  const random = new Random(seed, formatNumber(target.format), index);
  const chosen = random.pick(target.seeds);
  const { bytes, steps } = mutate(
    chosen.bytes,
    target.mutators,
    {
      random,
      seeds: target.seeds.map((s) => s.bytes),
      others,
    },
    3,
  );
  return { seedFile: chosen.name, bytes, steps };
}

async function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const expired = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what}: no verdict within ${ms} ms (hang?)`)), ms);
  });
  try {
    return await Promise.race([promise, expired]);
  } finally {
    clearTimeout(timer);
  }
}

const describeOurs = (v: OurVerdict): string => (v.ok ? `${v.tensors.length} tensor(s)` : `${v.code}: ${v.message.slice(0, 200)}`);
const describeReference = (v: ReferenceVerdict): string =>
  v.ok ? `${v.tensors.length} tensor(s)` : `${v.error}${v.code === undefined ? "" : ` (${v.code})`}: ${v.message.slice(0, 200)}`;

/** Classifies one file: "agree", a documented difference's id, an open class's id, or a failure class; `silent` when the reference gave no verdict. */
export function judge(
  format: string,
  bytes: Uint8Array,
  ours: OurVerdict,
  reference: ReferenceVerdict | undefined,
  known: readonly KnownDifference[] = KNOWN_DIFFERENCES,
  open: readonly KnownDifference[] = OPEN_DISAGREEMENTS,
): { kind: "agree" | "known" | "open" | "failure" | "silent"; label: string } {
  if (reference === undefined || (!reference.ok && reference.error === "NoReference")) return { kind: "agree", label: ours.ok ? "both-accept" : "both-refuse" };
  if (!reference.ok && ["ReferenceHung", "ReferenceCrashed", "ReferenceGarbled", "Timeout"].includes(reference.error)) {
    return { kind: "silent", label: reference.error };
  }
  const comparison = compareVerdicts(format, ours, reference);
  if (comparison.kind === "both-accept" || comparison.kind === "both-refuse") return { kind: "agree", label: comparison.kind };
  const c: DifferentialCase = { format, bytes, ours, reference, comparison };
  const difference = known.find((k) => k.formats.includes(format) && k.matches(c));
  if (difference !== undefined) return { kind: "known", label: difference.id };
  const found = open.find((k) => k.formats.includes(format) && k.matches(c));
  if (found !== undefined) return { kind: "open", label: found.id };
  return { kind: "failure", label: failureClass(comparison, ours, reference) };
}

/**
 * Runs mutants of one format through both readers and returns the figures. Never throws for a
 * disagreement: the caller decides (the test fails when `failures` is not empty).
 */
export async function runDifferential(options: DifferentialOptions): Promise<DifferentialReport> {
  const { target, seed } = options;
  const known = options.known ?? KNOWN_DIFFERENCES;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), `st-convert-differential-${target.format}-${seed}-`));
  mkdirSync(dir, { recursive: true });
  const report: DifferentialReport = {
    format: target.format,
    seed,
    mutants: 0,
    bothAccept: 0,
    bothRefuse: 0,
    known: {},
    knownExamples: {},
    open: {},
    failures: {},
    referenceSilent: {},
    dir,
  };
  let lastLog = Date.now();
  for (let index = 0; index < options.mutants; index++) {
    if (options.deadline !== undefined && Date.now() >= options.deadline) break;
    const { seedFile, bytes, steps } = differentialMutant(target, options.others, seed, index);
    const file = join(dir, `${target.format}-${index}${target.extension}`);
    // Our reader is told the name the reference sees (the stem names a single .npy's tensor).
    const fileName = basename(file);
    writeFileSync(file, bytes);
    let ours: OurVerdict;
    let label: string;
    let kind: "agree" | "known" | "open" | "failure" | "silent";
    let reference: ReferenceVerdict | undefined;
    try {
      ours = await withTimeout(options.ours(bytes, fileName), OUR_TIMEOUT_MS, `${target.format} mutant ${index}`);
      reference = target.hasReference && options.reference !== undefined ? await options.reference.verdict(file) : undefined;
      ({ kind, label } = judge(target.format, bytes, ours, reference, known, options.open ?? OPEN_DISAGREEMENTS));
    } catch (error) {
      // Our reader threw something that is not an StConvertError, or hung: a failure in itself.
      ours = { ok: false, code: "crash", message: error instanceof Error ? (error.stack ?? error.message) : String(error) };
      kind = "failure";
      label = `our reader crashed or hung: ${messageShape(error instanceof Error ? error.message : String(error))}`;
    }
    report.mutants++;
    if (kind === "agree") {
      if (label === "both-accept") report.bothAccept++;
      else report.bothRefuse++;
    } else if (kind === "known") {
      report.known[label] = (report.known[label] ?? 0) + 1;
      report.knownExamples[label] ??=
        `mutant ${index} of ${seedFile} by ${steps.join(" + ")}: ours ${describeOurs(ours).slice(0, 120)}; reference ${reference === undefined ? "-" : describeReference(reference).slice(0, 120)}`;
    } else if (kind === "silent") report.referenceSilent[label] = (report.referenceSilent[label] ?? 0) + 1;
    let keep = false;
    const example = (): FailureExample => ({
      index,
      file,
      seedFile,
      steps,
      ours: describeOurs(ours),
      reference: reference === undefined ? "-" : describeReference(reference),
    });
    if (kind === "open") {
      const entry = report.open[label];
      if (entry === undefined) {
        keep = options.keepOpenExamples === true;
        report.open[label] = { count: 1, example: example() };
      } else entry.count++;
    }
    if (kind === "failure") {
      const entry = (report.failures[label] ??= { count: 0, examples: [] });
      entry.count++;
      if (entry.examples.length < EXAMPLES_PER_CLASS) {
        keep = true;
        entry.examples.push(example());
      }
    }
    if (!keep) rmSync(file, { force: true });
    if (options.log !== undefined && Date.now() - lastLog > 30_000) {
      lastLog = Date.now();
      options.log(`${target.format}: ${report.mutants} mutants, ${Object.values(report.failures).reduce((n, f) => n + f.count, 0)} failures`);
    }
  }
  if (Object.keys(report.failures).length === 0 && (options.keepOpenExamples !== true || Object.keys(report.open).length === 0)) {
    rmSync(dir, { recursive: true, force: true });
  }
  return report;
}

/** A report as lines for a terminal: figures, then each failure class with its examples and how to rerun. */
export function formatReport(report: DifferentialReport): string {
  const failures = Object.entries(report.failures);
  const lines = [
    `${report.format}: ${report.mutants} mutants (seed ${report.seed}): ${report.bothAccept} read alike, ${report.bothRefuse} refused by both, ` +
      `${Object.values(report.known).reduce((n, k) => n + k, 0)} documented differences, ${Object.values(report.open).reduce((n, k) => n + k.count, 0)} in open classes, ` +
      `${failures.reduce((n, [, f]) => n + f.count, 0)} failures`,
  ];
  for (const [id, n] of Object.entries(report.known).sort(([, a], [, b]) => b - a)) {
    lines.push(`  documented  ${String(n).padStart(6)}  ${id}`);
    if (process.env.ST_CONVERT_DIFF_VERBOSE === "1") lines.push(`      e.g. ${report.knownExamples[id]}`);
  }
  for (const [id, o] of Object.entries(report.open).sort(([, a], [, b]) => b.count - a.count)) {
    lines.push(
      `  OPEN        ${String(o.count).padStart(6)}  ${id} (e.g. mutant ${o.example.index} of ${o.example.seedFile} by ${o.example.steps.join(" + ")})`,
    );
  }
  for (const [what, n] of Object.entries(report.referenceSilent)) lines.push(`  no verdict  ${String(n).padStart(6)}  ${what} (the reference)`);
  for (const [what, f] of failures.sort(([, a], [, b]) => b.count - a.count)) {
    lines.push(`  FAILURE     ${String(f.count).padStart(6)}  ${what}`);
    for (const e of f.examples) {
      lines.push(`      mutant ${e.index} of ${e.seedFile} by ${e.steps.join(" + ")}: ${e.file}`);
      lines.push(`        ours: ${e.ours}`);
      lines.push(`        reference: ${e.reference}`);
    }
  }
  if (failures.length > 0) {
    const last = Math.max(...failures.flatMap(([, f]) => f.examples.map((e) => e.index)));
    lines.push(`  rerun: pnpm fuzz --differential --format ${report.format} --seed ${report.seed} --mutants ${last + 1}; files kept in ${report.dir}`);
  }
  return lines.join("\n");
}

// -- writers ------------------------------------------------------------------------------

/** A tensor to write. */
export interface TensorSpec {
  name: string;
  dtype: string;
  shape: number[];
  bytes: Uint8Array;
}

/** A tensor set the writer property writes. */
export interface TensorSet {
  metadata: Record<string, string> | null;
  tensors: TensorSpec[];
}

const NAMES = [
  "w",
  "weight",
  "layer.0.weight",
  "a/b",
  "model.embed_tokens.weight",
  "é",
  "😀",
  "日本語",
  "",
  " ",
  "a\u0000b",
  "\u0000",
  ".",
  "a..b",
  ".a",
  "a.",
  "__metadata__",
  "x.npy",
  "a\\b",
  "0",
  "1",
  "state_dict",
  "__msgpack_chunked_array__",
  "x".repeat(300),
  "\ud800",
  "a:b",
  "../x",
  "/abs",
  "arr_0",
];
/** Pairs of names that collide in some format (npz's lookup, flax's nesting, zip on Windows). */
const CLASHES: [string, string][] = [
  ["x", "x.npy"],
  ["a", "a.b"],
  ["a/b", "a\\b"],
  ["w", "w"],
  ["a.b", "a.c"],
  ["0", "1"],
  ["x.npy", "x.npy.npy"],
  ["a\u0000b", "a\u0000c"],
];
const SHAPES: number[][] = [
  [],
  [0],
  [1],
  [2],
  [3],
  [2, 3],
  [0, 3],
  [3, 0],
  [2 ** 32, 2 ** 32, 0],
  [0, 2 ** 32, 2 ** 32],
  [2 ** 31, 0],
  [1, 1, 1, 1],
  [2, 2, 2],
  Array.from({ length: 33 }, () => 1),
  Array.from({ length: 65 }, () => 1),
  [2 ** 53 - 1, 0],
  [2 ** 62, 0],
];

/** A random tensor set with the edge cases writers must handle: empty, 0-d, zero-element huge dims, odd names and dtypes. */
export function randomTensorSet(random: Random): TensorSet {
  const count = random.pick([0, 1, 1, 1, 2, 2, 3, 4]);
  const names: string[] = [];
  if (count >= 2 && random.chance(0.2)) names.push(...random.pick(CLASHES));
  while (names.length < count) names.push(random.chance(0.5) ? random.pick(NAMES.slice(0, 8)) : random.pick(NAMES));
  const dtypes = Object.keys(ITEM_BYTES);
  const tensors = names.slice(0, count).map((name): TensorSpec => {
    const dtype = random.pick(dtypes);
    let shape = [...random.pick(SHAPES)];
    const bits = DTYPE_BITS[dtype]!;
    // Sub-byte dtypes: a whole number of bytes (8 elements always are).
    if (bits < 8) shape = shape.length === 0 || shape.includes(0) ? (shape.includes(0) ? shape : [8]) : [...shape.slice(0, -1), 8];
    const elements = shape.reduce((a, b) => a * b, 1);
    const length = (elements * bits) / 8;
    const bytes = random.bytes(length);
    if (dtype === "BOOL") for (let i = 0; i < length; i++) bytes[i] = random.chance(0.9) ? bytes[i]! & 1 : 0x55;
    return { name, dtype, shape, bytes };
  });
  const metadata = random.pick<Record<string, string> | null>([null, null, { format: "pt" }, { a: "é" }, { "": "" }, { __metadata__: "x", b: "\u0000" }]);
  return { metadata, tensors };
}

/** The verdict of a writer on a set: the bytes it wrote, or its refusal and how many bytes it had written by then. */
export type WriterOutcome = { ok: true; bytes: Uint8Array; warnings: string[] } | { ok: false; code: string; message: string; written: number };

/** A writer under test. */
export interface WriterTarget {
  format: string;
  extension: string;
  hasReference: boolean;
  write(set: TensorSet, fileName: string): Promise<WriterOutcome>;
  /** The name a reader gives a tensor written under `name` to `fileName` (a single `.npy` takes the file's stem). */
  readName?(name: string, fileName: string): string;
  /** Whether metadata must come back (formats with room for it). */
  keepsMetadata?: boolean;
  /** Void declarations our reader needs to read the file back (`--dtype V2=BF16`: a single `.npy` cannot record them). */
  readDtypes?(set: TensorSet): string[];
}

/** An open (found, not yet fixed) class of writer failure: matched on the tensor set and the failure's label. */
export interface OpenWriterFailure {
  readonly id: string;
  /** Writer formats (the target's first word: `npz` for `npz (compress)`). */
  readonly formats: readonly string[];
  readonly summary: string;
  matches(set: TensorSet, failure: string): boolean;
}

/** The writer failures found and reported, not yet fixed; counted and printed, not failing the run (see OPEN_DISAGREEMENTS). */
export const OPEN_WRITER_FAILURES: readonly OpenWriterFailure[] = [];

function sha256(bytes: Uint8Array): string {
  return createHash("sha256").update(bytes).digest("hex");
}

/** The figures of a writer run. */
export interface WriterReport {
  format: string;
  seed: number;
  sets: number;
  written: number;
  refused: Record<string, number>;
  /** Failures in open classes, by id. */
  open: Record<string, number>;
  failures: Record<string, { count: number; examples: string[] }>;
  dir: string;
}

/** Options of {@link runWriterProperty}. */
export interface WriterPropertyOptions {
  target: WriterTarget;
  ours: OurReader;
  reference?: ReferenceReader;
  seed: number;
  sets: number;
  deadline?: number;
  dir?: string;
  open?: readonly OpenWriterFailure[];
}

function describeSet(set: TensorSet): string {
  return JSON.stringify({
    metadata: set.metadata,
    tensors: set.tensors.map((t) => ({ name: t.name, dtype: t.dtype, shape: t.shape, hex: Buffer.from(t.bytes).toString("hex").slice(0, 64) })),
  });
}

/**
 * For random tensor sets: the writer refuses before its first byte, or what it wrote reads back
 * through our reader and the reference's as the same tensors (and metadata where the format keeps it).
 */
export async function runWriterProperty(options: WriterPropertyOptions): Promise<WriterReport> {
  const { target, seed } = options;
  const dir = options.dir ?? mkdtempSync(join(tmpdir(), `st-convert-differential-writer-${target.format.replace(/\W+/g, "_")}-${seed}-`));
  mkdirSync(dir, { recursive: true });
  const report: WriterReport = { format: target.format, seed, sets: 0, written: 0, refused: {}, open: {}, failures: {}, dir };
  const baseFormat = target.format.split(" ")[0]!;
  let set: TensorSet = { metadata: null, tensors: [] };
  const fail = (what: string, detail: string): void => {
    const open = (options.open ?? OPEN_WRITER_FAILURES).find((o) => o.formats.includes(baseFormat) && o.matches(set, what));
    if (open !== undefined) {
      report.open[open.id] = (report.open[open.id] ?? 0) + 1;
      return;
    }
    const entry = (report.failures[what] ??= { count: 0, examples: [] });
    entry.count++;
    if (entry.examples.length < EXAMPLES_PER_CLASS) entry.examples.push(detail);
  };
  for (let index = 0; index < options.sets; index++) {
    if (options.deadline !== undefined && Date.now() >= options.deadline) break;
    const random = new Random(seed, formatNumber(`writer:${target.format}`), index);
    set = randomTensorSet(random);
    const fileName = `set-${index}${target.extension}`;
    const file = join(dir, fileName);
    report.sets++;
    let outcome: WriterOutcome;
    try {
      outcome = await withTimeout(target.write(set, fileName), OUR_TIMEOUT_MS, `${target.format} writer, set ${index}`);
    } catch (error) {
      fail(`the writer crashed or hung: ${messageShape(String(error))}`, `set ${index} ${describeSet(set)}: ${String(error)}`);
      continue;
    }
    if (!outcome.ok) {
      report.refused[outcome.code] = (report.refused[outcome.code] ?? 0) + 1;
      if (outcome.written > 0)
        fail(`refused (${outcome.code}) after writing ${outcome.written > 0 ? "bytes" : "nothing"}`, `set ${index} ${describeSet(set)}: ${outcome.message}`);
      continue;
    }
    report.written++;
    writeFileSync(file, outcome.bytes);
    const expected: TensorView[] = set.tensors.map((t) => ({
      name: target.readName?.(t.name, fileName) ?? t.name,
      dtype: t.dtype,
      shape: t.shape,
      sha256: sha256(t.bytes),
    }));
    let keep = false;
    const check = (who: string, verdict: OurVerdict | ReferenceVerdict): void => {
      if (!verdict.ok) {
        keep = true;
        const why = "code" in verdict && verdict.code !== undefined ? verdict.code : "error" in verdict ? verdict.error : "";
        fail(
          `the ${target.format} writer emits a file ${who} refuses (${why})`,
          `set ${index} → ${file}: ${"message" in verdict ? verdict.message.slice(0, 200) : ""}\n        ${describeSet(set)}`,
        );
        return;
      }
      const difference = tensorDifference(expected, verdict.tensors);
      if (difference !== undefined) {
        keep = true;
        fail(
          `${who} reads other tensors from the ${target.format} writer's file: ${difference.split(" (")[0]!.replace(/ of ".*"$/, "")}`,
          `set ${index} → ${file}: ${difference}\n        ${describeSet(set)}`,
        );
        return;
      }
      if (target.keepsMetadata === true && !sameMetadata(set.metadata, verdict.metadata)) {
        keep = true;
        fail(
          `${who} reads other metadata from the ${target.format} writer's file`,
          `set ${index} → ${file}: ${JSON.stringify(verdict.metadata)} for ${JSON.stringify(set.metadata)}`,
        );
      }
    };
    try {
      const dtypes = target.readDtypes?.(set);
      check(
        "our reader",
        await withTimeout(
          options.ours(outcome.bytes, fileName, dtypes === undefined ? undefined : { dtypes }),
          OUR_TIMEOUT_MS,
          `${target.format} reader, set ${index}`,
        ),
      );
    } catch (error) {
      keep = true;
      fail(`our reader crashed on the ${target.format} writer's file`, `set ${index} → ${file}: ${String(error)}`);
    }
    if (target.hasReference && options.reference !== undefined) {
      const verdict = await options.reference.verdict(file);
      if (!verdict.ok && (verdict.error === "ReferenceHung" || verdict.error === "ReferenceCrashed"))
        fail(`the reference gave no verdict (${verdict.error})`, `set ${index} → ${file}`);
      else check("the reference", verdict);
    }
    if (!keep) rmSync(file, { force: true });
  }
  if (Object.keys(report.failures).length === 0) rmSync(dir, { recursive: true, force: true });
  return report;
}

/** A writer report as lines for a terminal. */
export function formatWriterReport(report: WriterReport): string {
  const refused = Object.entries(report.refused)
    .map(([code, n]) => `${code} ${n}`)
    .join(", ");
  const failures = Object.entries(report.failures);
  const lines = [
    `${report.format} writer: ${report.sets} tensor sets (seed ${report.seed}): ${report.written} written, refused up front: ${refused || "none"}; ` +
      `${Object.values(report.open).reduce((n, k) => n + k, 0)} in open classes, ${failures.reduce((n, [, f]) => n + f.count, 0)} failures`,
  ];
  for (const [id, n] of Object.entries(report.open)) lines.push(`  OPEN    ${String(n).padStart(6)}  ${id}`);
  for (const [what, f] of failures) {
    lines.push(`  FAILURE ${String(f.count).padStart(6)}  ${what}`);
    for (const e of f.examples) lines.push(`      ${e}`);
  }
  if (failures.length > 0) lines.push(`  files kept in ${report.dir}`);
  return lines.join("\n");
}
