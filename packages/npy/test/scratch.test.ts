/**
 * A deflated Fortran-order member bigger than one slab is inflated once into scratch space and
 * gathered from there, instead of once per slab; a failing scratch space falls back to passes.
 * The archive is numpy's (fixtures/npy/npz_compressed_fortran.npz: a 64×48 float32 `fbig`).
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { type ScratchFactory, type ScratchSpace, StConvertError, bytesSource, readTensorBytes } from "@st-convert/core";
import { createScratchFile } from "@st-convert/core/node";
import { type NpzReadOptions, readNpz } from "@st-convert/npy";
import { fixturePath } from "@st-convert/testing";

const archive = new Uint8Array(readFileSync(fixturePath("npy", "npz_compressed_fortran.npz")));
const FBIG_BYTES = 64 * 48 * 4;

async function fbig(options: NpzReadOptions, bytes: Uint8Array = archive): Promise<Uint8Array> {
  // maxKeptBytes 0: the member is read from the archive, as a large one is (a kept one is random access).
  const file = await readNpz(bytesSource(bytes, "f.npz"), { fortranSlabSize: 256, maxKeptBytes: 0, ...options });
  const tensor = file.tensors.find((t) => t.name === "fbig")!;
  return readTensorBytes(tensor);
}

/** The bytes without any scratch space: every slab re-inflates the member (the reference path). */
const expected = await fbig({});

/** A factory that records what its spaces were given and whether they were disposed. */
function spy(make: ScratchFactory = () => createScratchFile()) {
  const log = { made: 0, written: 0, disposed: 0 };
  const factory: ScratchFactory = async () => {
    const space = await make();
    log.made++;
    const wrapped: ScratchSpace = {
      name: space.name,
      async write(chunk) {
        await space.write(chunk);
        log.written += chunk.byteLength;
      },
      source: () => space.source(),
      async dispose() {
        log.disposed++;
        await space.dispose();
      },
    };
    return wrapped;
  };
  return { factory, log };
}

describe("scratch space for a deflated Fortran-order member", () => {
  it("is not needed for a small member kept in memory, which gives the same bytes", async () => {
    const { factory, log } = spy();
    const bytes = await fbig({ scratch: factory, maxKeptBytes: undefined });
    expect(Buffer.from(bytes).equals(Buffer.from(expected))).toBe(true);
    expect(log.made).toBe(0);
  });

  it("inflates the member once into it and delivers numpy's C-order bytes", async () => {
    const { factory, log } = spy();
    const warnings: string[] = [];
    const bytes = await fbig({ scratch: factory, onWarning: (m) => warnings.push(m) });
    expect(Buffer.from(bytes).equals(Buffer.from(expected))).toBe(true);
    expect(log).toEqual({ made: 1, written: FBIG_BYTES, disposed: 1 });
    expect(warnings).toEqual([]);
  });

  it("is not used when one slab holds the whole member", async () => {
    const { factory, log } = spy();
    const bytes = await fbig({ scratch: factory, fortranSlabSize: FBIG_BYTES });
    expect(Buffer.from(bytes).equals(Buffer.from(expected))).toBe(true);
    expect(log.made).toBe(0);
  });

  it("falls back to one inflation per slab, with a notice, when no scratch space can be made", async () => {
    const warnings: string[] = [];
    const bytes = await fbig({ scratch: () => createScratchFile({ dir: "/nonexistent/st-convert" }), onWarning: (m) => warnings.push(m) });
    expect(Buffer.from(bytes).equals(Buffer.from(expected))).toBe(true);
    expect(warnings).toHaveLength(1);
    expect(warnings[0]).toMatch(
      /^no scratch space for the Fortran-order member \(\/nonexistent\/st-convert\/st-convert-scratch-\d+-\w+\.tmp: cannot create a scratch file: no such file or directory\); it is inflated once per slab instead/,
    );
  });

  it("falls back, and disposes of the space, when a write to it fails (a full disk)", async () => {
    const { factory, log } = spy(async () => {
      const space = await createScratchFile();
      return {
        ...space,
        write: async () => {
          throw new StConvertError("Io", "scratch file write failed: no space left on the device");
        },
        source: () => space.source(),
        dispose: () => space.dispose(),
      };
    });
    const warnings: string[] = [];
    const bytes = await fbig({ scratch: factory, onWarning: (m) => warnings.push(m) });
    expect(Buffer.from(bytes).equals(Buffer.from(expected))).toBe(true);
    expect(log.disposed).toBe(1);
    expect(warnings.join("\n")).toMatch(/no space left on the device\); it is inflated once per slab instead/);
  });

  it("refuses a member whose bytes do not match its CRC before anything is delivered, and disposes of the space", async () => {
    // Rewrite fbig's recorded CRC (local header and central directory) to a wrong one.
    const damaged = archive.slice();
    const view = new DataView(damaged.buffer);
    const name = new TextEncoder().encode("fbig.npy");
    let patched = 0;
    for (let at = 0; at + 46 < damaged.byteLength; at++) {
      const signature = view.getUint32(at, true);
      const nameAt = signature === 0x04034b50 ? at + 30 : signature === 0x02014b50 ? at + 46 : -1;
      if (nameAt < 0 || !name.every((b, i) => damaged[nameAt + i] === b)) continue;
      const crcAt = signature === 0x04034b50 ? at + 14 : at + 16;
      view.setUint32(crcAt, view.getUint32(crcAt, true) ^ 1, true);
      patched++;
    }
    expect(patched).toBe(2);
    const { factory, log } = spy();
    const file = await readNpz(bytesSource(damaged, "f.npz"), { fortranSlabSize: 256, maxKeptBytes: 0, scratch: factory });
    const tensor = file.tensors.find((t) => t.name === "fbig")!;
    const delivered: Uint8Array[] = [];
    await expect(
      (async () => {
        for await (const chunk of tensor.chunks()) delivered.push(chunk);
      })(),
    ).rejects.toMatchObject({ code: "BadCrc", tensor: "fbig" });
    expect(delivered).toEqual([]);
    expect(log.disposed).toBe(1);
  });
});
