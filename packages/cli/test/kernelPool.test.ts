/**
 * The kernel threads a conversion lends its formats (kernelPool.ts). Run from the sources, as here,
 * the threads' module is not built beside them: a kernel then runs on the calling thread, with the
 * same result (the built command's threads are exercised by gguf.test.ts).
 */
import { describe, expect, it } from "vitest";
import { WorkerKernelPool } from "../src/kernelPool.js";

describe("WorkerKernelPool", () => {
  it("runs a format's kernel on the calling thread when its threads cannot start", async () => {
    const pool = new WorkerKernelPool(2);
    try {
      const values = new Float32Array(64).map((_, i) => i - 31.5);
      const [raw, out] = (await pool.run("gguf", "quantize", [8, "F32", new Uint8Array(values.buffer), new Uint8Array(68)], [])) as Uint8Array[];
      expect(raw!.byteLength).toBe(256);
      // d = 31.5 / 127 as f16, then the first value −31.5 at −127
      expect([out![0], out![1], out![2]]).toEqual([0xf0, 0x33, 0x81]);
      await expect(pool.run("gguf", "nothing", [], [])).rejects.toThrow("no kernel nothing in format gguf");
    } finally {
      await pool.close();
    }
  });
});
