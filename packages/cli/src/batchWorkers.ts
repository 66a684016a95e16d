/**
 * The threads of a batch. A conversion of a small file is a few hundred µs of JavaScript on one
 * core, so a folder of thousands of them is bound by one thread's speed; with `--jobs 2` or more on
 * a machine of several cores, worker threads take jobs too, from the same counter as the main
 * thread (a shared integer: no message per job), and report back what happened. The main thread
 * keeps the summary, the events and the signals: an abort reaches every worker, which stops its
 * conversions as the main thread does (each removes its temporary file).
 */
import { availableParallelism } from "node:os";
import { fileURLToPath } from "node:url";
import { StConvertError, isStConvertError } from "@st-convert/core";
import type { ConvertResult } from "./convert.js";
import type { BatchJob, ConvertManyOptions, JobHooks, JobOutcome, WholeOutput } from "./convertMany.js";
import { FORMATS } from "./formats.js";
import { isRemoteInput } from "./remoteInput.js";

/**
 * Files a batch needs before it starts a worker thread: a thread and its modules take about 40 ms
 * to start, the time of a hundred small conversions.
 */
export const FILES_PER_WORKER = 64;

/**
 * Node's worker_threads module, loaded when a batch first starts a thread: about 6 ms that every
 * other command (info, a single conversion) would pay at start-up for nothing.
 */
function workerThreads(): typeof import("node:worker_threads") {
  return process.getBuiltinModule("node:worker_threads");
}

/** What a worker is given. */
export interface WorkerSetup {
  readonly jobs: readonly BatchJob[];
  /** The next job's index, taken with `Atomics.add` by every thread. */
  readonly next: Int32Array;
  /** Conversions the worker runs at once. */
  readonly loops: number;
  readonly options: WorkerOptions;
  /** The batch made `--out-dir` (see `attemptJob`). */
  readonly outputsAbsent: boolean;
}

/** The options of a batch that a worker needs: data only (functions and signals stay on the main thread). */
export type WorkerOptions = Pick<
  ConvertManyOptions,
  | "outDir"
  | "to"
  | "from"
  | "force"
  | "formatOptions"
  | "allowEmpty"
  | "maxShardSize"
  | "filter"
  | "exclude"
  | "rename"
  | "metadata"
  | "cast"
  | "recordCast"
  | "dryRun"
  | "verify"
  | "digest"
  | "skipExisting"
>;

/** What a worker says, in order: each job's start, progress and notices, its outcome; then `done`. */
export type WorkerMessage =
  | { type: "start"; index: number }
  | { type: "progress"; index: number; done: number; total: number }
  | { type: "warning"; index: number; file: string; message: string }
  | { type: "outcome"; index: number; outcome: SentOutcome }
  | { type: "done" };

/** A {@link JobOutcome} as it crosses threads: the error as its parts. */
export type SentOutcome =
  | { type: "converted"; result: ConvertResult | undefined }
  | { type: "skipped"; reason: string; whole?: WholeOutput }
  | { type: "interrupted"; message: string }
  | { type: "failed"; code: string; message: string; error: SentError };

type SentError = { coded: true; code: string; rule: string; file?: string; tensor?: string } | { coded: false; message: string };

/**
 * Threads for a batch: the main one alone, unless there are several jobs at once (`jobs`), cores
 * for them, files to convert (not a dry run), at least {@link FILES_PER_WORKER} files per extra thread, and nothing that cannot
 * cross to a worker (formats of the caller's own, URL inputs, whose traffic is counted here).
 */
export function batchThreads(planned: readonly BatchJob[], options: ConvertManyOptions, jobs: number): number {
  if (jobs < 2 || options.dryRun === true || (options.formats !== undefined && options.formats !== FORMATS)) return 1;
  if (planned.some((job) => isRemoteInput(job.input))) return 1;
  return Math.max(1, Math.min(jobs, availableParallelism(), Math.floor(planned.length / FILES_PER_WORKER)));
}

/** The main thread's side of the workers: how their messages reach the batch. */
export interface WorkerHooks {
  start(index: number, thread: number): void;
  hooksFor(index: number): JobHooks;
  settle(index: number, outcome: JobOutcome): void;
  /** A worker thread that failed (its jobs are then taken by the threads left): a notice naming its module. */
  lost(file: string, message: string): void;
}

/**
 * The worker module: batchWorker.js beside this module, or, when this code runs from the bundle
 * (scripts/bundle.mjs: dist/st-convert.cjs, its shared code in dist/chunks/), the bundle's own entry
 * dist/st-convert-worker.cjs.
 */
function workerUrl(): URL {
  const here = import.meta.url;
  if (here.endsWith("/batchWorkers.js")) return new URL("./batchWorker.js", here);
  const dir = new URL(".", here);
  return new URL(dir.pathname.endsWith("/chunks/") ? "../st-convert-worker.cjs" : "./st-convert-worker.cjs", dir);
}

/**
 * Runs `count` workers of `loops` conversions each over `jobs`, taking indices from `next`, until
 * no job is left or `options.signal` fires. A worker that fails (it cannot start, or a bug) leaves
 * the jobs it had started as failed; the others are taken by the threads that remain.
 */
export async function runInWorkers(
  count: number,
  loops: number,
  jobs: readonly BatchJob[],
  next: Int32Array,
  options: ConvertManyOptions,
  outputsAbsent: boolean,
  hooks: WorkerHooks,
): Promise<void> {
  const setup: WorkerSetup = { jobs, next, loops, options: workerOptions(options), outputsAbsent };
  const workers = Array.from({ length: count }, (_, k) => runWorker(setup, k + 1, options.signal, hooks));
  await Promise.all(workers);
}

function workerOptions(options: ConvertManyOptions): WorkerOptions {
  return {
    outDir: options.outDir,
    to: options.to,
    from: options.from,
    force: options.force,
    formatOptions: options.formatOptions,
    allowEmpty: options.allowEmpty,
    maxShardSize: options.maxShardSize,
    filter: options.filter,
    exclude: options.exclude,
    rename: options.rename,
    metadata: options.metadata === undefined ? undefined : { ...options.metadata },
    cast: options.cast,
    recordCast: options.recordCast,
    dryRun: options.dryRun,
    verify: options.verify,
    digest: options.digest,
    skipExisting: options.skipExisting,
  };
}

function runWorker(setup: WorkerSetup, thread: number, signal: AbortSignal | undefined, hooks: WorkerHooks): Promise<void> {
  return new Promise((resolve) => {
    const started = new Set<number>();
    let finished = false;
    const url = workerUrl();
    const { Worker } = workerThreads();
    const worker = new Worker(url, { workerData: setup });
    const abort = () => worker.postMessage({ type: "abort" });
    if (signal?.aborted === true) abort();
    signal?.addEventListener("abort", abort);
    const end = (failure?: unknown): void => {
      if (finished) return;
      finished = true;
      signal?.removeEventListener("abort", abort);
      if (failure !== undefined) {
        const reason = failure instanceof Error ? failure.message : String(failure);
        hooks.lost(fileURLToPath(url), `worker thread ${thread} stopped (${reason}); the other threads took its remaining files`);
      }
      for (const index of started) {
        const error = new StConvertError(
          "Io",
          `the worker thread converting this file stopped: ${failure instanceof Error ? failure.message : String(failure)}`,
          {
            file: setup.jobs[index]!.input,
          },
        );
        hooks.settle(index, { type: "failed", code: "Internal", message: `internal error: ${error.message} (please report this)`, error });
      }
      void worker.terminate().finally(resolve);
    };
    worker.on("message", (message: WorkerMessage) => {
      switch (message.type) {
        case "start":
          started.add(message.index);
          hooks.start(message.index, thread);
          break;
        case "progress":
          hooks.hooksFor(message.index).progress(message.done, message.total);
          break;
        case "warning":
          hooks.hooksFor(message.index).warning(message.file, message.message);
          break;
        case "outcome":
          started.delete(message.index);
          hooks.settle(message.index, receivedOutcome(message.outcome));
          break;
        case "done":
          end();
          break;
      }
    });
    worker.on("error", (error) => end(error));
    worker.on("exit", (code) => end(new Error(`exited with status ${code}`)));
  });
}

/** An outcome as a worker sends it. */
export function sentOutcome(outcome: JobOutcome): SentOutcome {
  if (outcome.type !== "failed") return outcome;
  const { error } = outcome;
  const sent: SentError = isStConvertError(error)
    ? { coded: true, code: error.code, rule: error.rule, file: error.file, tensor: error.tensor }
    : { coded: false, message: error instanceof Error ? error.message : String(error) };
  return { type: "failed", code: outcome.code, message: outcome.message, error: sent };
}

function receivedOutcome(outcome: SentOutcome): JobOutcome {
  if (outcome.type !== "failed") return outcome;
  const e = outcome.error;
  const error = e.coded ? new StConvertError(e.code, e.rule, { file: e.file, tensor: e.tensor }) : new Error(e.message);
  return { type: "failed", code: outcome.code, message: outcome.message, error };
}
