/**
 * The worker threads a single conversion lends its formats for their kernels (GGUF's quantization:
 * pure JavaScript on one core otherwise, where a conversion's reads and writes leave the other
 * cores idle). Started on the first kernel a format runs, ended with the conversion.
 */
import type { FormatKernels, KernelPool, TensorFormat } from "@st-convert/core";
import { FORMATS } from "./formats.js";
import type { Worker } from "node:worker_threads";
import { availableParallelism } from "node:os";

/** Threads a conversion lends its formats by default: every core, up to this many. */
export const MAX_KERNEL_THREADS = 4;

/** What the main thread sends: one kernel call. */
export interface KernelCall {
  readonly id: number;
  readonly format: string;
  readonly kernel: string;
  readonly args: readonly unknown[];
}

/** What a kernel thread answers: the call's result, or the message of what it threw. */
export type KernelAnswer = { readonly id: number; readonly result: unknown } | { readonly id: number; readonly error: string };

/** The answer a kernel thread gives once, when its modules are loaded. */
export const READY = -1;

/** The buffers behind the typed arrays a kernel returned (it, or its items when it is an array), to move back. */
export function returnedBuffers(result: unknown): ArrayBuffer[] {
  const items = Array.isArray(result) ? result : [result];
  const buffers = new Set<ArrayBuffer>();
  for (const item of items) if (ArrayBuffer.isView(item) && item.buffer instanceof ArrayBuffer) buffers.add(item.buffer);
  return [...buffers];
}

/** The kernel `kernel` of the format called `format`, from its `kernels()`. */
export async function findKernel(formats: readonly TensorFormat[], format: string, kernel: string): Promise<(...args: unknown[]) => unknown> {
  const kernels: FormatKernels | undefined = await formats.find((f) => f.name === format)?.kernels?.();
  const found = kernels?.[kernel];
  if (found === undefined) throw new Error(`no kernel ${kernel} in format ${format}`);
  return found as (...args: unknown[]) => unknown;
}

/**
 * The worker module: kernelWorker.js beside this module, or, when this code runs from the bundle
 * (scripts/bundle.mjs: dist/st-convert.cjs, its shared code in dist/chunks/), dist/st-convert-kernels.cjs.
 */
function workerUrl(): URL {
  const here = import.meta.url;
  if (here.endsWith("/kernelPool.js")) return new URL("./kernelWorker.js", here);
  const dir = new URL(".", here);
  return new URL(dir.pathname.endsWith("/chunks/") ? "../st-convert-kernels.cjs" : "./st-convert-kernels.cjs", dir);
}

interface Thread {
  readonly worker: Worker;
  /** Calls sent and not answered. */
  busy: number;
  /** True once its modules are loaded, false if it failed before. */
  readonly ready: Promise<boolean>;
  /** False once it stopped (an error, an exit): it takes no more calls. */
  alive: boolean;
}

interface Call {
  readonly thread: Thread;
  resolve(value: unknown): void;
  reject(error: Error): void;
}

/**
 * A {@link KernelPool} of worker threads, started on its first call; `close()` ends them (until
 * then they keep the process alive, as the calls in flight must).
 */
export class WorkerKernelPool implements KernelPool {
  readonly threads: number;
  #started: Thread[] | undefined;
  #calls = new Map<number, Call>();
  #nextId = 0;
  #closed = false;

  /** `threads` workers (default: the machine's cores, at most {@link MAX_KERNEL_THREADS}). */
  constructor(threads = Math.min(availableParallelism(), MAX_KERNEL_THREADS)) {
    this.threads = threads;
  }

  async run(format: string, kernel: string, args: readonly unknown[], transfer: readonly ArrayBuffer[]): Promise<unknown> {
    if (this.#closed) throw new Error("the kernel threads were closed");
    const threads = this.#start();
    // Only threads that loaded take calls, so no buffer is moved to a thread that cannot answer.
    const loaded = await Promise.all(threads.map((t) => t.ready));
    if (!loaded.some(Boolean)) {
      // No thread could start (the module is missing, as when run from sources): the kernel runs here.
      return (await findKernel(FORMATS, format, kernel))(...args);
    }
    // the live thread with the fewest calls waiting (ties to the first): calls are alike
    let thread: Thread | undefined;
    for (const [i, t] of threads.entries()) if (t.alive && loaded[i] && (thread === undefined || t.busy < thread.busy)) thread = t;
    // Every thread that loaded has stopped since (a bug, or memory): the calls fail rather than wait forever.
    if (thread === undefined) throw new Error("the kernel threads stopped");
    const chosen = thread;
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#calls.set(id, { thread: chosen, resolve, reject });
      chosen.busy++;
      const call: KernelCall = { id, format, kernel, args };
      chosen.worker.postMessage(call, transfer as ArrayBuffer[]);
    });
  }

  #start(): Thread[] {
    if (this.#started !== undefined) return this.#started;
    const { Worker } = process.getBuiltinModule("node:worker_threads");
    const url = workerUrl();
    this.#started = Array.from({ length: this.threads }, () => {
      const worker = new Worker(url);
      let loaded: (ok: boolean) => void = () => {};
      const thread: Thread = { worker, busy: 0, ready: new Promise((resolve) => (loaded = resolve)), alive: true };
      // Kept referenced: the caller waits for their answers, and close() (in the conversion's finally) ends them.
      worker.on("message", (answer: KernelAnswer) => {
        if (answer.id === READY) {
          loaded(true);
          return;
        }
        const call = this.#calls.get(answer.id);
        if (call === undefined) return;
        this.#calls.delete(answer.id);
        thread.busy--;
        if ("error" in answer) call.reject(new Error(answer.error));
        else call.resolve(answer.result);
      });
      const lost = (error: Error) => {
        thread.alive = false;
        loaded(false);
        for (const [id, call] of this.#calls) {
          if (call.thread !== thread) continue;
          this.#calls.delete(id);
          call.reject(new Error(`a kernel thread stopped (${error.message})`));
        }
      };
      worker.on("error", lost);
      worker.on("exit", (code) => lost(new Error(`exited with status ${code}`)));
      return thread;
    });
    return this.#started;
  }

  /** Ends the threads (calls still running are rejected). Safe to call more than once; the owner must call it. */
  async close(): Promise<void> {
    this.#closed = true;
    const started = this.#started ?? [];
    this.#started = undefined;
    await Promise.all(started.map((t) => t.worker.terminate()));
  }
}
