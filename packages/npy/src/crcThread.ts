/**
 * CRC-32 over a stream of chunks, on a thread of its own for long members. zlib's CRC-32 runs at
 * about 3 GB/s here (0.35 s/GiB): on the main thread it is most of the CPU a 1 GiB stored member
 * costs beside the copy itself, so a checkpoint converted at disk speed waits for it. Under Node,
 * a member past {@link THREAD_CRC_FROM} bytes is checked by one worker thread (started on first
 * use, shared by every stream, holding the process open only while it has work): each chunk is
 * copied into one of a few shared buffers (a memcpy, a tenth of the CRC's time) and folded in
 * there while the main thread goes on; a chunk already in a SharedArrayBuffer (a shared read ring)
 * is folded where it lies, its update settling once it is. Elsewhere (browsers, short members) the CRC runs on the
 * main thread, after the I/O callbacks waiting at that moment have had their turn.
 */
import { kernels } from "@st-convert/core";
import type { Codec } from "./Codec.js";

/** A CRC-32 folded over chunks in order. */
export interface Crc32Stream {
  /** Whether the chunks are folded on the CRC thread. */
  readonly onThread: boolean;
  /**
   * Folds `chunk` in. The chunk must stay unchanged until the promise settles; it may be reused
   * after (a thread works on its own copy).
   */
  update(chunk: Uint8Array): Promise<void>;
  /** The CRC-32 of all the chunks; the stream is done. */
  digest(): Promise<number>;
}

/** Members from this size are checked on the CRC thread: below it, a thread's start (~15 ms) costs more than it saves. */
export const THREAD_CRC_FROM = 64 * 1024 * 1024;

/** Chunks a stream may have copied out and not yet folded in. */
const SLOTS = 3;

/** A CRC-32 stream for about `expectedBytes` bytes, through `codec` or its thread. */
export function crc32Stream(codec: Codec, expectedBytes: number): Crc32Stream {
  // With the native CRC-32 (kernels.crc32) the main thread folds a chunk in less time than a copy to the thread takes.
  if (expectedBytes >= THREAD_CRC_FROM && codec.name === "node:zlib" && kernels.crc32 === undefined) {
    const thread = crcThread();
    if (thread !== undefined) return thread.stream();
  }
  return localStream(codec);
}

function localStream(codec: Codec): Crc32Stream {
  let crc = 0;
  let last: Promise<void> = Promise.resolve();
  return {
    onThread: false,
    update(chunk) {
      last = afterIo(() => {
        crc = codec.crc32(chunk, crc);
      });
      return last;
    },
    async digest() {
      await last;
      return crc;
    },
  };
}

/**
 * Yields the chunks of `chunks(shared)` unchanged, each folded into a CRC-32 while the consumer
 * works on it (on the CRC thread for about `expectedBytes` past {@link THREAD_CRC_FROM}), and
 * returns the CRC. A chunk is done with before the one after next is asked for from `chunks`, so
 * a reading ring of three may reuse its buffers; `shared` is true when the thread folds them, which then reads chunks in
 * SharedArrayBuffers (`ReadRangeOptions.shared`) where they lie instead of copying them.
 */
export async function* withCrc32(
  codec: Codec,
  expectedBytes: number,
  chunks: (shared: boolean) => AsyncIterable<Uint8Array>,
): AsyncGenerator<Uint8Array, number> {
  const stream = crc32Stream(codec, expectedBytes);
  // A chunk's fold is awaited before the chunk after next is asked for, not the next one: a ring of
  // three reuses a chunk's buffer only then, and the fold's trip to the thread and back no longer
  // stands between one write and the next.
  let previous: Promise<void> | undefined;
  for await (const chunk of chunks(stream.onThread)) {
    const checking = stream.update(chunk);
    // Marked handled now: a failure is reported by the await below.
    checking.catch(() => {});
    yield chunk;
    await previous;
    previous = checking;
  }
  await previous;
  return stream.digest();
}

/** Runs `work` once pending I/O callbacks have had their turn (setImmediate, else a timer), and resolves after it. */
function afterIo(work: () => void): Promise<void> {
  const later = (globalThis as { setImmediate?: (f: () => void) => void }).setImmediate ?? ((f: () => void) => setTimeout(f, 0));
  return new Promise((resolve, reject) =>
    later(() => {
      try {
        resolve(work());
      } catch (error) {
        reject(error);
      }
    }),
  );
}

// ----- the thread -----

type WorkerThreads = typeof import("node:worker_threads");
type WorkerLike = InstanceType<WorkerThreads["Worker"]>;

/**
 * The worker's code: one CRC per stream id, each message a shared buffer's first `length` bytes.
 * Neither CommonJS nor ES module syntax (`--input-type` of the parent decides how eval'd code is read).
 */
const WORKER_SOURCE = `
const { parentPort } = process.getBuiltinModule("node:worker_threads");
const { crc32 } = process.getBuiltinModule("node:zlib");
const crcs = new Map();
parentPort.on("message", ({ id, buffer, offset, length, drop }) => {
  if (drop) { crcs.delete(id); return; }
  let crc = crcs.get(id) ?? 0;
  try {
    if (length > 0) crc = crc32(new Uint8Array(buffer, offset, length), crc);
    crcs.set(id, crc);
    parentPort.postMessage({ id, crc });
  } catch (error) {
    parentPort.postMessage({ id, error: String(error && error.message || error) });
  }
});
`;

let shared: CrcThread | undefined | null;

/** The process's CRC thread, started on first use; undefined where threads are missing or cannot start. */
function crcThread(): CrcThread | undefined {
  if (shared === null) return undefined;
  if (shared !== undefined) return shared;
  try {
    const getBuiltin = (globalThis as { process?: { getBuiltinModule?(id: string): unknown } }).process?.getBuiltinModule;
    const threads = getBuiltin?.("node:worker_threads") as WorkerThreads | undefined;
    if (threads === undefined || typeof SharedArrayBuffer === "undefined") {
      shared = null;
      return undefined;
    }
    shared = new CrcThread(new threads.Worker(WORKER_SOURCE, { eval: true, execArgv: [] }));
    return shared;
  } catch {
    shared = null;
    return undefined;
  }
}

interface Waiter {
  resolve(crc: number): void;
  reject(error: Error): void;
}

class CrcThread {
  readonly #worker: WorkerLike;
  /** Per stream, the replies awaited, oldest first (the worker answers each stream in order). */
  readonly #waiting = new Map<number, Waiter[]>();
  #pending = 0;
  #nextId = 1;
  #failure: Error | undefined;

  constructor(worker: WorkerLike) {
    this.#worker = worker;
    worker.unref();
    worker.on("message", (m: { id: number; crc?: number; error?: string }) => {
      const waiter = this.#waiting.get(m.id)?.shift();
      this.#settled();
      if (waiter === undefined) return;
      if (m.error !== undefined) waiter.reject(new Error(`CRC thread: ${m.error}`));
      else waiter.resolve(m.crc!);
    });
    const fail = (error: Error) => {
      this.#failure = error;
      if (shared === this) shared = null;
      for (const waiters of this.#waiting.values()) for (const w of waiters.splice(0)) w.reject(error);
      this.#pending = 0;
    };
    worker.on("error", fail);
    worker.on("exit", (code) => fail(new Error(`the CRC thread exited (status ${code})`)));
  }

  /** Sends `length` bytes of `buffer` from `offset` to be folded into stream `id`; resolves to the CRC so far. */
  send(id: number, buffer: SharedArrayBuffer, offset: number, length: number): Promise<number> {
    if (this.#failure !== undefined) return Promise.reject(this.#failure);
    return new Promise((resolve, reject) => {
      let waiters = this.#waiting.get(id);
      if (waiters === undefined) this.#waiting.set(id, (waiters = []));
      waiters.push({ resolve, reject });
      // Held open only while a reply is due: an abandoned stream cannot keep the process alive.
      if (this.#pending++ === 0) this.#worker.ref();
      this.#worker.postMessage({ id, buffer, offset, length });
    });
  }

  drop(id: number): void {
    this.#waiting.delete(id);
    if (this.#failure === undefined) this.#worker.postMessage({ id, drop: true });
  }

  #settled(): void {
    if (this.#pending > 0 && --this.#pending === 0) this.#worker.unref();
  }

  stream(): Crc32Stream {
    const id = this.#nextId++;
    const free: SharedArrayBuffer[] = [];
    const inFlight: Promise<number>[] = [];
    let crc = 0;
    let done = false;
    let order: Promise<void> = Promise.resolve();
    const settleOldest = async () => {
      crc = await inFlight.shift()!;
    };
    return {
      onThread: true,
      update: (chunk) => {
        if (done) return Promise.reject(new Error("update of a digested CRC stream"));
        if (chunk.byteLength === 0) return Promise.resolve();
        // Updates may overlap (withCrc32 does not wait for one before the next): each is sent in
        // its turn, after the one before it, so that the thread folds the chunks in order.
        let folded: Promise<number> | undefined;
        const sent = order.then(async () => {
          if (chunk.buffer instanceof SharedArrayBuffer) {
            // Memory the thread reads as it is (a shared read ring): no copy, the chunk held until folded.
            folded = this.send(id, chunk.buffer, chunk.byteOffset, chunk.byteLength);
            folded.catch(() => {});
            inFlight.push(folded);
            return;
          }
          while (inFlight.length >= SLOTS) await settleOldest();
          let buffer = free.pop();
          if (buffer === undefined || buffer.byteLength < chunk.byteLength) buffer = new SharedArrayBuffer(chunk.byteLength);
          new Uint8Array(buffer, 0, chunk.byteLength).set(chunk);
          const reply = this.send(id, buffer, 0, chunk.byteLength);
          // Marked handled now: a failure is reported by the update or digest that awaits it.
          reply.catch(() => {});
          const slot = buffer;
          const settled = reply.then((value) => {
            free.push(slot);
            return value;
          });
          settled.catch(() => {});
          inFlight.push(settled);
        });
        order = sent.catch(() => {});
        return sent.then(async () => {
          if (folded !== undefined) await folded;
        });
      },
      digest: async () => {
        done = true;
        try {
          await order;
          while (inFlight.length > 0) await settleOldest();
          return crc;
        } finally {
          this.drop(id);
        }
      },
    };
  }
}
