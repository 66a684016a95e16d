import { describe, expect, it } from "vitest";
import { type ByteSink, StConvertError, type TensorEntry, pipeTensor } from "@st-convert/core";

/**
 * A U8 tensor of `count` chunks of `size` bytes; chunk k is filled with k. `pulled` counts the
 * chunks handed out, and each is logged in `log` (shared with the sink, to see the order).
 */
function countingTensor(count: number, size: number, failAt?: number, log: string[] = []) {
  const state = { pulled: 0 };
  const tensor: TensorEntry = {
    name: "w",
    dtype: "U8",
    shape: [count * size],
    byteLength: count * size,
    async *chunks() {
      for (let k = 0; k < count; k++) {
        if (k === failAt) throw new StConvertError("UnexpectedEof", "the reader failed");
        state.pulled++;
        log.push(`pull ${k}`);
        yield new Uint8Array(size).fill(k);
      }
    },
  };
  return { tensor, state };
}

/** Lets the pipe run until it waits on the write in flight. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await Promise.resolve();
}

/** A sink whose writes finish only when the test says so; it records what overlapped what. */
function gatedSink(log: string[] = []) {
  const written: number[] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  let release: (() => void) | undefined;
  let fail: Error | undefined;
  const sink: ByteSink = {
    write(chunk) {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      log.push(`start ${chunk[0]}`);
      return new Promise<void>((resolve, reject) => {
        release = () => {
          inFlight--;
          log.push(`end ${chunk[0]}`);
          written.push(chunk[0]!);
          if (fail !== undefined) reject(fail);
          else resolve();
        };
      });
    },
    close: async () => {},
    abort: async () => {},
  };
  const next = async () => {
    await settle();
    const r = release;
    release = undefined;
    r?.();
  };
  return {
    sink,
    log,
    written,
    next,
    failNext: (error: Error) => (fail = error),
    maxInFlight: () => maxInFlight,
    pending: () => release !== undefined,
  };
}

describe("pipeTensor", () => {
  it("asks for the next chunk while the previous one is being written, one write at a time", async () => {
    const log: string[] = [];
    const { tensor, state } = countingTensor(4, 8, undefined, log);
    const gate = gatedSink(log);
    const done = pipeTensor(tensor, gate.sink, 8);
    await settle();
    // Chunk 0's write started before chunk 1 was asked for, and chunk 2 was not asked for yet.
    expect(log).toEqual(["pull 0", "start 0", "pull 1"]);
    await gate.next();
    await settle();
    expect(log).toEqual(["pull 0", "start 0", "pull 1", "end 0", "start 1", "pull 2"]);
    expect(state.pulled).toBe(3);
    for (let k = 1; k < 4; k++) await gate.next();
    await done;
    expect(gate.written).toEqual([0, 1, 2, 3]);
    expect(gate.maxInFlight()).toBe(1);
  });

  it("reports a failed write with the tensor's name", async () => {
    const { tensor } = countingTensor(3, 8);
    const gate = gatedSink();
    gate.failNext(new StConvertError("Io", "disk full"));
    const done = pipeTensor(tensor, gate.sink, 8);
    await gate.next();
    await expect(done).rejects.toMatchObject({ code: "Io", tensor: "w" });
  });

  it("waits for the write in flight before it reports a reader failure", async () => {
    const { tensor } = countingTensor(3, 8, 1);
    const gate = gatedSink();
    let settled = false;
    const done = pipeTensor(tensor, gate.sink, 8).finally(() => (settled = true));
    done.catch(() => {});
    await settle();
    // The reader has failed on chunk 1, but chunk 0 is still being written: the call must not return yet.
    expect(gate.pending()).toBe(true);
    expect(settled).toBe(false);
    await gate.next();
    await expect(done).rejects.toMatchObject({ code: "UnexpectedEof", tensor: "w" });
    expect(gate.written).toEqual([0]);
  });

  it("refuses a reader that delivers fewer bytes than it declares, after the last write", async () => {
    const { tensor } = countingTensor(2, 8);
    const short: TensorEntry = { ...tensor, shape: [24], byteLength: 24, chunks: tensor.chunks };
    const gate = gatedSink();
    const done = pipeTensor(short, gate.sink, 8);
    await gate.next();
    await gate.next();
    await expect(done).rejects.toMatchObject({ code: "ByteLengthMismatch", tensor: "w" });
    expect(gate.written).toEqual([0, 1]);
  });
});
