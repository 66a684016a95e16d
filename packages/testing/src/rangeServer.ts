/**
 * A local HTTP server for the remote-source tests: serves files by byte ranges (RFC 9110 §14:
 * Range, If-Range, 206, 416) on 127.0.0.1, counts the body bytes it sends per path and logs every
 * request, and lets a test answer requests itself to play a broken or hostile server. Files can be
 * generated (a 1 GiB safetensors file whose tensor bytes are zeros), so no large file is on disk.
 */
import { type IncomingMessage, type ServerResponse, createServer } from "node:http";
import type { AddressInfo } from "node:net";

/** A file the server holds: its size, its bytes by range and its version. */
export interface ServedFile {
  readonly size: number;
  /** Bytes `[start, end)`. */
  bytes(start: number, end: number): Uint8Array;
  readonly etag?: string;
  readonly lastModified?: string;
}

/** The version headers of a served file; `etag: null` serves none. */
export interface ServedVersion {
  etag?: string | null;
  lastModified?: string;
}

let versions = 0;

function versionOf(version: ServedVersion): { etag?: string; lastModified?: string } {
  const etag = version.etag === null ? undefined : (version.etag ?? `"v${++versions}"`);
  return { ...(etag === undefined ? {} : { etag }), ...(version.lastModified === undefined ? {} : { lastModified: version.lastModified }) };
}

/** A file of these bytes (a fresh strong ETag unless one is given). */
export function servedBytes(bytes: Uint8Array, version: ServedVersion = {}): ServedFile {
  return { size: bytes.byteLength, bytes: (start, end) => bytes.subarray(start, end), ...versionOf(version) };
}

/** A file of `size` bytes: `head` from byte 0, zeros after it (a large checkpoint without the disk space). */
export function sparseFile(head: Uint8Array, size: number, version: ServedVersion = {}): ServedFile {
  if (size < head.byteLength) throw new Error(`sparseFile: a head of ${head.byteLength} bytes does not fit in ${size}`);
  return {
    size,
    bytes(start, end) {
      const out = new Uint8Array(end - start);
      if (start < head.byteLength) out.set(head.subarray(start, Math.min(end, head.byteLength)));
      return out;
    },
    ...versionOf(version),
  };
}

/** One request as the server saw it. */
export interface LoggedRequest {
  method: string;
  path: string;
  headers: IncomingMessage["headers"];
}

/** Options of {@link startRangeServer}. */
export interface RangeServerOptions {
  /** Answer every GET with 200 and the whole body, as a server without range support does. */
  ignoreRange?: boolean;
  /** Answer ranges whatever If-Range says (a server that does not implement it). */
  ignoreIfRange?: boolean;
  /** Body chunk size, in bytes. Default 64 KiB. */
  chunkSize?: number;
  /** Wait before each body chunk, in ms (a slow server). Default 0. */
  chunkDelayMs?: number;
  /**
   * Break answers off, as a failing network does: the first `times` answers with a body (default
   * every one) close the connection after `after` body bytes.
   */
  cut?: { after: number; times?: number };
  /**
   * Answers a request before the default handling; returns true when it did. `server.serve()`
   * gives the default answer for a file, for handlers that change only some requests.
   */
  handle?: (request: IncomingMessage, response: ServerResponse, server: RangeServer) => boolean | Promise<boolean>;
}

/** A running server. */
export interface RangeServer {
  /** `http://127.0.0.1:PORT`. */
  readonly origin: string;
  /** The URL of `path` (which starts with `/`). */
  url(path: string): string;
  /** Files by path; change them while the server runs to change what it serves. */
  readonly files: Map<string, ServedFile>;
  /** Every request, in order of arrival. */
  readonly log: LoggedRequest[];
  /** Body bytes sent for `path`, or for every path. */
  bytesServed(path?: string): number;
  /** Serves `file` for `request` as the options say (Range, If-Range, 206, 416, 200), counting bytes against the request's path. */
  serve(request: IncomingMessage, response: ServerResponse, file: ServedFile): Promise<void>;
  /** Forgets the log and the byte counts. */
  reset(): void;
  /** Closes every connection and the server. */
  close(): Promise<void>;
}

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));

/** Starts a server on 127.0.0.1 on a free port. Close it in `afterAll`. */
export async function startRangeServer(options: RangeServerOptions = {}): Promise<RangeServer> {
  const files = new Map<string, ServedFile>();
  const served = new Map<string, number>();
  const log: LoggedRequest[] = [];
  const chunkSize = options.chunkSize ?? 64 * 1024;
  let cuts = 0;

  const writeBody = async (request: IncomingMessage, response: ServerResponse, file: ServedFile, start: number, end: number) => {
    const path = pathOf(request);
    const cut = options.cut !== undefined && (options.cut.times === undefined || cuts < options.cut.times) && start + options.cut.after < end;
    if (cut) cuts++;
    const stop = cut ? start + options.cut!.after : end;
    for (let at = start; at < stop && !response.destroyed; at += chunkSize) {
      if (options.chunkDelayMs !== undefined && options.chunkDelayMs > 0) await sleep(options.chunkDelayMs);
      if (response.destroyed) break;
      const chunk = file.bytes(at, Math.min(stop, at + chunkSize));
      served.set(path, (served.get(path) ?? 0) + chunk.byteLength);
      if (!response.write(chunk)) {
        await new Promise<void>((resolve) => {
          const done = () => {
            response.off("drain", done);
            response.off("close", done);
            resolve();
          };
          response.on("drain", done);
          response.on("close", done);
        });
      }
    }
    if (cut) {
      // What was written reaches the client, then the connection drops without the rest.
      if (!response.destroyed) response.write(new Uint8Array(0), () => request.socket.destroy());
      return;
    }
    if (!response.destroyed) response.end();
  };

  const serve = async (request: IncomingMessage, response: ServerResponse, file: ServedFile) => {
    const headers: Record<string, string | number> = { "Content-Type": "application/octet-stream", "Accept-Ranges": "bytes" };
    if (file.etag !== undefined) headers.ETag = file.etag;
    if (file.lastModified !== undefined) headers["Last-Modified"] = file.lastModified;
    const range = options.ignoreRange === true ? undefined : parseRange(request.headers.range, file.size);
    const ifRange = request.headers["if-range"];
    const current =
      ifRange === undefined || options.ignoreIfRange === true || ifRange === file.etag || (file.etag === undefined && ifRange === file.lastModified);
    if (range === "unsatisfiable" && current) {
      response.writeHead(416, { ...headers, "Content-Range": `bytes */${file.size}` });
      response.end();
      return;
    }
    const head = request.method === "HEAD";
    if (range !== undefined && range !== "unsatisfiable" && current) {
      response.writeHead(206, { ...headers, "Content-Range": `bytes ${range.start}-${range.end - 1}/${file.size}`, "Content-Length": range.end - range.start });
      if (head) response.end();
      else await writeBody(request, response, file, range.start, range.end);
      return;
    }
    response.writeHead(200, { ...headers, "Content-Length": file.size });
    if (head) response.end();
    else await writeBody(request, response, file, 0, file.size);
  };

  const server = createServer((request, response) => {
    log.push({ method: request.method ?? "", path: pathOf(request), headers: request.headers });
    // A client that went away mid-body: nothing to report.
    response.on("error", () => {});
    const answer = async () => {
      if (options.handle !== undefined && (await options.handle(request, response, self))) return;
      const file = files.get(pathOf(request));
      if (file === undefined || (request.method !== "GET" && request.method !== "HEAD")) {
        response.writeHead(file === undefined ? 404 : 405, { "Content-Length": 0 });
        response.end();
        return;
      }
      await serve(request, response, file);
    };
    answer().catch(() => response.destroy());
  });
  server.on("clientError", (_error, socket) => socket.destroy());
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const { port } = server.address() as AddressInfo;
  const origin = `http://127.0.0.1:${port}`;
  const self: RangeServer = {
    origin,
    url: (path) => `${origin}${path}`,
    files,
    log,
    bytesServed: (path) => (path === undefined ? [...served.values()].reduce((a, b) => a + b, 0) : (served.get(path) ?? 0)),
    serve,
    reset() {
      log.length = 0;
      served.clear();
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error === undefined ? resolve() : reject(error)));
        server.closeAllConnections();
      }),
  };
  return self;
}

function pathOf(request: IncomingMessage): string {
  return (request.url ?? "/").split("?")[0]!;
}

/** A single `bytes=` range (`a-b`, `a-`, `-n`) clipped to the file; undefined when absent or not one range. */
function parseRange(value: string | undefined, size: number): { start: number; end: number } | "unsatisfiable" | undefined {
  const match = value === undefined ? null : /^bytes=(\d*)-(\d*)$/.exec(value.trim());
  if (match === null || (match[1] === "" && match[2] === "")) return undefined;
  if (match[1] === "") {
    const suffix = Number(match[2]);
    return suffix === 0 ? "unsatisfiable" : { start: Math.max(0, size - suffix), end: size };
  }
  const start = Number(match[1]);
  const last = match[2] === "" ? size - 1 : Number(match[2]);
  if (last < start) return undefined;
  if (start >= size) return "unsatisfiable";
  return { start, end: Math.min(size, last + 1) };
}
