// A batch of many files runs conversions in worker threads too (batchWorkers.ts): the same outputs,
// outcomes, warnings and summary as on one thread, and signals reach every thread.
import { copyFileSync, mkdirSync, readFileSync, readdirSync, writeFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { isStConvertError } from "@st-convert/core";
import { type BatchEvent, convertMany } from "st-convert";
import { runInWorkers } from "../dist/batchWorkers.js";
import type { JobOutcome } from "../dist/convertMany.js";
import { fixturePath, makeTempDir, runCli, safetensorsFile } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

/** Reference-made safetensors files, copied under names that sort in a known order. */
const SOURCES = ["mixed.safetensors", "names_order.safetensors", "dtype_f32.safetensors", "dtype_bf16.safetensors", "all_dtypes.safetensors"].map((name) =>
  fixturePath("safetensors", name),
);
const FILES = 300;
/** The one broken file, among the others. */
const BROKEN = 137;

function makeFolder(): { root: string; sourceOf: (i: number) => string; name: (i: number) => string } {
  const root = join(dir, "in");
  mkdirSync(root);
  const name = (i: number) => `f${String(i).padStart(4, "0")}`;
  const sourceOf = (i: number) => SOURCES[i % SOURCES.length]!;
  for (let i = 0; i < FILES; i++) {
    if (i === BROKEN) writeFileSync(join(root, `${name(i)}.safetensors`), safetensorsFile('{"w":{"dtype":"F32","shape":[4],"data_offsets":[0,8]}}', 8));
    else copyFileSync(sourceOf(i), join(root, `${name(i)}.safetensors`));
  }
  // Warnings from a worker's jobs name their file too.
  copyFileSync(fixturePath("torch", "training.pt"), join(root, "training.pt"));
  return { root, sourceOf, name };
}

const manyCores = availableParallelism() >= 2;

describe("a batch in threads", () => {
  it.skipIf(!manyCores)("converts in worker threads what one thread converts: same bytes, outcomes in the order planned, warnings named", async () => {
    const { root, sourceOf, name } = makeFolder();
    const threadsOf = async (jobs: number, out: string) => {
      const starts: Extract<BatchEvent, { type: "start" }>[] = [];
      const warned: string[] = [];
      const summary = await convertMany([root], {
        outDir: out,
        to: "safetensors",
        jobs,
        onEvent: (e) => {
          if (e.type === "start") starts.push(e);
        },
        onWarning: (message, file) => warned.push(`${file}: ${message}`),
      });
      return { summary, threads: new Set(starts.map((s) => s.thread)), warned };
    };
    const one = await threadsOf(1, join(dir, "one"));
    const two = await threadsOf(2, join(dir, "two"));
    expect([...one.threads]).toEqual([0]);
    // Which thread took which file depends on timing; the worker alone is tested below.
    expect([...two.threads].every((t) => t === 0 || t === 1)).toBe(true);
    for (const run of [one, two]) {
      const converted = run.summary.converted.map((c) => c.input);
      expect(converted).toEqual([...converted].sort());
      expect(converted).toHaveLength(FILES);
      expect(run.summary.failed).toHaveLength(1);
      expect(run.summary.failed[0]).toMatchObject({ input: join(root, `${name(BROKEN)}.safetensors`), code: "TensorInvalidInfo" });
      expect(run.summary.failed[0]!.message).toContain(`${name(BROKEN)}.safetensors`);
      expect(run.warned.some((w) => w.startsWith(join(root, "training.pt")) && w.includes('skipped "epoch": an int'))).toBe(true);
      expect(run.summary.stopped).toBe(false);
    }
    expect(two.warned.sort()).toEqual(one.warned.sort());
    for (let i = 0; i < FILES; i++) {
      if (i === BROKEN) continue;
      const file = `${name(i)}.safetensors`;
      expect(readFileSync(join(dir, "two", file)).equals(readFileSync(sourceOf(i))), file).toBe(true);
    }
    expect(readFileSync(join(dir, "two", "training.safetensors")).equals(readFileSync(join(dir, "one", "training.safetensors")))).toBe(true);
  });

  it("a worker thread alone converts every job, reports outcomes, warnings and codes, and stops on an abort", async () => {
    const { root, sourceOf, name } = makeFolder();
    const files = [...readdirSync(root)].sort();
    const out = join(dir, "worker");
    mkdirSync(out);
    const jobs = files.map((f) => ({ input: join(root, f), output: join(out, f.replace(/\.(safetensors|pt)$/, ".safetensors")) }));
    const run = async (signal?: AbortSignal) => {
      const outcomes = new Map<number, JobOutcome>();
      const starts: number[] = [];
      const warnings: string[] = [];
      const next = new Int32Array(new SharedArrayBuffer(4));
      await runInWorkers(1, 2, jobs, next, { outDir: out, to: "safetensors", force: true, signal }, false, {
        start: (_index, thread) => starts.push(thread),
        hooksFor: () => ({ progress: () => {}, warning: (file, message) => warnings.push(`${file}: ${message}`) }),
        settle: (index, outcome) => outcomes.set(index, outcome),
        lost: (file, message) => warnings.push(`lost ${file}: ${message}`),
      });
      return { outcomes, starts, warnings, next: next[0]! };
    };
    const all = await run();
    expect(new Set(all.starts)).toEqual(new Set([1]));
    expect(all.outcomes.size).toBe(jobs.length);
    for (const [index, outcome] of all.outcomes) {
      const file = files[index]!;
      if (file === `${name(BROKEN)}.safetensors`) {
        expect(outcome).toMatchObject({ type: "failed", code: "TensorInvalidInfo" });
        expect(isStConvertError((outcome as { error: unknown }).error)).toBe(true);
      } else expect(outcome.type, file).toBe("converted");
    }
    expect(all.warnings.some((w) => w.startsWith(join(root, "training.pt")) && w.includes('skipped "epoch": an int'))).toBe(true);
    expect(all.warnings.filter((w) => w.startsWith("lost"))).toEqual([]);
    for (let i = 0; i < FILES; i += 37) {
      if (i !== BROKEN) expect(readFileSync(join(out, `${name(i)}.safetensors`)).equals(readFileSync(sourceOf(i)))).toBe(true);
    }
    // Aborted before it starts: the worker stops after at most the jobs its loops had taken.
    const controller = new AbortController();
    controller.abort();
    const stopped = await run(controller.signal);
    expect(stopped.outcomes.size).toBeLessThanOrEqual(2);
    expect(readdirSync(out).filter((f) => f.endsWith(".tmp"))).toEqual([]);
  });

  it.skipIf(!manyCores)("an abort stops every thread: no temporary file is left, and every output written is whole", async () => {
    const { root, sourceOf } = makeFolder();
    const out = join(dir, "out");
    const controller = new AbortController();
    let started = 0;
    const threads = new Set<number>();
    const summary = await convertMany([root], {
      outDir: out,
      to: "safetensors",
      jobs: 2,
      signal: controller.signal,
      onEvent: (e) => {
        if (e.type === "start") threads.add(e.thread);
        // The first job starts on the main thread before the worker exists: the worker is then
        // told to stop as it starts (the worker alone and told to stop is tested above).
        if (e.type === "start" && ++started === 1) controller.abort();
      },
    });
    expect(summary.stopped).toBe(true);
    const written = readdirSync(out);
    expect(written.filter((f) => f.endsWith(".tmp"))).toEqual([]);
    expect(written.length).toBeLessThan(10);
    for (const file of written) {
      const i = Number(file.slice(1, 5));
      if (file.endsWith(".safetensors") && file.startsWith("f")) expect(readFileSync(join(out, file)).equals(readFileSync(sourceOf(i))), file).toBe(true);
    }
    expect(summary.converted.length).toBe(written.length);
    expect([...threads].every((t) => t === 0 || t === 1)).toBe(true);
  });

  it.skipIf(!manyCores)("the command runs the bundle's worker thread: the same files, and no notice of a lost thread", () => {
    const { root } = makeFolder();
    const out = join(dir, "out");
    const run = runCli([root, "--out-dir", out, "--to", "safetensors", "--jobs", "2"]);
    expect(run.status).toBe(1);
    expect(run.stderr).not.toMatch(/worker thread/);
    expect(run.stderr).toMatch(new RegExp(`converted ${FILES}, skipped 0, failed 1 \\(of ${FILES + 1} files\\)`));
    expect(readdirSync(out)).toHaveLength(FILES);
  });
});
