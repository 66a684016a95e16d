/**
 * How the HTTP range source schedules its requests, over a `fetch` stand-in that holds each
 * answer until the test releases it: at most `maxParallel` requests in flight, ranges queued
 * behind them coalesced. No network and no clock: "everything that could start has started" is
 * a few turns of the event loop, since nothing but a release lets a held request finish.
 */
import { describe, expect, it } from "vitest";
import { openHttpSource } from "@st-convert/core";
import { pseudoRandomBytes } from "@st-convert/testing";

const FILE = pseudoRandomBytes(7, 2_000_000);

/** Lets every microtask and immediate that is ready run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
}

function rangeOf(init: RequestInit | undefined): [number, number] {
  const range = (init?.headers as Record<string, string> | undefined)?.Range ?? "";
  const match = /^bytes=(\d+)-(\d+)$/.exec(range);
  if (match === null) throw new Error(`unexpected Range ${JSON.stringify(range)}`);
  return [Number(match[1]), Math.min(Number(match[2]), FILE.byteLength - 1)];
}

/** A fetch that answers the first request (the opening window) at once and holds every later one. */
function heldFetch() {
  const held: { range: [number, number]; release: () => void }[] = [];
  const ranges: [number, number][] = [];
  let inFlight = 0;
  let maxInFlight = 0;
  const fetch = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
    const range = rangeOf(init);
    ranges.push(range);
    if (ranges.length > 1) {
      inFlight++;
      maxInFlight = Math.max(maxInFlight, inFlight);
      try {
        // Held until released, or until the source aborts it (its close() in a failing test).
        await new Promise<void>((release, reject) => {
          held.push({ range, release });
          init?.signal?.addEventListener("abort", () => reject(new Error("aborted")), { once: true });
        });
      } finally {
        inFlight--;
      }
    }
    const [first, last] = range;
    return new Response(FILE.slice(first, last + 1), {
      status: 206,
      headers: { "Content-Range": `bytes ${first}-${last}/${FILE.byteLength}`, ETag: '"x"' },
    });
  };
  return { fetch, held, ranges, maxInFlight: () => maxInFlight };
}

const same = (a: Uint8Array, b: Uint8Array) => a.byteLength === b.byteLength && Buffer.from(a).equals(Buffer.from(b));

describe("request scheduling", () => {
  it("keeps at most maxParallel requests in flight, and starts the next as one ends", async () => {
    const f = heldFetch();
    const source = await openHttpSource("http://127.0.0.1:9/file.bin", { fetch: f.fetch, maxParallel: 2, readAhead: 1024 });
    try {
      // Six ranges with gaps between them: nothing to coalesce.
      const reads = Array.from({ length: 6 }, (_, i) => source.read(100_000 * (i + 1), 50_000));
      await settle();
      expect(f.held).toHaveLength(2);
      for (let released = 0; released < 6; released++) {
        f.held[released]!.release();
        await settle();
        expect(f.held).toHaveLength(Math.min(6, released + 3));
      }
      const bytes = await Promise.all(reads);
      expect(bytes.every((b, i) => same(b, FILE.subarray(100_000 * (i + 1), 100_000 * (i + 1) + 50_000)))).toBe(true);
      expect(f.maxInFlight()).toBe(2);
    } finally {
      await source.close();
    }
  });

  it("coalesces the ranges queued behind a busy slot when they touch", async () => {
    const f = heldFetch();
    const source = await openHttpSource("http://127.0.0.1:9/file.bin", { fetch: f.fetch, maxParallel: 1, readAhead: 1024 });
    try {
      const busy = source.read(1_500_000, 10_000);
      await settle();
      const queued = [source.read(300_000, 100_000), source.read(500_000, 100_000), source.read(400_000, 100_000), source.read(900_000, 100_000)];
      await settle();
      f.held[0]!.release();
      await settle();
      // The oldest queued range with every queued range that touches it, in one request; the one apart waits its turn.
      expect(f.ranges.slice(2)).toEqual([[300_000, 599_999]]);
      f.held[1]!.release();
      await settle();
      f.held[2]!.release();
      const bytes = await Promise.all([busy, ...queued]);
      const expected = [1_500_000, 300_000, 500_000, 400_000, 900_000].map((at, i) => FILE.subarray(at, at + (i === 0 ? 10_000 : 100_000)));
      expect(bytes.every((b, i) => same(b, expected[i]!))).toBe(true);
      expect(f.ranges.slice(1)).toEqual([
        [1_500_000, 1_509_999],
        [300_000, 599_999],
        [900_000, 999_999],
      ]);
    } finally {
      await source.close();
    }
  });

  it("lets a browser follow a redirect itself when it hides the Location (opaqueredirect)", async () => {
    const modes: (string | undefined)[] = [];
    const fetch = async (_input: string | URL | Request, init?: RequestInit): Promise<Response> => {
      modes.push(init?.redirect);
      if (init?.redirect === "manual") return { type: "opaqueredirect", status: 0, headers: new Headers(), body: null } as unknown as Response;
      const [first, last] = rangeOf(init);
      return new Response(FILE.slice(first, last + 1), { status: 206, headers: { "Content-Range": `bytes ${first}-${last}/${FILE.byteLength}` } });
    };
    const source = await openHttpSource("http://127.0.0.1:9/file.bin", { fetch, readAhead: 1024 });
    try {
      expect(same(await source.read(5000, 10), FILE.subarray(5000, 5010))).toBe(true);
      expect(modes).toEqual(["manual", "follow", "manual", "follow"]);
    } finally {
      await source.close();
    }
  });
});
