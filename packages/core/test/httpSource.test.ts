/**
 * The HTTP range source against servers this file starts on 127.0.0.1: well-behaved ones, and
 * ones that ignore Range, answer the wrong range, redirect, change the file mid-read, fail, stall
 * or trickle. Every server is closed in afterAll; every source is closed by the test that opened it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  HTTP_READ_AHEAD,
  type HttpSource,
  type HttpSourceOptions,
  MAX_HTTP_ATTEMPTS,
  type StConvertError,
  bytesSource,
  isStConvertError,
  openHttpSource,
  readSafetensors,
  readTensorBytes,
} from "@st-convert/core";
import { type RangeServer, pseudoRandomBytes, safetensorsFile, servedBytes, sparseFile, startRangeServer } from "@st-convert/testing";

/** Retries without the production backoff: the waits are not what these tests check. */
const FAST: HttpSourceOptions = { retryDelayMs: 1 };

const servers: RangeServer[] = [];
async function server(options: Parameters<typeof startRangeServer>[0] = {}): Promise<RangeServer> {
  const started = await startRangeServer(options);
  servers.push(started);
  return started;
}
afterAll(async () => {
  await Promise.all(servers.map((s) => s.close()));
});

/** Opens `url`, runs `use`, closes the source on every path. */
async function withSource<T>(url: string, options: HttpSourceOptions, use: (source: HttpSource) => Promise<T>): Promise<T> {
  const source = await openHttpSource(url, { ...FAST, ...options });
  try {
    return await use(source);
  } finally {
    await source.close();
  }
}

/** The StConvertError a promise rejects with. */
async function failure(promise: Promise<unknown>): Promise<StConvertError> {
  try {
    await promise;
  } catch (error) {
    if (isStConvertError(error)) return error;
    throw error;
  }
  throw new Error("expected a rejection");
}

const FILE = pseudoRandomBytes(15, 1024 * 1024 + 123);

/** Byte equality without vitest's element-by-element diff, which takes seconds on a MB. */
function expectBytes(actual: Uint8Array, expected: Uint8Array): void {
  expect(actual.byteLength).toBe(expected.byteLength);
  expect(Buffer.from(actual.buffer, actual.byteOffset, actual.byteLength).equals(expected)).toBe(true);
}

describe("range reads from a server that serves ranges", () => {
  let s: RangeServer;
  beforeAll(async () => {
    s = await server();
    s.files.set("/file.bin", servedBytes(FILE, { etag: '"abc"' }));
  });

  it("learns the size from the first Content-Range and reads any range exactly", async () => {
    s.reset();
    await withSource(s.url("/file.bin"), {}, async (source) => {
      expect(source.size).toBe(FILE.byteLength);
      for (const [offset, length] of [
        [0, 8],
        [100, 5000],
        [HTTP_READ_AHEAD - 3, 10],
        [500_000, 300_000],
        [FILE.byteLength - 7, 7],
        [FILE.byteLength, 0],
      ] as const) {
        expectBytes(await source.read(offset, length), FILE.subarray(offset, offset + length));
      }
      expect(await failure(source.read(FILE.byteLength - 2, 3))).toMatchObject({ code: "UnexpectedEof" });
      expect(source.bytesFetched).toBe(s.bytesServed());
    });
    const ranges = s.log.map((r) => r.headers.range);
    expect(ranges[0]).toBe(`bytes=0-${HTTP_READ_AHEAD - 1}`);
    // Every request after the first is conditioned on the first answer's ETag; fetch asks for the identity encoding.
    expect(s.log.slice(1).every((r) => r.headers["if-range"] === '"abc"')).toBe(true);
    expect(s.log.every((r) => r.headers["accept-encoding"] === "identity")).toBe(true);
  });

  it("serves small reads from the read-ahead window: no request for bytes already fetched", async () => {
    s.reset();
    await withSource(s.url("/file.bin"), {}, async (source) => {
      await source.read(0, 8);
      await source.read(8, 40_000);
      await source.read(HTTP_READ_AHEAD - 100, 100);
      expect(s.log).toHaveLength(1);
      // A read that starts inside the window asks only for what follows it.
      expectBytes(await source.read(HTTP_READ_AHEAD - 100, 300), FILE.subarray(HTTP_READ_AHEAD - 100, HTTP_READ_AHEAD + 200));
      expect(s.log.map((r) => r.headers.range)).toEqual([`bytes=0-${HTTP_READ_AHEAD - 1}`, `bytes=${HTTP_READ_AHEAD}-${2 * HTTP_READ_AHEAD - 1}`]);
    });
  });

  it("coalesces adjacent reads asked for together into one request", async () => {
    s.reset();
    await withSource(s.url("/file.bin"), { readAhead: 1024 }, async (source) => {
      const parts = await Promise.all([source.read(300_000, 100_000), source.read(400_000, 100_000), source.read(500_000, 100_000)]);
      parts.forEach((part, i) => expectBytes(part, FILE.subarray(300_000 + i * 100_000, 400_000 + i * 100_000)));
    });
    expect(s.log.map((r) => r.headers.range)).toEqual(["bytes=0-1023", "bytes=300000-599999"]);
  });

  it("splits a read larger than maxRequestSize into requests of that size", async () => {
    s.reset();
    await withSource(s.url("/file.bin"), { readAhead: 1024, maxRequestSize: 200_000 }, async (source) => {
      expectBytes(await source.read(10_000, 500_000), FILE.subarray(10_000, 510_000));
    });
    expect(s.log.slice(1).map((r) => r.headers.range)).toEqual(["bytes=10000-209999", "bytes=210000-409999", "bytes=410000-509999"]);
  });

  it("reports the bytes fetched as they arrive", async () => {
    const seen: [number, number][] = [];
    await withSource(s.url("/file.bin"), { onProgress: (fetched, size) => seen.push([fetched, size]) }, async (source) => {
      await source.read(600_000, 400_000);
      expect(seen.at(-1)).toEqual([source.bytesFetched, FILE.byteLength]);
    });
    expect(seen.length).toBeGreaterThan(1);
    expect(seen.every(([fetched], i) => i === 0 || fetched > seen[i - 1]![0])).toBe(true);
    expect(seen.at(-1)![0]).toBe(HTTP_READ_AHEAD + 400_000);
  });

  it("reads a file smaller than the window, and an empty one (416 with bytes */0)", async () => {
    s.files.set("/small.bin", servedBytes(FILE.subarray(0, 1000)));
    s.files.set("/empty.bin", servedBytes(new Uint8Array(0)));
    await withSource(s.url("/small.bin"), {}, async (source) => {
      expect(source.size).toBe(1000);
      expectBytes(await source.read(0, 1000), FILE.subarray(0, 1000));
    });
    await withSource(s.url("/empty.bin"), {}, async (source) => {
      expect(source.size).toBe(0);
      expect(await source.read(0, 0)).toEqual(new Uint8Array(0));
    });
  });

  it("reads a safetensors file of 1 GiB (generated, not on disk) with its header and one window", async () => {
    const count = 1024;
    const entries = Array.from({ length: count }, (_, i) => `"t${i}":{"dtype":"F32","shape":[262144],"data_offsets":[${i * 2 ** 20},${(i + 1) * 2 ** 20}]}`);
    const head = safetensorsFile(`{${entries.join(",")}}`);
    s.files.set("/big.safetensors", sparseFile(head, head.byteLength + 2 ** 30));
    s.reset();
    await withSource(s.url("/big.safetensors"), {}, async (source) => {
      const file = await readSafetensors(source);
      expect(file.tensors).toHaveLength(count);
      expect(s.bytesServed()).toBeLessThanOrEqual(head.byteLength + HTTP_READ_AHEAD);
      // A small tensor read later costs its bytes (widened to a window), not the file.
      s.reset();
      const bytes = await readTensorBytes(file.tensor("t1000"));
      expect(bytes.byteLength).toBe(2 ** 20);
      expect(s.bytesServed()).toBe(2 ** 20);
    });
  });

  it("refuses URLs it must not fetch", async () => {
    expect(await failure(openHttpSource("ftp://127.0.0.1/x"))).toMatchObject({ code: "InvalidArgument" });
    expect(await failure(openHttpSource(`http://user:secret@127.0.0.1:1/x`))).toMatchObject({ code: "InvalidArgument" });
    expect(await failure(openHttpSource("not a url"))).toMatchObject({ code: "InvalidArgument" });
  });

  it("answers 404 with HttpError at once, naming the URL, without retrying", async () => {
    s.reset();
    const error = await failure(openHttpSource(s.url("/missing.bin"), FAST));
    expect(error.code).toBe("HttpError");
    expect(error.message).toContain(s.url("/missing.bin"));
    expect(error.message).toContain("HTTP 404");
    expect(s.log).toHaveLength(1);
  });

  it("stops reads in flight on close(), with Aborted", async () => {
    const slow = await server({ chunkSize: 1024, chunkDelayMs: 20 });
    slow.files.set("/file.bin", servedBytes(FILE));
    const source = await openHttpSource(slow.url("/file.bin"), { ...FAST, readAhead: 1024 });
    const pending = source.read(100_000, 500_000);
    await source.close();
    expect(await failure(pending)).toMatchObject({ code: "Aborted" });
    expect(await failure(source.read(0, 8))).toMatchObject({ code: "Aborted" });
  });

  it("stops on the caller's signal, with Aborted", async () => {
    const controller = new AbortController();
    await withSource(s.url("/file.bin"), { signal: controller.signal }, async (source) => {
      controller.abort();
      expect(await failure(source.read(500_000, 10))).toMatchObject({ code: "Aborted" });
    });
  });
});

describe("a server that ignores Range", () => {
  let s: RangeServer;
  beforeAll(async () => {
    s = await server({ ignoreRange: true });
    s.files.set("/file.bin", servedBytes(FILE));
    s.files.set("/tiny.bin", servedBytes(FILE.subarray(0, 100)));
  });

  it("is refused with RangeNotSupported, naming the URL, without downloading the file", async () => {
    const error = await failure(openHttpSource(s.url("/file.bin"), FAST));
    expect(error.code).toBe("RangeNotSupported");
    expect(error.message).toContain(s.url("/file.bin"));
    expect(error.message).toContain("HTTP 200");
    expect(s.log.filter((r) => r.path === "/file.bin")).toHaveLength(1);
  });

  it("is read when the whole file fits in the first window (no more than a range would bring)", async () => {
    await withSource(s.url("/tiny.bin"), {}, async (source) => {
      expect(source.size).toBe(100);
      expectBytes(await source.read(10, 90), FILE.subarray(10, 100));
    });
  });

  it("adds wholeFileHint to the refusal", async () => {
    const error = await failure(openHttpSource(s.url("/file.bin"), { ...FAST, wholeFileHint: "allow it with --allow-download" }));
    expect(error.message).toMatch(/never downloaded whole unless allowed; allow it with --allow-download$/);
  });
});

/**
 * A spool that keeps the body in memory (the CLI's writes a scratch file), and what it saw: the
 * size it was told, the chunks, whether the body failed, whether the copy was closed.
 */
function memorySpool() {
  const seen = { size: undefined as number | undefined, chunks: 0, bytes: 0, failed: undefined as unknown, closed: false, calls: 0 };
  const spool: NonNullable<HttpSourceOptions["spool"]> = async (body, size) => {
    seen.calls++;
    seen.size = size;
    const parts: Uint8Array[] = [];
    try {
      for await (const chunk of body) {
        parts.push(chunk.slice());
        seen.chunks++;
        seen.bytes += chunk.byteLength;
      }
    } catch (error) {
      seen.failed = error;
      throw error;
    }
    const copy = bytesSource(Buffer.concat(parts), "copy");
    return {
      ...copy,
      close: async () => {
        seen.closed = true;
      },
    };
  };
  return { spool, seen };
}

describe("a server that ignores Range, read whole through spool", () => {
  it("hands the one 200 answer to spool in order and serves every read from the copy", async () => {
    const s = await server({ ignoreRange: true, chunkSize: 16 * 1024 });
    s.files.set("/file.bin", servedBytes(FILE));
    const { spool, seen } = memorySpool();
    await withSource(s.url("/file.bin"), { spool }, async (source) => {
      expect(source.spooled).toBe(true);
      expect(source.size).toBe(FILE.byteLength);
      expect(seen).toMatchObject({ calls: 1, size: FILE.byteLength, bytes: FILE.byteLength });
      expect(seen.chunks).toBeGreaterThan(1);
      expectBytes(await source.read(0, FILE.byteLength), FILE);
      expectBytes(await source.read(777_777, 10), FILE.subarray(777_777, 777_787));
      expect(source.bytesFetched).toBe(s.bytesServed());
    });
    expect(seen.closed).toBe(true);
    expect(s.log).toHaveLength(1);
    expect(s.bytesServed()).toBe(FILE.byteLength);
  });

  it("is not used for a server that serves ranges, nor for a file that fits in the first window", async () => {
    const ranged = await server();
    const plain = await server({ ignoreRange: true });
    ranged.files.set("/file.bin", servedBytes(FILE));
    plain.files.set("/tiny.bin", servedBytes(FILE.subarray(0, 100)));
    const { spool, seen } = memorySpool();
    await withSource(ranged.url("/file.bin"), { spool }, async (source) => {
      expect(source.spooled).toBe(false);
      expectBytes(await source.read(500_000, 10), FILE.subarray(500_000, 500_010));
    });
    await withSource(plain.url("/tiny.bin"), { spool }, async (source) => {
      expect(source.spooled).toBe(false);
      expect(source.size).toBe(100);
    });
    expect(seen.calls).toBe(0);
  });

  it("resumes a body that breaks off: the whole answer again, its first bytes skipped", async () => {
    const s = await server({ ignoreRange: true, cut: { after: 300_000, times: 2 } });
    s.files.set("/file.bin", servedBytes(FILE, { etag: '"same"' }));
    const { spool, seen } = memorySpool();
    await withSource(s.url("/file.bin"), { spool }, async (source) => {
      expectBytes(await source.read(0, FILE.byteLength), FILE);
    });
    expect(seen).toMatchObject({ calls: 1, bytes: FILE.byteLength });
    expect(s.log.map((r) => [r.headers.range, r.headers["if-range"]])).toEqual([
      [`bytes=0-${HTTP_READ_AHEAD - 1}`, undefined],
      ["bytes=300000-", '"same"'],
      ["bytes=300000-", '"same"'],
    ]);
    expect(s.bytesServed()).toBe(300_000 + 300_000 + FILE.byteLength);
  });

  it("resumes with a range when the server answers one (206 from where the body stopped)", async () => {
    let first = true;
    const s = await server({
      handle(request, response, self) {
        if (!first) return false;
        first = false;
        // The first answer: the whole file, broken off after 200,000 bytes.
        const file = self.files.get(request.url!)!;
        response.writeHead(200, { "Content-Length": file.size, ETag: file.etag });
        response.write(file.bytes(0, 200_000), () => request.socket.destroy());
        return true;
      },
    });
    s.files.set("/file.bin", servedBytes(FILE, { etag: '"r"' }));
    const { spool } = memorySpool();
    await withSource(s.url("/file.bin"), { spool }, async (source) => {
      expectBytes(await source.read(0, FILE.byteLength), FILE);
    });
    expect(s.log.map((r) => r.headers.range)).toEqual([`bytes=0-${HTTP_READ_AHEAD - 1}`, "bytes=200000-"]);
    expect(s.bytesServed()).toBe(FILE.byteLength - 200_000);
  });

  it("refuses with SourceChanged when the file changed before the body could be resumed, and the copy is never made", async () => {
    const changed = new Uint8Array(FILE);
    changed[0]! ^= 0xff;
    let requests = 0;
    const s = await server({
      ignoreRange: true,
      cut: { after: 100_000, times: 1 },
      handle(_request, _response, self) {
        if (++requests === 2) self.files.set("/file.bin", servedBytes(changed, { etag: '"v2"' }));
        return false;
      },
    });
    s.files.set("/file.bin", servedBytes(FILE, { etag: '"v1"' }));
    const { spool, seen } = memorySpool();
    const error = await failure(openHttpSource(s.url("/file.bin"), { ...FAST, spool }));
    expect(error.code).toBe("SourceChanged");
    expect(error.message).toContain(s.url("/file.bin"));
    expect(error.message).toContain('ETag "v1", now "v2"');
    expect(seen.failed).toBe(error);
    expect(s.log).toHaveLength(2);
  });

  it("refuses with SourceChanged by the size when the server gives no version", async () => {
    let requests = 0;
    const s = await server({
      ignoreRange: true,
      cut: { after: 100_000, times: 1 },
      handle(_request, _response, self) {
        if (++requests === 2) self.files.set("/file.bin", servedBytes(FILE.subarray(0, FILE.byteLength - 1), { etag: null }));
        return false;
      },
    });
    s.files.set("/file.bin", servedBytes(FILE, { etag: null }));
    const error = await failure(openHttpSource(s.url("/file.bin"), { ...FAST, spool: memorySpool().spool }));
    expect(error.code).toBe("SourceChanged");
    expect(error.message).toContain(`it held ${FILE.byteLength} bytes, now ${FILE.byteLength - 1}`);
  });

  it("gives up after maxAttempts when every answer breaks off, with HttpError", async () => {
    const s = await server({ ignoreRange: true, cut: { after: 50_000 } });
    s.files.set("/file.bin", servedBytes(FILE));
    const { spool, seen } = memorySpool();
    const error = await failure(openHttpSource(s.url("/file.bin"), { ...FAST, spool }));
    expect(error.code).toBe("HttpError");
    expect(error.message).toContain(`gave up after ${MAX_HTTP_ATTEMPTS} attempts (maxAttempts)`);
    expect(seen.failed).toBe(error);
    // Every answer brings the same first 50,000 bytes: the copy gets them once.
    expect(seen.bytes).toBe(50_000);
    expect(s.bytesServed()).toBe(MAX_HTTP_ATTEMPTS * 50_000);
    expect(s.log).toHaveLength(MAX_HTTP_ATTEMPTS);
  });

  it("stops a download on the caller's signal, with Aborted", async () => {
    const s = await server({ ignoreRange: true, chunkSize: 4096, chunkDelayMs: 5 });
    s.files.set("/file.bin", servedBytes(FILE));
    const controller = new AbortController();
    const { spool, seen } = memorySpool();
    const opening = openHttpSource(s.url("/file.bin"), {
      ...FAST,
      spool,
      signal: controller.signal,
      onProgress: (fetched) => {
        if (fetched >= 40_000) controller.abort(new Error("stop"));
      },
    });
    const error = await failure(opening);
    expect(error.code).toBe("Aborted");
    expect(seen.failed).toBe(error);
    expect(seen.bytes).toBeLessThan(FILE.byteLength);
  });
});

describe("a 206 with another range than the one asked", () => {
  it("is refused with RangeNotSupported, on the first request and on a later one", async () => {
    const file = servedBytes(FILE);
    let shift = 0;
    const s = await server({
      handle(request, response) {
        if (shift === 0) return false;
        const [, a, b] = /bytes=(\d+)-(\d+)/.exec(request.headers.range ?? "") ?? [];
        const first = Number(a) + shift;
        const last = Number(b) + shift;
        response.writeHead(206, { "Content-Range": `bytes ${first}-${last}/${FILE.byteLength}`, "Content-Length": last - first + 1, ETag: file.etag });
        response.end(FILE.subarray(first, last + 1));
        return true;
      },
    });
    s.files.set("/file.bin", file);
    shift = 1;
    const first = await failure(openHttpSource(s.url("/file.bin"), FAST));
    expect(first.code).toBe("RangeNotSupported");
    expect(first.message).toContain(`answered bytes 1-${HTTP_READ_AHEAD}/${FILE.byteLength} to a request for bytes 0-${HTTP_READ_AHEAD - 1}`);
    shift = 0;
    await withSource(s.url("/file.bin"), {}, async (source) => {
      shift = 4096;
      expect(await failure(source.read(500_000, 1000))).toMatchObject({ code: "RangeNotSupported", file: s.url("/file.bin") });
    });
  });

  it("is refused when it has no Content-Range", async () => {
    const s = await server({
      handle(_request, response) {
        response.writeHead(206, { "Content-Length": 10 });
        response.end(FILE.subarray(0, 10));
        return true;
      },
    });
    expect(await failure(openHttpSource(s.url("/file.bin"), FAST))).toMatchObject({ code: "RangeNotSupported" });
  });
});

describe("redirects", () => {
  let a: RangeServer;
  let b: RangeServer;
  beforeAll(async () => {
    b = await server();
    b.files.set("/cdn/file.bin", servedBytes(FILE));
    a = await server({
      handle(request, response) {
        const to = request.url === "/old" ? "/file.bin" : request.url === "/away" ? `${b.origin}/cdn/file.bin` : undefined;
        if (to === undefined) return false;
        response.writeHead(302, { Location: to, "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    a.files.set("/file.bin", servedBytes(FILE));
  });

  const token = { Authorization: "Bearer secret-token" };

  it("follows a same-origin redirect with the headers, then reads from the target directly", async () => {
    a.reset();
    await withSource(a.url("/old"), { headers: token }, async (source) => {
      expectBytes(await source.read(700_000, 100_000), FILE.subarray(700_000, 800_000));
    });
    expect(a.log.map((r) => r.path)).toEqual(["/old", "/file.bin", "/file.bin"]);
    expect(a.log.every((r) => r.headers.authorization === "Bearer secret-token")).toBe(true);
  });

  it("drops the headers on a redirect to another origin, for every request there", async () => {
    a.reset();
    b.reset();
    await withSource(a.url("/away"), { headers: token }, async (source) => {
      expectBytes(await source.read(700_000, 100_000), FILE.subarray(700_000, 800_000));
    });
    expect(a.log.map((r) => [r.path, r.headers.authorization])).toEqual([["/away", "Bearer secret-token"]]);
    expect(b.log.map((r) => [r.path, r.headers.authorization])).toEqual([
      ["/cdn/file.bin", undefined],
      ["/cdn/file.bin", undefined],
    ]);
  });

  it("keeps them dropped when the chain comes back to the first origin (A → B → A)", async () => {
    let b2: RangeServer | undefined;
    const a2 = await server({
      handle(request, response) {
        if (request.url !== "/first") return false;
        response.writeHead(302, { Location: b2!.url("/bounce"), "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    a2.files.set("/file.bin", servedBytes(FILE));
    b2 = await server({
      handle(_request, response) {
        response.writeHead(307, { Location: a2.url("/file.bin"), "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    await withSource(a2.url("/first"), { headers: token }, async (source) => {
      expectBytes(await source.read(700_000, 10), FILE.subarray(700_000, 700_010));
    });
    expect(a2.log.map((r) => [r.path, r.headers.authorization])).toEqual([
      ["/first", "Bearer secret-token"],
      ["/file.bin", undefined],
      ["/file.bin", undefined],
    ]);
    expect(b2.log.map((r) => r.headers.authorization)).toEqual([undefined]);
  });

  it("walks the chain again when the target later answers as an expired signed URL would (403)", async () => {
    let expired = false;
    const cdn = await server({
      handle(request, response) {
        if (!expired || request.url !== "/signed?v=1") return false;
        response.writeHead(403, { "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    cdn.files.set("/signed", servedBytes(FILE, { etag: '"same"' }));
    let version = 0;
    const hub = await server({
      handle(_request, response) {
        response.writeHead(302, { Location: cdn.url(`/signed?v=${++version}`), "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    await withSource(hub.url("/resolve/file.bin"), { headers: token }, async (source) => {
      expired = true;
      expectBytes(await source.read(900_000, 100_000), FILE.subarray(900_000, 1_000_000));
    });
    expect(hub.log).toHaveLength(2);
    expect(cdn.log.map((r) => r.headers.authorization)).toEqual([undefined, undefined, undefined]);
  });

  it("refuses a redirect loop past maxRedirects, and a redirect without Location", async () => {
    const loop = await server({
      handle(request, response) {
        response.writeHead(302, request.url === "/nowhere" ? { "Content-Length": 0 } : { Location: "/loop", "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    const error = await failure(openHttpSource(loop.url("/loop"), { ...FAST, maxRedirects: 3 }));
    expect(error.code).toBe("HttpError");
    expect(error.message).toContain("more than 3 redirects");
    expect(loop.log).toHaveLength(4);
    expect(await failure(openHttpSource(loop.url("/nowhere"), FAST))).toMatchObject({ code: "HttpError" });
  });
});

describe("a file that changes while it is read", () => {
  const before = pseudoRandomBytes(1, 600_000);
  const after = pseudoRandomBytes(2, 600_000);

  it("is refused with SourceChanged when the server honours If-Range (200 with the new file)", async () => {
    const s = await server();
    s.files.set("/file.bin", servedBytes(before, { etag: '"one"' }));
    await withSource(s.url("/file.bin"), { readAhead: 1024 }, async (source) => {
      expectBytes(await source.read(300_000, 10), before.subarray(300_000, 300_010));
      s.files.set("/file.bin", servedBytes(after, { etag: '"two"' }));
      const error = await failure(source.read(500_000, 10));
      expect(error.code).toBe("SourceChanged");
      expect(error.message).toContain(s.url("/file.bin"));
    });
    expect(s.log.at(-1)?.headers["if-range"]).toBe('"one"');
  });

  it("is refused with SourceChanged when the server ignores If-Range but sends the new ETag", async () => {
    const s = await server({ ignoreIfRange: true });
    s.files.set("/file.bin", servedBytes(before, { etag: '"one"' }));
    await withSource(s.url("/file.bin"), {}, async (source) => {
      s.files.set("/file.bin", servedBytes(after, { etag: '"two"' }));
      const error = await failure(source.read(500_000, 10));
      expect(error.code).toBe("SourceChanged");
      expect(error.message).toContain('ETag "one", now "two"');
    });
  });

  it("is refused with SourceChanged by Last-Modified when there is no ETag", async () => {
    const s = await server({ ignoreIfRange: true });
    s.files.set("/file.bin", servedBytes(before, { etag: null, lastModified: "Mon, 01 Dec 2025 08:00:00 GMT" }));
    await withSource(s.url("/file.bin"), {}, async (source) => {
      s.files.set("/file.bin", servedBytes(after, { etag: null, lastModified: "Mon, 01 Dec 2025 09:00:00 GMT" }));
      expect(await failure(source.read(500_000, 10))).toMatchObject({ code: "SourceChanged" });
    });
    expect(s.log.at(-1)?.headers["if-range"]).toBe("Mon, 01 Dec 2025 08:00:00 GMT");
  });

  it("is refused with SourceChanged by its size when there is no version at all", async () => {
    const s = await server();
    s.files.set("/file.bin", servedBytes(before, { etag: null }));
    await withSource(s.url("/file.bin"), {}, async (source) => {
      s.files.set("/file.bin", servedBytes(pseudoRandomBytes(3, 700_000), { etag: null }));
      expect(await failure(source.read(500_000, 10))).toMatchObject({ code: "SourceChanged" });
    });
  });

  it("does not send a weak ETag as If-Range, but still compares it", async () => {
    const s = await server({ ignoreIfRange: true });
    s.files.set("/file.bin", servedBytes(before, { etag: 'W/"one"' }));
    await withSource(s.url("/file.bin"), { readAhead: 1024 }, async (source) => {
      expectBytes(await source.read(400_000, 10), before.subarray(400_000, 400_010));
      s.files.set("/file.bin", servedBytes(after, { etag: 'W/"two"' }));
      expect(await failure(source.read(500_000, 10))).toMatchObject({ code: "SourceChanged" });
    });
    expect(s.log.every((r) => r.headers["if-range"] === undefined)).toBe(true);
  });
});

describe("failures and retries", () => {
  /** A server whose first `failures` requests for each path get `status` (or a reset connection, or silence). */
  async function failing(failures: number, how: number | "reset" | "silence" | "cut") {
    const seen = new Map<string, number>();
    const s = await server({
      handle(request, response, self) {
        const n = (seen.get(request.url!) ?? 0) + 1;
        seen.set(request.url!, n);
        if (n > failures) return false;
        if (how === "reset") {
          request.socket.destroy();
        } else if (how === "silence") {
          // Never answers: the client's stall timeout has to give up on it.
        } else if (how === "cut") {
          // Half the body, then the connection closes.
          const file = self.files.get(request.url!)!;
          response.writeHead(206, {
            "Content-Range": `bytes 0-${HTTP_READ_AHEAD - 1}/${file.size}`,
            "Content-Length": HTTP_READ_AHEAD,
            ETag: file.etag,
          });
          response.write(file.bytes(0, 1000), () => request.socket.destroy());
        } else {
          response.writeHead(how, { "Content-Length": 0, ...(how === 503 ? { "Retry-After": "0" } : {}) });
          response.end();
        }
        return true;
      },
    });
    s.files.set("/file.bin", servedBytes(FILE));
    return s;
  }

  it.each([500, 502, 503, 429, "reset", "cut"] as const)("retries after %s and then reads", async (how) => {
    const s = await failing(MAX_HTTP_ATTEMPTS - 1, how);
    await withSource(s.url("/file.bin"), {}, async (source) => {
      expectBytes(await source.read(0, 1000), FILE.subarray(0, 1000));
    });
    expect(s.log).toHaveLength(MAX_HTTP_ATTEMPTS);
  });

  it("retries a stalled response after stallTimeoutMs", async () => {
    const s = await failing(1, "silence");
    await withSource(s.url("/file.bin"), { stallTimeoutMs: 200 }, async (source) => {
      expectBytes(await source.read(0, 1000), FILE.subarray(0, 1000));
    });
    expect(s.log).toHaveLength(2);
  });

  it("gives up after maxAttempts with HttpError naming the URL and the last status", async () => {
    const s = await failing(1000, 500);
    const error = await failure(openHttpSource(s.url("/file.bin"), FAST));
    expect(error.code).toBe("HttpError");
    expect(error.message).toBe(`${s.url("/file.bin")}: HTTP 500 Internal Server Error; gave up after ${MAX_HTTP_ATTEMPTS} attempts (maxAttempts)`);
    expect(s.log).toHaveLength(MAX_HTTP_ATTEMPTS);
  });

  it("gives up on a later read too, with the same code", async () => {
    let broken = false;
    const s = await server({
      handle(_request, response) {
        if (!broken) return false;
        response.writeHead(502, { "Content-Length": 0 });
        response.end();
        return true;
      },
    });
    s.files.set("/file.bin", servedBytes(FILE));
    await withSource(s.url("/file.bin"), { maxAttempts: 2 }, async (source) => {
      broken = true;
      expect(await failure(source.read(600_000, 10))).toMatchObject({ code: "HttpError" });
      // The failed window is forgotten: a read after the server recovers asks again.
      broken = false;
      expectBytes(await source.read(600_000, 10), FILE.subarray(600_000, 600_010));
    });
    expect(s.log).toHaveLength(4);
  });

  it("adds the auth hint to a 401 and does not retry it", async () => {
    const s = await failing(1000, 401);
    const error = await failure(openHttpSource(s.url("/file.bin"), { ...FAST, authHint: "set HF_TOKEN" }));
    expect(error.code).toBe("HttpError");
    expect(error.message).toMatch(/HTTP 401 Unauthorized for bytes 0-\d+; set HF_TOKEN$/);
    expect(s.log).toHaveLength(1);
  });

  it("completes against a slow server (small chunks, a wait before each)", async () => {
    const s = await server({ chunkSize: 2048, chunkDelayMs: 2 });
    s.files.set("/file.bin", servedBytes(FILE));
    await withSource(s.url("/file.bin"), { readAhead: 16 * 1024 }, async (source) => {
      expectBytes(await source.read(200_000, 100_000), FILE.subarray(200_000, 300_000));
    });
  });
});
