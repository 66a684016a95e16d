/**
 * One file, one meaning: mutants of the reference-made fixtures of every format go through
 * st-convert's readers (as the command opens them: format by the file's name, every tensor's
 * bytes read) and through the reference readers (fixtures/reference_verdicts.py); any file where
 * one accepts and the other refuses, or both read different tensors, fails the test unless a
 * documented deliberate difference (KNOWN_DIFFERENCES, docs/security.md) explains it. Then the
 * same for writers: random tensor sets written by each writer read back the same through both,
 * or the writer refused before its first byte.
 *
 * CI runs a short seeded round (ST_CONVERT_DIFF_MUTANTS per format, default 300). `pnpm fuzz
 * --differential [--minutes M] [--format F] [--seed S]` runs long rounds through this same file.
 */
import { createHash } from "node:crypto";
import { readFileSync, readdirSync, rmSync, statSync } from "node:fs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, bytesSource, isStConvertError, tensorFromBytes } from "@st-convert/core";
import {
  type DifferentialTarget,
  KNOWN_DIFFERENCES,
  MUTATORS,
  OPEN_DISAGREEMENTS,
  OPEN_WRITER_FAILURES,
  type OurVerdict,
  REPO_ROOT,
  ReferenceReader,
  type TensorSet,
  type WriterOutcome,
  type WriterTarget,
  Random,
  describeInterop,
  differentialMutant,
  fixturePath,
  formatReport,
  formatWriterReport,
  fuzzSeed,
  runDifferential,
  runWriterProperty,
} from "@st-convert/testing";
import { FORMATS, detectInputFormat, formatByName } from "st-convert";

/** Void arrays (bfloat16 and float8 as numpy saves them) read as unsigned integers of their size: numpy returns their raw bytes. */
const VOID_DECLARATIONS = ["V1=U8", "V2=U16", "V4=U32", "V8=U64"];
/** Largest seed file: mutants of a small file are judged fast, and the seeds cover every structure. */
const MAX_SEED_BYTES = 16 * 1024;

const formatsToRun = (process.env.ST_CONVERT_DIFF_FORMAT ?? "").split(",").filter((f) => f !== "");
const minutes = Number(process.env.ST_CONVERT_DIFF_MINUTES ?? "0");
const mutantsPerFormat = Number(process.env.ST_CONVERT_DIFF_MUTANTS ?? "300");
const setsPerWriter = Number(process.env.ST_CONVERT_DIFF_SETS ?? "60");
const long = minutes > 0;
const wanted = (format: string): boolean => formatsToRun.length === 0 || formatsToRun.includes(format);

function seedFiles(folder: string, extension: string): { name: string; bytes: Uint8Array }[] {
  return readdirSync(fixturePath(folder))
    .filter((f) => f.endsWith(extension) && statSync(fixturePath(folder, f)).size <= MAX_SEED_BYTES)
    .sort()
    .map((f) => ({ name: `${folder}/${f}`, bytes: new Uint8Array(readFileSync(fixturePath(folder, f))) }));
}

const TARGETS: DifferentialTarget[] = [
  { format: "safetensors", extension: ".safetensors", seeds: seedFiles("safetensors", ".safetensors"), mutators: MUTATORS.safetensors!, hasReference: true },
  { format: "npy", extension: ".npy", seeds: seedFiles("npy", ".npy"), mutators: MUTATORS.npy!, hasReference: true },
  { format: "npz", extension: ".npz", seeds: seedFiles("npy", ".npz"), mutators: MUTATORS.npz!, hasReference: true },
  { format: "flax", extension: ".msgpack", seeds: seedFiles("flax", ".msgpack"), mutators: MUTATORS.flax!, hasReference: true },
  { format: "torch", extension: ".pt", seeds: seedFiles("torch", ".pt"), mutators: MUTATORS.torch!, hasReference: true },
  {
    format: "json",
    extension: ".json",
    seeds: [{ name: "json/handwritten.json", bytes: new Uint8Array(readFileSync(fixturePath("json", "handwritten.json"))) }],
    mutators: MUTATORS.json!,
    hasReference: false,
  },
];
const others = TARGETS.flatMap((t) => t.seeds.map((s) => s.bytes));

/** Our verdict on a file, as the command reads it: the format by its name, every tensor's bytes hashed. */
async function ours(bytes: Uint8Array, fileName: string, read: { dtypes?: readonly string[] } = {}): Promise<OurVerdict> {
  const source = bytesSource(bytes, fileName);
  const warnings: string[] = [];
  try {
    const format = await detectInputFormat(source);
    const options = format.name === "npy" || format.name === "npz" ? { dtype: [...(read.dtypes ?? VOID_DECLARATIONS)] } : {};
    const file = await format.open(source, { options, onWarning: (m) => warnings.push(m), fileName });
    const tensors = [];
    for (const t of file.tensors) {
      const hash = createHash("sha256");
      let length = 0;
      for await (const chunk of t.chunks({ chunkSize: 1 << 20 })) {
        hash.update(chunk);
        length += chunk.byteLength;
      }
      if (length !== t.byteLength) throw new Error(`tensor ${JSON.stringify(t.name)} delivered ${length} bytes of ${t.byteLength}`);
      tensors.push({ name: t.name, dtype: t.dtype, shape: [...t.shape], sha256: hash.digest("hex") });
    }
    const extra = file as { skipped?: number | readonly string[]; aliases?: Readonly<Record<string, string>> };
    return {
      ok: true,
      tensors,
      metadata: file.metadata,
      skipped: typeof extra.skipped === "number" ? extra.skipped : extra.skipped?.length,
      others: format.name === "npz" && Array.isArray(extra.skipped) ? [...extra.skipped] : undefined,
      aliases: extra.aliases,
      warnings,
    };
  } catch (error) {
    if (isStConvertError(error)) return { ok: false, code: error.code, message: error.message };
    throw error;
  }
}

/** A writer of the registry, as the command calls it, into memory; a refusal reports how many bytes it had written. */
function writer(format: string, extension: string, options: Record<string, string | boolean> = {}, extra: Partial<WriterTarget> = {}): WriterTarget {
  return {
    format: Object.keys(options).length === 0 ? format : `${format} (${Object.keys(options).join(", ")})`,
    extension,
    hasReference: format !== "json",
    keepsMetadata: format === "safetensors" || format === "json",
    ...extra,
    async write(set: TensorSet, fileName: string): Promise<WriterOutcome> {
      const sink = new MemorySink(fileName);
      try {
        const tensors: TensorEntry[] = set.tensors.map((t) =>
          tensorFromBytes({ name: t.name, dtype: t.dtype as TensorEntry["dtype"], shape: t.shape }, t.bytes),
        );
        const warnings: string[] = [];
        await formatByName(format).write({ metadata: set.metadata, tensors }, sink, { options, onWarning: (m) => warnings.push(m), fileName });
        await sink.close();
        return { ok: true, bytes: sink.bytes(), warnings };
      } catch (error) {
        if (!isStConvertError(error)) throw error;
        return { ok: false, code: error.code, message: error.message, written: sink.length };
      }
    },
  };
}

/** The dtypes numpy holds as raw void, by their void's name: what a reader of a single `.npy` must be told. */
const VOID_HELD: Readonly<Record<string, string>> = {
  BF16: "V2",
  F8_E4M3: "V1",
  F8_E5M2: "V1",
  F8_E8M0: "V1",
  F8_E4M3FNUZ: "V1",
  F8_E5M2FNUZ: "V1",
};
const stem = (fileName: string): string => fileName.replace(/\.[^.]*$/, "");
const WRITERS: WriterTarget[] = [
  writer("safetensors", ".safetensors"),
  writer(
    "npy",
    ".npy",
    {},
    {
      readName: (_, fileName) => stem(fileName),
      readDtypes: (set) => set.tensors.flatMap((t) => (VOID_HELD[t.dtype] === undefined ? [] : [`${VOID_HELD[t.dtype]}=${t.dtype}`])),
    },
  ),
  writer("npz", ".npz"),
  writer("npz", ".npz", { compress: true }),
  writer("flax", ".msgpack"),
  writer("torch", ".pt"),
  writer("json", ".json"),
];

describe("the documented differences", () => {
  it("each one, and each open class, is listed in docs/security.md under its id", () => {
    const doc = readFileSync(`${REPO_ROOT}/docs/security.md`, "utf8");
    for (const k of [...KNOWN_DIFFERENCES, ...OPEN_DISAGREEMENTS, ...OPEN_WRITER_FAILURES]) expect(doc, k.id).toContain(`\`${k.id}\``);
  });

  it("mutants are a function of (seed, format, index) alone", () => {
    for (const target of TARGETS) {
      const a = differentialMutant(target, others, 99, 7);
      const b = differentialMutant(target, others, 99, 7);
      const c = differentialMutant(target, others, 100, 7);
      expect(Buffer.from(a.bytes).equals(Buffer.from(b.bytes)), target.format).toBe(true);
      expect(a.steps).toEqual(b.steps);
      expect(Buffer.from(a.bytes).equals(Buffer.from(c.bytes)) && a.steps.join() === c.steps.join(), target.format).toBe(false);
    }
  });

  it("every structure-aware mutator changes some seed of its format", () => {
    for (const target of TARGETS) {
      for (const m of target.mutators.filter((x) => !x.name.startsWith("bytes."))) {
        let applied = false;
        for (let i = 0; i < 400 && !applied; i++) {
          const random = new Random(5, i);
          const seed = random.pick(target.seeds).bytes;
          const out = m.apply(seed, { random, seeds: target.seeds.map((x) => x.bytes), others });
          applied = out !== undefined && !Buffer.from(out).equals(Buffer.from(seed));
        }
        expect(applied, `${target.format}: ${m.name}`).toBe(true);
      }
    }
  });

  it("every format the registry reads has a target here", () => {
    // A format whose checkpoints are folders (dcp) is fuzzed by its own package (torch's fuzzDcp.test.ts);
    // GGUF's reference is ggml's loader, not a Python reader: its differential runs in
    // packages/gguf/test/fuzzLoader.test.ts, against libggml-base.
    const elsewhere = new Set(["gguf"]);
    const read = new Set(FORMATS.filter((f) => !f.name.includes("index") && f.folderEntry === undefined && !elsewhere.has(f.name)).map((f) => f.name));
    expect([...read].sort()).toEqual(TARGETS.map((t) => t.format).sort());
  });
});

describeInterop("differential fuzzing against the reference readers", (python) => {
  let reference: ReferenceReader;
  const seed = fuzzSeed();
  const deadlineFor = () => (long ? Date.now() + minutes * 60_000 : undefined);
  // Long runs: M minutes per format and per writer; CI: a fixed count, seeded.
  const timeout = long ? minutes * 60_000 + 120_000 : 170_000;
  beforeAll(() => {
    reference = new ReferenceReader(python);
  });
  afterAll(async () => {
    await reference.close();
  });

  it("the harness catches a reader that drops a tensor, and one that accepts what the reference refuses", async () => {
    const target = TARGETS.find((t) => t.format === "safetensors")!;
    const dropping = async (bytes: Uint8Array, fileName: string): Promise<OurVerdict> => {
      const v = await ours(bytes, fileName);
      return v.ok ? { ...v, tensors: v.tensors.slice(1) } : v;
    };
    const lenient = async (bytes: Uint8Array, fileName: string): Promise<OurVerdict> => {
      const v = await ours(bytes, fileName);
      return v.ok ? v : { ok: true, tensors: [], warnings: [] };
    };
    for (const reader of [dropping, lenient]) {
      const report = await runDifferential({ target, others, ours: reader, reference, seed, mutants: 60 });
      expect(Object.keys(report.failures).length, formatReport(report)).toBeGreaterThan(0);
      rmSync(report.dir, { recursive: true, force: true });
    }
  });

  for (const target of TARGETS.filter((t) => wanted(t.format))) {
    it(
      `${target.format}: mutants of ${target.seeds.length} reference-made files read alike, or differ only as documented`,
      async () => {
        expect(target.seeds.length).toBeGreaterThan(0);
        const report = await runDifferential({
          target,
          others,
          ours,
          reference,
          seed,
          mutants: long ? Number.MAX_SAFE_INTEGER : mutantsPerFormat,
          deadline: deadlineFor(),
          keepOpenExamples: long,
          log: (line) => console.log(line),
        });
        console.log(formatReport(report));
        expect(report.mutants).toBeGreaterThan(0);
        expect(Object.keys(report.failures), "failures (the report above has their files)").toEqual([]);
      },
      timeout,
    );
  }

  for (const target of WRITERS.filter((w) => wanted(w.format.split(" ")[0]!))) {
    it(
      `the ${target.format} writer: random tensor sets read back alike through both, or are refused before the first byte`,
      async () => {
        const report = await runWriterProperty({
          target,
          ours,
          reference,
          seed,
          sets: long ? Number.MAX_SAFE_INTEGER : setsPerWriter,
          deadline: long ? Date.now() + Math.min(minutes, 1) * 60_000 : undefined,
        });
        console.log(formatWriterReport(report));
        expect(report.written).toBeGreaterThan(0);
        expect(Object.keys(report.failures), "failures (the report above has their files)").toEqual([]);
      },
      timeout,
    );
  }
});
