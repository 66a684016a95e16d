// CRC-32 streams (crcThread.ts): a long one is folded on a worker thread, a short one on the main
// thread; both give zlib's CRC of the bytes, whatever the chunking and whatever the caller does
// with a chunk once its update settled; the thread never holds the process open.
import { spawnSync } from "node:child_process";
import { crc32 } from "node:zlib";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { THREAD_CRC_FROM, crc32Stream, loadCodec } from "@st-convert/npy";

/** Deterministic bytes (xorshift), fast to make. */
function bytes(length: number, seed: number): Uint8Array {
  const words = new Uint32Array(Math.ceil(length / 4));
  let x = seed >>> 0 || 1;
  for (let i = 0; i < words.length; i++) {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    words[i] = x >>> 0;
  }
  return new Uint8Array(words.buffer, 0, length);
}

/** Feeds `data` through a stream in chunks of the sizes given (cycled), overwriting each chunk's buffer once its update settled. */
async function streamed(data: Uint8Array, sizes: number[], expected = data.byteLength, shared = false): Promise<number> {
  const stream = crc32Stream(await loadCodec(), expected);
  expect(stream.onThread).toBe(expected >= THREAD_CRC_FROM);
  const size = Math.max(...sizes);
  // Shared: a chunk the thread folds where it lies (5 bytes into its buffer), not a copy of it.
  const buffer = shared ? new Uint8Array(new SharedArrayBuffer(size + 5), 5, size) : new Uint8Array(size);
  for (let at = 0, k = 0; at < data.byteLength; k++) {
    const n = Math.min(sizes[k % sizes.length]!, data.byteLength - at);
    const chunk = buffer.subarray(0, n);
    chunk.set(data.subarray(at, at + n));
    await stream.update(chunk);
    chunk.fill(0xa5); // reused, as a read ring reuses its buffers
    at += n;
  }
  return stream.digest();
}

describe("CRC-32 streams", () => {
  it("a long stream, on the CRC thread, gives zlib's CRC whatever the chunking, with chunks reused once their update settled", async () => {
    const data = bytes(THREAD_CRC_FROM + 3 * 1024 * 1024 + 5, 7);
    const whole = crc32(data);
    expect(await streamed(data, [2 * 1024 * 1024])).toBe(whole);
    expect(await streamed(data, [1, 4 * 1024 * 1024 + 3, 0, 65_536, 3_000_001])).toBe(whole);
  });

  it("chunks in shared memory are folded where they lie, each held until its update settled", async () => {
    const data = bytes(THREAD_CRC_FROM + 3 * 1024 * 1024 + 5, 11);
    const whole = crc32(data);
    expect(await streamed(data, [2 * 1024 * 1024], data.byteLength, true)).toBe(whole);
    expect(await streamed(data, [1, 4 * 1024 * 1024 + 3, 0, 65_536, 3_000_001], data.byteLength, true)).toBe(whole);
  });

  it("updates that overlap (none awaited before the next) are folded in order, shared or copied", async () => {
    const data = bytes(THREAD_CRC_FROM + 5 * 1024 * 1024 + 3, 13);
    for (const shared of [false, true]) {
      const stream = crc32Stream(await loadCodec(), data.byteLength);
      const updates: Promise<void>[] = [];
      for (let at = 0, k = 0; at < data.byteLength; k++) {
        const n = Math.min([1 << 20, 3, 2 << 20, 65_536][k % 4]!, data.byteLength - at);
        const chunk = shared ? new Uint8Array(new SharedArrayBuffer(n)) : new Uint8Array(n);
        chunk.set(data.subarray(at, at + n));
        updates.push(stream.update(chunk));
        at += n;
      }
      await Promise.all(updates);
      expect(await stream.digest(), shared ? "shared" : "copied").toBe(crc32(data));
    }
  });

  it("streams at once keep their own CRCs, on the thread and off it", async () => {
    const a = bytes(THREAD_CRC_FROM + 1000, 1);
    const b = bytes(THREAD_CRC_FROM + 2000, 2);
    const c = bytes(100_000, 3);
    const [ra, rb, rc] = await Promise.all([streamed(a, [1 << 20]), streamed(b, [3 << 20]), streamed(c, [4096])]);
    expect([ra, rb, rc]).toEqual([crc32(a), crc32(b), crc32(c)]);
  });

  it("a stream of nothing is 0, and a short stream runs where it is", async () => {
    expect(await crc32Stream(await loadCodec(), 0).digest()).toBe(0);
    const c = bytes(1000, 9);
    expect(await streamed(c, [7])).toBe(crc32(c));
  });

  it("the CRC thread does not keep a process alive once its work is done", () => {
    const entry = fileURLToPath(import.meta.resolve("@st-convert/npy"));
    const script = `
      const { crc32Stream, loadCodec, THREAD_CRC_FROM } = await import(${JSON.stringify(entry)});
      const s = crc32Stream(await loadCodec(), THREAD_CRC_FROM);
      await s.update(new Uint8Array(THREAD_CRC_FROM));
      const abandoned = crc32Stream(await loadCodec(), THREAD_CRC_FROM);
      await abandoned.update(new Uint8Array(1024));
      console.log(await s.digest());
    `;
    const run = spawnSync(process.execPath, ["--input-type=module", "-e", script], { encoding: "utf8", timeout: 120_000 });
    expect(run.stderr).toBe("");
    expect(run.status).toBe(0);
    expect(Number(run.stdout.trim())).toBe(crc32(new Uint8Array(THREAD_CRC_FROM)));
  });
});
