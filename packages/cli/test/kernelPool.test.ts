/**
 * The kernel threads a conversion lends its formats (kernelPool.ts). Run from the sources, as here,
 * the threads' module is not built beside them: a kernel then runs on the calling thread, with the
 * same result (the built command's threads are exercised by gguf.test.ts).
 */
import { describe, expect, it } from "vitest";
import { WorkerKernelPool } from "../src/kernelPool.js";

/** The 64 values −31.5 … 31.5 as Q8_0's input, and what the blocks start with: d = 31.5 / 127 as f16, then −127. */
const values = () => new Float32Array(64).map((_, i) => i - 31.5);
const HEAD = [0xf0, 0x33, 0x81];

describe("WorkerKernelPool", () => {
  it("runs a format's kernel on the calling thread when its threads cannot start", async () => {
    const pool = new WorkerKernelPool(2);
    try {
      const [raw, out] = (await pool.run("gguf", "quantize", [8, "F32", new Uint8Array(values().buffer), new Uint8Array(68)], [])) as Uint8Array[];
      expect(raw!.byteLength).toBe(256);
      expect([out![0], out![1], out![2]]).toEqual(HEAD);
      await expect(pool.run("gguf", "nothing", [], [])).rejects.toThrow("no kernel nothing in format gguf");
    } finally {
      await pool.close();
    }
  });
});

describe("the built WorkerKernelPool", () => {
  it("runs kernels on its threads, the buffers moved there and back; a kernel's error fails its call; closed, it refuses calls", async () => {
    const { WorkerKernelPool: Built } = (await import(new URL("../dist/kernelPool.js", import.meta.url).href)) as typeof import("../src/kernelPool.js");
    const pool = new Built(2);
    try {
      const sent = Array.from({ length: 6 }, () => [new Uint8Array(values().buffer), new Uint8Array(68)] as const);
      const answers = (await Promise.all(
        sent.map(([raw, out]) => pool.run("gguf", "quantize", [8, "F32", raw, out], [raw.buffer, out.buffer])),
      )) as Uint8Array[][];
      for (const [raw, out] of answers) {
        expect(raw!.byteLength).toBe(256);
        expect([out![0], out![1], out![2]]).toEqual(HEAD);
      }
      // moved, not copied: the views sent are empty, their memory came back in the answers
      for (const [raw, out] of sent) expect([raw.byteLength, out.byteLength]).toEqual([0, 0]);
      await expect(pool.run("gguf", "quantize", [8, "F32", new Uint8Array(256), new Uint8Array(3)], [])).rejects.toThrow(/2 Q8_0 blocks take 68 bytes, not 3/);
    } finally {
      await pool.close();
    }
    await expect(pool.run("gguf", "quantize", [], [])).rejects.toThrow("the kernel threads were closed");
  });
});
