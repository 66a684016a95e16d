/**
 * A {@link ByteSource} over HTTP(S) range requests: a remote file read where it is needed, never
 * downloaded whole (`info` of a 40 GB checkpoint fetches its header). Browser-safe: only `fetch`,
 * `AbortController` and timers.
 *
 * Spec: RFC 9110 §14 (Range, Content-Range, 206, 416) and §13.1.5 (If-Range); the Fetch standard's
 * HTTP-redirect fetch (a developer-set Authorization header is removed on a cross-origin hop).
 */
import { type ByteSource, checkRange } from "./ByteSource.js";
import { StConvertError } from "./StConvertError.js";

/**
 * Window a small read is widened to. The first one (the 8 bytes of a safetensors length) brings
 * the whole header of most checkpoints with it (about 100 bytes per tensor: a shard of a few
 * hundred tensors has a header of tens of KB); a larger header takes one more request. It is all
 * that `info` fetches beyond a header, once per shard of an index.
 */
export const HTTP_READ_AHEAD = 64 * 1024;
/** Requests in flight at once, per source: enough to hide a round trip behind a copy, few enough not to look like abuse. */
export const MAX_PARALLEL_REQUESTS = 4;
/** Largest single range request: the memory one response holds before it is handed out; larger reads are split. */
export const MAX_REQUEST_SIZE = 16 * 1024 * 1024;
/** Attempts per request (the first and three retries) on network errors, stalls, 408, 429 and 5xx. */
export const MAX_HTTP_ATTEMPTS = 4;
/** First wait before a retry, doubled after each failed attempt (250, 500, 1000 ms), with jitter. */
export const RETRY_BASE_DELAY_MS = 250;
/** Longest wait before a retry, also when a server's Retry-After asks for more. */
export const MAX_RETRY_DELAY_MS = 10_000;
/** Redirects followed per request (fetch's own limit is 20; the Hub needs one or two). */
export const MAX_REDIRECTS = 10;
/** A response that delivers no byte for this long is abandoned and retried: a dead connection must not hang a read. */
export const HTTP_STALL_TIMEOUT_MS = 60_000;
/** Read-ahead windows kept for later reads (memory: this many times the window). */
const CACHED_WINDOWS = 8;

/** Options of {@link openHttpSource}. */
export interface HttpSourceOptions {
  /** Label for messages. Default: the URL. */
  name?: string;
  /**
   * Headers sent with every request to the URL's own origin (`Authorization` for a token). They
   * may carry credentials, so a redirect to another origin drops them for that hop and every later
   * one, as the Fetch standard does with `Authorization`.
   */
  headers?: Readonly<Record<string, string>>;
  /** Text added to the message of a 401 or 403 answer (how to pass a token). */
  authHint?: string;
  /** Window small reads are widened to, in bytes. Default {@link HTTP_READ_AHEAD}. */
  readAhead?: number;
  /** Requests in flight at once. Default {@link MAX_PARALLEL_REQUESTS}. */
  maxParallel?: number;
  /** Largest range per request, in bytes. Default {@link MAX_REQUEST_SIZE}. */
  maxRequestSize?: number;
  /** Attempts per request. Default {@link MAX_HTTP_ATTEMPTS}. */
  maxAttempts?: number;
  /** First wait before a retry, in ms. Default {@link RETRY_BASE_DELAY_MS}. */
  retryDelayMs?: number;
  /** Silence after which a response is abandoned and retried, in ms. Default {@link HTTP_STALL_TIMEOUT_MS}. */
  stallTimeoutMs?: number;
  /** Redirects followed per request. Default {@link MAX_REDIRECTS}. */
  maxRedirects?: number;
  /**
   * Called as response bytes arrive: all bytes fetched so far (retried ones included) and the
   * file's size (during a whole-file answer given to `spool`: its Content-Length, else 0).
   */
  onProgress?: (bytesFetched: number, size: number) => void;
  /**
   * Where the file goes when the server ignores Range (answers the first request with the whole
   * file, HTTP 200) and the file is larger than the first window: given that one answer's body in
   * order (and its Content-Length when sent), returns a source over a local copy (a scratch file),
   * which then serves every read and is closed with the source. A body that breaks off is resumed
   * with a new request checked against the first answer's version (`SourceChanged` when the file
   * changed); the bytes come in order, once each. Default: none, and such a server is refused
   * (`RangeNotSupported`): without ranges, reading a part means downloading the whole.
   */
  spool?: (body: AsyncIterable<Uint8Array>, size: number | undefined) => Promise<ByteSource & { close(): Promise<void> }>;
  /** Text added to the refusal of a server that ignores Range when there is no `spool` (how to allow a whole download). */
  wholeFileHint?: string;
  /** Stops every request; reads then reject with `Aborted`. */
  signal?: AbortSignal;
  /** The `fetch` to use. Default `globalThis.fetch`. */
  fetch?: typeof globalThis.fetch;
}

/** A remote file read by ranges; `close()` ends the requests in flight. */
export interface HttpSource extends ByteSource {
  readonly name: string;
  /** The URL as given (before redirects). */
  readonly url: string;
  /** Response body bytes received so far, retried ones included. */
  readonly bytesFetched: number;
  /** HTTP requests sent so far, redirect hops and retries included. */
  readonly requests: number;
  /** True when the server ignored Range and the whole file was read into `spool`'s copy, which serves the reads. */
  readonly spooled: boolean;
  /** Stops the requests in flight (reads waiting for them reject with `Aborted`), drops the cached windows and closes a spooled copy. */
  close(): Promise<void>;
}

/**
 * Opens a remote file for range reads: one request for the first window tells the size (the total
 * of its Content-Range) and the version (ETag, else Last-Modified). Later requests carry
 * `If-Range` with that version, and every answer is checked against it, so that bytes of two
 * versions of a file are never mixed. Small reads are widened to a window of `readAhead` bytes
 * that later reads are served from; queued reads of adjacent ranges share one request; at most
 * `maxParallel` requests run at once; network errors, stalls, 408, 429 and 5xx answers are retried
 * with exponential backoff. Redirects are followed by hand, so that `headers` never reach another
 * origin. A server that answers 200 (the whole file) to a range request is refused, unless the
 * whole file fits in the first window or `spool` takes the whole answer.
 * @throws StConvertError `InvalidArgument` for a URL that is not http(s) or holds credentials;
 *   `HttpError` for an error status, a failed redirect, or a request that failed `maxAttempts`
 *   times; `RangeNotSupported` for a server that ignores Range (without `spool`), answers another
 *   range than the one asked, encodes the range or sends more than it announced; `SourceChanged`
 *   when the file changed between two requests (also from later reads, and when a whole-file
 *   download is resumed); `Aborted` after `close()` or `signal`; what `spool` throws. Each names
 *   the URL.
 */
export async function openHttpSource(url: string | URL, options: HttpSourceOptions = {}): Promise<HttpSource> {
  const source = new HttpFile(String(url), options);
  await source.open();
  return source;
}

/** A failure worth another attempt: a network error, a stall, 408, 429 or 5xx. */
class Transient extends Error {
  constructor(
    readonly reason: string,
    readonly retryAfterMs?: number,
    cause?: unknown,
  ) {
    super(reason, cause === undefined ? undefined : { cause });
  }
}

/** The first answer when it is the whole file and `spool` is to take it. */
interface WholeFile {
  readonly whole: Response;
  readonly length: number | undefined;
}

/** A window of the file, read or being read. */
interface Window {
  readonly start: number;
  readonly end: number;
  readonly bytes: Promise<Uint8Array>;
}

/** A range waiting for a request slot. */
interface Pending {
  readonly start: number;
  readonly end: number;
  resolve(bytes: Uint8Array): void;
  reject(error: unknown): void;
}

/** Where a request goes, and whether the caller's headers may go with it. */
interface Hop {
  readonly url: URL;
  readonly withHeaders: boolean;
}

const REDIRECT_STATUSES = new Set([301, 302, 303, 307, 308]);
/** Answers of a redirect target (a CDN's signed URL) that may mean only that the target expired. */
const EXPIRED_STATUSES = new Set([401, 403, 404, 410]);

class HttpFile implements HttpSource {
  readonly url: string;
  readonly name: string;
  readonly #origin: string;
  readonly #headers: Readonly<Record<string, string>>;
  readonly #authHint: string | undefined;
  readonly #readAhead: number;
  readonly #maxParallel: number;
  readonly #maxRequestSize: number;
  readonly #maxAttempts: number;
  readonly #retryDelayMs: number;
  readonly #stallTimeoutMs: number;
  readonly #maxRedirects: number;
  readonly #onProgress: ((bytesFetched: number, size: number) => void) | undefined;
  readonly #spool: HttpSourceOptions["spool"];
  readonly #wholeFileHint: string | undefined;
  readonly #signal: AbortSignal | undefined;
  readonly #fetch: typeof globalThis.fetch;
  /** Aborted by `close()` and by the caller's signal: every attempt and every wait listens to it, and nothing else. */
  readonly #stop = new AbortController();
  readonly #onOuterAbort = () => this.#stop.abort();
  #size = 0;
  #fetched = 0;
  #requests = 0;
  #etag: string | null = null;
  #lastModified: string | null = null;
  /** Where the last redirect chain ended: later requests go there directly. */
  #resolved: Hop | undefined;
  /** The local copy of a file whose server ignores Range: it serves every read. */
  #local: (ByteSource & { close(): Promise<void> }) | undefined;
  #spooled = false;
  #windows: Window[] = [];
  #queue: Pending[] = [];
  #active = 0;
  #pumpScheduled = false;
  readonly #inFlight = new Set<Promise<void>>();
  #closed = false;

  constructor(url: string, options: HttpSourceOptions) {
    this.name = options.name ?? url;
    let parsed: URL;
    try {
      parsed = new URL(url);
    } catch {
      throw new StConvertError("InvalidArgument", `not a URL: ${JSON.stringify(url)}`, { file: this.name });
    }
    if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
      throw new StConvertError("InvalidArgument", `only http and https URLs can be read, not ${parsed.protocol}`, { file: this.name });
    }
    if (parsed.username !== "" || parsed.password !== "") {
      throw new StConvertError("InvalidArgument", "the URL holds credentials (user:password@); pass them as a header, which stays on this origin", {
        file: this.name,
      });
    }
    const fetchFunction = options.fetch ?? globalThis.fetch;
    if (typeof fetchFunction !== "function") throw new StConvertError("Unsupported", "this runtime has no fetch", { file: this.name });
    this.url = url;
    this.#origin = parsed.origin;
    this.#headers = { ...options.headers };
    this.#authHint = options.authHint;
    this.#maxRequestSize = positive(options.maxRequestSize ?? MAX_REQUEST_SIZE, "maxRequestSize", this.name);
    this.#readAhead = Math.min(this.#maxRequestSize, positive(options.readAhead ?? HTTP_READ_AHEAD, "readAhead", this.name));
    this.#maxParallel = positive(options.maxParallel ?? MAX_PARALLEL_REQUESTS, "maxParallel", this.name);
    this.#maxAttempts = positive(options.maxAttempts ?? MAX_HTTP_ATTEMPTS, "maxAttempts", this.name);
    this.#retryDelayMs = Math.max(0, options.retryDelayMs ?? RETRY_BASE_DELAY_MS);
    this.#stallTimeoutMs = positive(options.stallTimeoutMs ?? HTTP_STALL_TIMEOUT_MS, "stallTimeoutMs", this.name);
    this.#maxRedirects = Math.max(0, options.maxRedirects ?? MAX_REDIRECTS);
    this.#onProgress = options.onProgress;
    this.#spool = options.spool;
    this.#wholeFileHint = options.wholeFileHint;
    this.#signal = options.signal;
    this.#fetch = fetchFunction;
    if (this.#signal?.aborted === true) this.#stop.abort();
    else this.#signal?.addEventListener("abort", this.#onOuterAbort, { once: true });
  }

  get size(): number {
    return this.#size;
  }

  get spooled(): boolean {
    return this.#spooled;
  }

  get bytesFetched(): number {
    return this.#fetched;
  }

  get requests(): number {
    return this.#requests;
  }

  /** The first request: the first window, the size and the version. */
  async open(): Promise<void> {
    try {
      const first = await this.#withRetries(() =>
        this.#attempt(`bytes=0-${this.#readAhead - 1}`, false, (response, touch) => this.#acceptFirst(response, touch)),
      );
      if (first instanceof Uint8Array) {
        if (first.byteLength > 0) this.#remember({ start: 0, end: first.byteLength, bytes: Promise.resolve(first) });
        return;
      }
      // Outside the first attempt's retries and stall timer: the body is read, and resumed, by #wholeFileChunks.
      const local = await this.#spool!(this.#wholeFileChunks(first), first.length);
      if (this.#closed) {
        await local.close();
        throw this.#closedError();
      }
      this.#local = local;
      this.#size = local.size;
      this.#spooled = true;
      this.#checkOpen();
    } catch (error) {
      await this.close();
      throw error;
    }
  }

  async read(offset: number, length: number): Promise<Uint8Array> {
    this.#checkOpen();
    if (this.#local !== undefined) return this.#local.read(offset, length);
    checkRange(this, offset, length);
    if (length === 0) return new Uint8Array(0);
    const end = offset + length;
    const hit = this.#windowOver(offset, end);
    if (hit !== undefined) return (await hit.bytes).subarray(offset - hit.start, end - hit.start);
    // A read that starts in a window fetches only what follows it.
    const prefix = this.#windowOver(offset, offset + 1);
    const rest = this.#fetchRange(prefix?.end ?? offset, end);
    if (prefix === undefined) return rest;
    const [head, tail] = await Promise.all([prefix.bytes, rest]);
    const out = new Uint8Array(length);
    out.set(head.subarray(offset - prefix.start));
    out.set(tail, prefix.end - offset);
    return out;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stop.abort();
    this.#signal?.removeEventListener("abort", this.#onOuterAbort);
    for (const pending of this.#queue.splice(0)) pending.reject(this.#closedError());
    await Promise.allSettled([...this.#inFlight]);
    this.#windows = [];
    const local = this.#local;
    this.#local = undefined;
    await local?.close();
  }

  #checkOpen(): void {
    if (this.#closed) throw this.#closedError();
    if (this.#signal?.aborted === true) throw this.#abortedError();
  }

  #closedError(): StConvertError {
    return new StConvertError("Aborted", "the source was closed before the read finished", { file: this.name });
  }

  #abortedError(): StConvertError {
    return new StConvertError("Aborted", "stopped before the read finished", { file: this.name, cause: this.#signal?.reason });
  }

  /** The window (read or in flight) holding `[start, end)`, made the most recently used. */
  #windowOver(start: number, end: number): Window | undefined {
    const index = this.#windows.findIndex((w) => w.start <= start && end <= w.end);
    if (index < 0) return undefined;
    const [window] = this.#windows.splice(index, 1);
    this.#windows.push(window!);
    return window;
  }

  #remember(window: Window): void {
    this.#windows.push(window);
    if (this.#windows.length > CACHED_WINDOWS) this.#windows.shift();
    // A failed window is forgotten, so that a later read asks again; the read that made it gets the error.
    window.bytes.catch(() => {
      this.#windows = this.#windows.filter((w) => w !== window);
    });
  }

  /** `[from, end)`: a small range widened to a window that is kept, a large one in requests of at most `maxRequestSize`. */
  #fetchRange(from: number, end: number): Promise<Uint8Array> {
    if (end - from <= this.#readAhead) {
      const windowEnd = Math.min(this.#size, Math.max(end, from + this.#readAhead));
      const bytes = this.#enqueue(from, windowEnd);
      this.#remember({ start: from, end: windowEnd, bytes });
      return bytes.then((b) => b.subarray(0, end - from));
    }
    const parts: Promise<Uint8Array>[] = [];
    for (let at = from; at < end; at += this.#maxRequestSize) parts.push(this.#enqueue(at, Math.min(end, at + this.#maxRequestSize)));
    if (parts.length === 1) return parts[0]!;
    return Promise.all(parts).then((chunks) => {
      const out = new Uint8Array(end - from);
      let at = 0;
      for (const chunk of chunks) {
        out.set(chunk, at);
        at += chunk.byteLength;
      }
      return out;
    });
  }

  #enqueue(start: number, end: number): Promise<Uint8Array> {
    return new Promise<Uint8Array>((resolve, reject) => {
      this.#queue.push({ start, end, resolve, reject });
      // Dispatched after the current turn, so that reads asked for together can share a request.
      if (!this.#pumpScheduled) {
        this.#pumpScheduled = true;
        queueMicrotask(() => {
          this.#pumpScheduled = false;
          this.#pump();
        });
      }
    });
  }

  /** Starts requests while slots are free: the oldest waiting range, with every waiting range that touches it. */
  #pump(): void {
    while (!this.#closed && this.#active < this.#maxParallel && this.#queue.length > 0) {
      const group = [this.#queue.shift()!];
      let start = group[0]!.start;
      let end = group[0]!.end;
      for (let grown = true; grown; ) {
        grown = false;
        for (let i = 0; i < this.#queue.length; i++) {
          const p = this.#queue[i]!;
          if (p.start <= end && p.end >= start && Math.max(end, p.end) - Math.min(start, p.start) <= this.#maxRequestSize) {
            group.push(p);
            this.#queue.splice(i--, 1);
            start = Math.min(start, p.start);
            end = Math.max(end, p.end);
            grown = true;
          }
        }
      }
      this.#active++;
      const from = start;
      const request: Promise<void> = this.#withRetries(() =>
        this.#attempt(`bytes=${from}-${end - 1}`, true, (response, touch) => this.#accept(response, from, end, touch)),
      )
        .then(
          (bytes) => {
            for (const p of group) p.resolve(bytes.subarray(p.start - from, p.end - from));
          },
          (error: unknown) => {
            for (const p of group) p.reject(error);
          },
        )
        .finally(() => {
          this.#active--;
          this.#inFlight.delete(request);
          this.#pump();
        });
      this.#inFlight.add(request);
    }
  }

  async #withRetries<T>(attempt: () => Promise<T>): Promise<T> {
    for (let n = 1; ; n++) {
      this.#checkOpen();
      try {
        return await attempt();
      } catch (error) {
        if (!(error instanceof Transient)) throw error;
        if (n >= this.#maxAttempts) {
          throw new StConvertError("HttpError", `${error.reason}; gave up after ${n} attempts (maxAttempts)`, { file: this.name, cause: error.cause ?? error });
        }
        await this.#backOff(n, error);
      }
    }
  }

  /** The wait after failed attempt `n`: exponential with jitter, longer if the server's Retry-After says so, capped. */
  #backOff(n: number, error: Transient): Promise<void> {
    const backoff = this.#retryDelayMs * 2 ** (n - 1) * (0.5 + Math.random() / 2);
    return this.#sleep(Math.min(MAX_RETRY_DELAY_MS, Math.max(backoff, error.retryAfterMs ?? 0)));
  }

  #sleep(ms: number): Promise<void> {
    const stop = this.#stop.signal;
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        clearTimeout(timer);
        reject(this.#closed ? this.#closedError() : this.#abortedError());
      };
      const timer = setTimeout(() => {
        stop.removeEventListener("abort", onAbort);
        resolve();
      }, ms);
      if (stop.aborted) onAbort();
      else stop.addEventListener("abort", onAbort, { once: true });
    });
  }

  /**
   * One request for `range` (`bytes=a-b`; with `If-Range` when `conditional`), under its own abort
   * controller: the source's `close()`, the caller's signal and the stall timer end it until
   * `accept` is done checking the answer (and reading its body, when it does).
   */
  async #attempt<T>(range: string, conditional: boolean, accept: (response: Response, touch: () => void) => Promise<T>): Promise<T> {
    const controller = new AbortController();
    const stop = this.#stop.signal;
    const onAbort = () => controller.abort();
    if (stop.aborted) controller.abort();
    else stop.addEventListener("abort", onAbort, { once: true });
    let stalled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const touch = () => {
      clearTimeout(timer);
      timer = setTimeout(() => {
        stalled = true;
        controller.abort();
      }, this.#stallTimeoutMs);
    };
    touch();
    try {
      // No Accept-Encoding: the Fetch standard sends `identity` with every Range request (and
      // browsers forbid setting it); an encoded answer is refused in #accept all the same.
      const headers: Record<string, string> = { Range: range };
      const version = this.#ifRange();
      if (conditional && version !== undefined) headers["If-Range"] = version;
      const response = await this.#send(headers, controller.signal);
      return await accept(response, touch);
    } catch (error) {
      if (stalled) throw new Transient(`no data for ${this.#stallTimeoutMs} ms (stallTimeoutMs)`);
      if (this.#closed) throw this.#closedError();
      if (this.#signal?.aborted === true) throw this.#abortedError();
      throw error;
    } finally {
      clearTimeout(timer);
      stop.removeEventListener("abort", onAbort);
    }
  }

  /** The validator for If-Range: a strong ETag, else Last-Modified when there is no ETag at all (RFC 9110 §13.1.5). */
  #ifRange(): string | undefined {
    if (this.#etag !== null) return this.#etag.startsWith("W/") ? undefined : this.#etag;
    return this.#lastModified ?? undefined;
  }

  /**
   * Sends a GET, following redirects by hand: the caller's headers go only to the URL's own origin,
   * and once a hop leaves it they stay dropped (A → B → A sees none), as the Fetch standard does
   * with Authorization. The end of the chain is remembered; if it later answers as an expired
   * signed URL would, the chain is walked again from the start, once.
   */
  async #send(headers: Record<string, string>, signal: AbortSignal): Promise<Response> {
    const start: Hop = { url: new URL(this.url), withHeaders: true };
    let hop = this.#resolved ?? start;
    let fromCache = this.#resolved !== undefined && this.#resolved.url.href !== start.url.href;
    for (let redirects = 0; ; ) {
      const response = await this.#fetchOnce(hop, headers, signal, "manual");
      if (response.type === "opaqueredirect") {
        // A browser hides a manual redirect's Location. Its own following is safe there: browsers
        // implement the Fetch standard's removal of Authorization on a cross-origin redirect.
        return this.#fetchOnce(hop, headers, signal, "follow");
      }
      if (REDIRECT_STATUSES.has(response.status)) {
        await discard(response);
        const location = response.headers.get("location");
        const at = `(HTTP ${response.status} from ${hop.url.origin})`;
        if (location === null) throw new StConvertError("HttpError", `a redirect without a Location header ${at}`, { file: this.name });
        if (++redirects > this.#maxRedirects)
          throw new StConvertError("HttpError", `more than ${this.#maxRedirects} redirects (maxRedirects)`, { file: this.name });
        let next: URL;
        try {
          next = new URL(location, hop.url);
        } catch {
          throw new StConvertError("HttpError", `a redirect to ${JSON.stringify(location)}, which is not a URL ${at}`, { file: this.name });
        }
        if (next.protocol !== "http:" && next.protocol !== "https:") {
          throw new StConvertError("HttpError", `a redirect to a ${next.protocol} URL ${at}`, { file: this.name });
        }
        hop = { url: next, withHeaders: hop.withHeaders && next.origin === this.#origin };
        continue;
      }
      if (fromCache && redirects === 0 && EXPIRED_STATUSES.has(response.status)) {
        await discard(response);
        fromCache = false;
        hop = start;
        continue;
      }
      if (response.status === 200 || response.status === 206) this.#resolved = hop;
      return response;
    }
  }

  async #fetchOnce(hop: Hop, headers: Record<string, string>, signal: AbortSignal, redirect: "manual" | "follow"): Promise<Response> {
    this.#requests++;
    try {
      return await this.#fetch(hop.url, { headers: hop.withHeaders ? { ...this.#headers, ...headers } : headers, redirect, signal });
    } catch (error) {
      throw new Transient(`network error: ${describe(error)}`, undefined, error);
    }
  }

  /** Refuses a 200 or 206 answer whose body has a content encoding: its bytes are not the file's. */
  async #refuseEncoded(response: Response, asked: string): Promise<void> {
    const encoding = encodingOf(response);
    if ((response.status === 200 || response.status === 206) && encoding !== undefined) {
      await discard(response);
      throw this.#error("RangeNotSupported", `the server sent ${asked} ${encoding}-encoded, which are not the file's bytes`);
    }
  }

  /** Checks an answer against the range asked (`end` undefined: the first window) and reads its body. */
  async #accept(response: Response, start: number, end: number | undefined, touch: () => void): Promise<Uint8Array> {
    const { status } = response;
    const asked = `bytes ${start}-${end === undefined ? this.#readAhead - 1 : end - 1}`;
    await this.#refuseEncoded(response, asked);
    if (status === 206) {
      const range = parseContentRange(response.headers.get("content-range"));
      if (range?.first === undefined || range.last === undefined || range.total === undefined) {
        await discard(response);
        throw this.#error(
          "RangeNotSupported",
          `the server answered ${asked} without a Content-Range "bytes first-last/size" (got ${JSON.stringify(response.headers.get("content-range"))}; in a browser, the server must expose Content-Range to CORS)`,
        );
      }
      if (end === undefined) {
        this.#size = range.total;
        this.#etag = response.headers.get("etag");
        this.#lastModified = response.headers.get("last-modified");
      } else {
        await this.#checkVersion(response, range.total);
      }
      const want = end === undefined ? Math.min(this.#readAhead, range.total) : end - start;
      if (range.first !== start || range.last !== start + want - 1) {
        await discard(response);
        throw this.#error("RangeNotSupported", `the server answered bytes ${range.first}-${range.last}/${range.total} to a request for ${asked}`);
      }
      return this.#readBody(response, new Uint8Array(want), touch);
    }
    if (status === 200) {
      const length = contentLength(response);
      if (end === undefined && length !== undefined && length <= this.#readAhead) {
        // The whole file fits in the first window: no more bytes than a range would have brought.
        this.#size = length;
        this.#etag = response.headers.get("etag");
        this.#lastModified = response.headers.get("last-modified");
        return this.#readBody(response, new Uint8Array(length), touch);
      }
      await discard(response);
      const version = end === undefined ? undefined : this.#ifRange();
      if (version !== undefined) {
        throw this.#error(
          "SourceChanged",
          `the file changed on the server while it was read: a request for ${asked} of version ${version} got another whole file (HTTP 200)`,
        );
      }
      throw this.#error(
        "RangeNotSupported",
        `the server does not serve byte ranges: it answered a request for ${asked} with the whole file (HTTP 200${length === undefined ? "" : `, ${length} bytes`}); remote files are read by ranges, never downloaded whole unless allowed; ${this.#wholeFileHint ?? "download it and convert the local copy"}`,
      );
    }
    await discard(response);
    if (status === 416) {
      const range = parseContentRange(response.headers.get("content-range"));
      if (end === undefined && range?.total === 0) {
        this.#etag = response.headers.get("etag");
        this.#lastModified = response.headers.get("last-modified");
        return new Uint8Array(0);
      }
      if (end !== undefined && range?.total !== undefined && range.total !== this.#size) {
        throw this.#error("SourceChanged", `the file changed on the server while it was read: it held ${this.#size} bytes, now ${range.total}`);
      }
    }
    const text = `HTTP ${status}${response.statusText === "" ? "" : ` ${response.statusText}`}`;
    if (status === 408 || status === 429 || status >= 500) throw new Transient(text, retryAfterMs(response));
    const hint = (status === 401 || status === 403) && this.#authHint !== undefined ? `; ${this.#authHint}` : "";
    throw this.#error("HttpError", `${text} for ${asked}${hint}`);
  }

  /** The first answer: as #accept, except that a whole file larger than the window is kept for `spool` when there is one. */
  async #acceptFirst(response: Response, touch: () => void): Promise<Uint8Array | WholeFile> {
    if (response.status === 200 && this.#spool !== undefined && encodingOf(response) === undefined) {
      const length = contentLength(response);
      if (length === undefined || length > this.#readAhead) {
        this.#size = length ?? 0;
        this.#etag = response.headers.get("etag");
        this.#lastModified = response.headers.get("last-modified");
        return { whole: response, length };
      }
    }
    return this.#accept(response, 0, undefined, touch);
  }

  /**
   * The bytes of a whole-file answer, in order and once each. A body that breaks off (or stalls)
   * is asked for again from where it stopped (`bytes=N-`, If-Range): a 206 from there continues
   * it; a 200 (a server without ranges) brings the whole file again, whose first N bytes are
   * skipped. Either must be the first answer's version: never a mix of two files.
   */
  async *#wholeFileChunks(first: WholeFile): AsyncGenerator<Uint8Array> {
    const { length } = first;
    let response: Response | undefined = first.whole;
    let received = 0;
    let skip = 0;
    for (let attempt = 1; ; attempt++) {
      try {
        if (response === undefined) ({ response, skip } = await this.#resumeWholeFile(received, length));
        for await (const chunk of this.#chunksOf(response)) {
          const piece = skip > 0 ? chunk.subarray(Math.min(skip, chunk.byteLength)) : chunk;
          skip -= chunk.byteLength - piece.byteLength;
          if (piece.byteLength === 0) continue;
          if (length !== undefined && received + piece.byteLength > length) {
            throw this.#error("RangeNotSupported", `the server sent more than the ${length} bytes it announced (Content-Length)`);
          }
          received += piece.byteLength;
          yield piece;
        }
        if (skip > 0 || (length !== undefined && received < length)) {
          throw new Transient(`the connection closed after ${received}${length === undefined ? "" : ` of ${length}`} bytes`);
        }
        return;
      } catch (error) {
        response = undefined;
        if (!(error instanceof Transient)) throw error;
        if (attempt >= this.#maxAttempts) {
          throw new StConvertError("HttpError", `${error.reason}; gave up after ${attempt} attempts (maxAttempts)`, {
            file: this.name,
            cause: error.cause ?? error,
          });
        }
        if (length === undefined && this.#etag === null && this.#lastModified === null) {
          throw this.#error("HttpError", `${error.reason}, and the server sent no size, ETag or Last-Modified to resume the download by`);
        }
        await this.#backOff(attempt, error);
      }
    }
  }

  /** Asks for the rest of a whole file from byte `received`; says how many bytes of the answer were received before. */
  async #resumeWholeFile(received: number, length: number | undefined): Promise<{ response: Response; skip: number }> {
    const asked = `bytes ${received}-`;
    return this.#attempt(`bytes=${received}-`, true, async (response) => {
      const { status } = response;
      await this.#refuseEncoded(response, asked);
      if (status === 206) {
        const range = parseContentRange(response.headers.get("content-range"));
        if (range?.first !== received || range.last === undefined || (range.total !== undefined && range.last !== range.total - 1)) {
          await discard(response);
          throw this.#error("RangeNotSupported", `the server answered ${JSON.stringify(response.headers.get("content-range"))} to a request for ${asked}`);
        }
        await this.#checkWholeVersion(response, range.total ?? (length === undefined ? undefined : range.last + 1));
        return { response, skip: 0 };
      }
      if (status === 200) {
        await this.#checkWholeVersion(response, contentLength(response));
        return { response, skip: received };
      }
      await discard(response);
      const text = `HTTP ${status}${response.statusText === "" ? "" : ` ${response.statusText}`}`;
      if (status === 408 || status === 429 || status >= 500) throw new Transient(text, retryAfterMs(response));
      throw this.#error("HttpError", `${text} for ${asked}, resuming the download`);
    });
  }

  /** Refuses an answer that resumes a download with another version of the file than the first answer's (`total` undefined: not known). */
  async #checkWholeVersion(response: Response, total: number | undefined): Promise<void> {
    const changed = (what: string) => this.#error("SourceChanged", `the file changed on the server while it was downloaded (${what}); download it again`);
    let failure: StConvertError | undefined;
    const etag = response.headers.get("etag");
    const lastModified = response.headers.get("last-modified");
    const size = this.#size === 0 ? undefined : this.#size;
    if (size !== undefined && total !== undefined && total !== size) failure = changed(`it held ${size} bytes, now ${total}`);
    else if (this.#etag !== null && etag !== null && etag !== this.#etag) failure = changed(`ETag ${this.#etag}, now ${etag}`);
    else if (this.#etag === null && this.#lastModified !== null && lastModified !== null && lastModified !== this.#lastModified) {
      failure = changed(`Last-Modified ${this.#lastModified}, now ${lastModified}`);
    }
    if (failure === undefined) return;
    await discard(response);
    throw failure;
  }

  /**
   * A body's chunks as they arrive, counted as fetched. A read that fails or stalls is a transient
   * failure; `close()` and the caller's signal cancel the body (the request that brought it is
   * no longer listening to them by then).
   */
  async *#chunksOf(response: Response): AsyncGenerator<Uint8Array> {
    const body = response.body;
    if (body === null) return;
    const reader = body.getReader();
    const stop = this.#stop.signal;
    let stalled = false;
    let timer: ReturnType<typeof setTimeout> | undefined;
    const cancel = () => {
      reader.cancel().catch(() => {});
    };
    const stopped = () => (this.#closed ? this.#closedError() : this.#abortedError());
    stop.addEventListener("abort", cancel, { once: true });
    let finished = false;
    let count = 0;
    try {
      for (;;) {
        if (stop.aborted) throw stopped();
        timer = setTimeout(() => {
          stalled = true;
          cancel();
        }, this.#stallTimeoutMs);
        let chunk: { done: true; value?: undefined } | { done: false; value: Uint8Array };
        try {
          chunk = await reader.read();
        } catch (error) {
          if (stop.aborted) throw stopped();
          if (stalled) throw new Transient(`no data for ${this.#stallTimeoutMs} ms (stallTimeoutMs)`);
          throw new Transient(`the connection failed after ${count} bytes: ${describe(error)}`, undefined, error);
        } finally {
          clearTimeout(timer);
        }
        // A cancelled body ends as if it were complete: only these flags tell the two apart.
        if (stop.aborted) throw stopped();
        if (stalled) throw new Transient(`no data for ${this.#stallTimeoutMs} ms (stallTimeoutMs)`);
        if (chunk.done) {
          finished = true;
          return;
        }
        count += chunk.value.byteLength;
        this.#fetched += chunk.value.byteLength;
        this.#onProgress?.(this.#fetched, this.#size);
        yield chunk.value;
      }
    } finally {
      stop.removeEventListener("abort", cancel);
      if (!finished) await reader.cancel().catch(() => {});
    }
  }

  /** Refuses an answer from another version of the file than the first answer's. */
  async #checkVersion(response: Response, total: number): Promise<void> {
    const changed = (what: string) => this.#error("SourceChanged", `the file changed on the server while it was read (${what}); read it again`);
    let failure: StConvertError | undefined;
    const etag = response.headers.get("etag");
    const lastModified = response.headers.get("last-modified");
    if (total !== this.#size) failure = changed(`it held ${this.#size} bytes, now ${total}`);
    else if (this.#etag !== null && etag !== null && etag !== this.#etag) failure = changed(`ETag ${this.#etag}, now ${etag}`);
    else if (this.#etag === null && this.#lastModified !== null && lastModified !== null && lastModified !== this.#lastModified) {
      failure = changed(`Last-Modified ${this.#lastModified}, now ${lastModified}`);
    }
    if (failure === undefined) return;
    await discard(response);
    throw failure;
  }

  /** Fills `target` from the body; a body that ends early is a transient failure, one that runs over is the server's error. */
  async #readBody(response: Response, target: Uint8Array, touch: () => void): Promise<Uint8Array> {
    const body = response.body;
    if (body === null) {
      if (target.byteLength === 0) return target;
      throw new Transient(`the answer had no body (0 of ${target.byteLength} bytes)`);
    }
    const reader = body.getReader();
    let filled = 0;
    let finished = false;
    try {
      for (;;) {
        let chunk: { done: true; value?: undefined } | { done: false; value: Uint8Array };
        try {
          chunk = await reader.read();
        } catch (error) {
          throw new Transient(`the connection failed after ${filled} of ${target.byteLength} bytes: ${describe(error)}`, undefined, error);
        }
        if (chunk.done) {
          finished = true;
          break;
        }
        const value = chunk.value;
        if (filled + value.byteLength > target.byteLength) {
          throw this.#error("RangeNotSupported", `the server sent more than the ${target.byteLength} bytes of the range it announced`);
        }
        target.set(value, filled);
        filled += value.byteLength;
        this.#fetched += value.byteLength;
        this.#onProgress?.(this.#fetched, this.#size);
        touch();
      }
    } finally {
      if (!finished) await reader.cancel().catch(() => {});
    }
    if (filled < target.byteLength) throw new Transient(`the connection closed after ${filled} of ${target.byteLength} bytes`);
    return target;
  }

  #error(code: "HttpError" | "RangeNotSupported" | "SourceChanged", rule: string): StConvertError {
    return new StConvertError(code, rule, { file: this.name });
  }
}

/** The answer's content coding when it is not the identity (the bytes are then not the file's). */
function encodingOf(response: Response): string | undefined {
  const encoding = response.headers.get("content-encoding");
  return encoding === null || encoding.toLowerCase() === "identity" ? undefined : encoding;
}

/** Releases a response's connection without reading its body. */
async function discard(response: Response): Promise<void> {
  await response.body?.cancel().catch(() => {});
}

function positive(value: number, option: string, file: string): number {
  if (!Number.isSafeInteger(value) || value < 1) throw new StConvertError("InvalidArgument", `${option} must be a positive integer, not ${value}`, { file });
  return value;
}

/** `bytes FIRST-LAST/TOTAL` (TOTAL may be `*`, unknown), or a 416's `bytes *\/TOTAL`; undefined when malformed. */
function parseContentRange(value: string | null): { first?: number; last?: number; total?: number } | undefined {
  if (value === null) return undefined;
  const unsatisfied = /^bytes \*\/(\d+)$/i.exec(value.trim());
  if (unsatisfied !== null) {
    const total = Number(unsatisfied[1]);
    return Number.isSafeInteger(total) ? { total } : undefined;
  }
  const match = /^bytes (\d+)-(\d+)\/(\d+|\*)$/i.exec(value.trim());
  if (match === null) return undefined;
  const first = Number(match[1]);
  const last = Number(match[2]);
  const total = match[3] === "*" ? undefined : Number(match[3]);
  if (!Number.isSafeInteger(first) || !Number.isSafeInteger(last) || first > last) return undefined;
  if (total !== undefined && (!Number.isSafeInteger(total) || last >= total)) return undefined;
  return { first, last, total };
}

function contentLength(response: Response): number | undefined {
  const value = response.headers.get("content-length");
  if (value === null || !/^\d+$/.test(value.trim())) return undefined;
  const length = Number(value);
  return Number.isSafeInteger(length) ? length : undefined;
}

/** Retry-After in seconds (an HTTP-date is left to the backoff). */
function retryAfterMs(response: Response): number | undefined {
  const value = response.headers.get("retry-after");
  if (value === null || !/^\d+$/.test(value.trim())) return undefined;
  return Number(value) * 1000;
}

/** An error's message with its cause's code (fetch's "fetch failed" says nothing alone). */
function describe(error: unknown): string {
  if (!(error instanceof Error)) return String(error);
  const cause = error.cause as { code?: unknown; message?: unknown } | undefined;
  if (cause !== undefined && typeof cause.code === "string") return `${error.message} (${cause.code})`;
  if (cause !== undefined && typeof cause.message === "string") return `${error.message}: ${cause.message}`;
  return error.message;
}
