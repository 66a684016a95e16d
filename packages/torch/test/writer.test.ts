/**
 * The writer: what it writes reads back through our reader (and the npz package's zip reader)
 * identically, with torch.save's record order and 64-byte alignment; aliases become names again;
 * what torch cannot hold is refused by name. (That torch.load accepts it is interop.test.ts.)
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { MemorySink, bytesSource, readTensorBytes, tensorFromBytes } from "@st-convert/core";
import { locateMembers, readZipDirectory } from "@st-convert/npy";
import { readTorch, writeTorch } from "@st-convert/torch";
import { errorCode, fixturePath } from "@st-convert/testing";

const fixture = (name: string) => readFileSync(fixturePath("torch", name));

async function written(source: Parameters<typeof writeTorch>[0], options: Parameters<typeof writeTorch>[2] = {}): Promise<Uint8Array> {
  const sink = new MemorySink();
  await writeTorch(source, sink, options);
  await sink.close();
  return sink.bytes();
}

describe("writeTorch", () => {
  for (const name of ["dtypes.pt", "views.pt", "gpt2.bin", "shapes.pt", "legacy.pt", "big_endian.pt"]) {
    it(`${name} → .pt → read back: the same tensors, bytes and aliases`, async () => {
      const original = await readTorch(fixture(name));
      const back = await readTorch(await written(original));
      expect(back.tensors.map((t) => [t.name, t.dtype, t.shape])).toEqual(original.tensors.map((t) => [t.name, t.dtype, t.shape]));
      for (const [i, t] of back.tensors.entries()) {
        expect(Buffer.from(await readTensorBytes(t)).equals(Buffer.from(await readTensorBytes(original.tensors[i]!))), t.name).toBe(true);
        expect(t.contiguous).toBe(true);
      }
      expect(back.aliases).toEqual(original.aliases);
    });
  }

  it("lays records out as torch.save does: its order, stored, flags 0x0808, data on 64-byte boundaries", async () => {
    const bytes = await written(await readTorch(fixture("views.pt")), { rootFolder: "views" });
    const source = bytesSource(bytes);
    const members = await locateMembers(source, await readZipDirectory(source));
    expect(members.map((m) => m.name)).toEqual([
      "views/data.pkl",
      "views/.format_version",
      "views/.storage_alignment",
      "views/byteorder",
      ...Array.from({ length: 14 }, (_, i) => `views/data/${i}`),
      "views/version",
      "views/.data/serialization_id",
    ]);
    for (const m of members) {
      expect([m.method, m.flags, m.dataOffset % 64], m.name).toEqual([0, 0x0808, 0]);
      expect(bytes[m.headerOffset + 4]).toBe(0); // version needed 0, as torch writes
    }
    const text = (name: string) =>
      new TextDecoder().decode(
        bytes.subarray(
          members.find((m) => m.name === name)!.dataOffset,
          members.find((m) => m.name === name)!.dataOffset + members.find((m) => m.name === name)!.size,
        ),
      );
    expect([text("views/.format_version"), text("views/.storage_alignment"), text("views/byteorder"), text("views/version")]).toEqual([
      "1",
      "64",
      "little",
      "3\n",
    ]);
    expect(text("views/.data/serialization_id")).toMatch(/^\d{40}$/);
    // Reproducible: the same tensors give the same bytes.
    expect(Buffer.from(await written(await readTorch(fixture("views.pt")), { rootFolder: "views" })).equals(Buffer.from(bytes))).toBe(true);
  });

  it("writes ZIP64 fields where sizes or offsets pass the threshold (lowered here), and reads them back", async () => {
    const original = await readTorch(fixture("dtypes.pt"));
    const bytes = await written(original, { zip64Threshold: 100 });
    const back = await readTorch(bytes);
    for (const [i, t] of back.tensors.entries())
      expect(Buffer.from(await readTensorBytes(t)).equals(Buffer.from(await readTensorBytes(original.tensors[i]!)))).toBe(true);
    // The central directory carries 0xFFFFFFFF offsets with a ZIP64 extra field.
    expect(Buffer.from(bytes).indexOf(Buffer.from([0xff, 0xff, 0xff, 0xff]))).toBeGreaterThan(0);
  });

  it("aliases in the metadata become names over the kept tensor's storage", async () => {
    const w = tensorFromBytes({ name: "lm_head.weight", dtype: "F32", shape: [2] }, new Uint8Array(new Float32Array([1, 2]).buffer));
    const bytes = await written({ metadata: { format: "pt", "transformer.wte.weight": "lm_head.weight" }, tensors: [w] });
    const back = await readTorch(bytes);
    expect(back.tensors.map((t) => t.name)).toEqual(["lm_head.weight"]);
    expect(back.aliases).toEqual({ "transformer.wte.weight": "lm_head.weight" });
  });

  it("drops other metadata with a warning; refuses F4/F6, duplicate names, lone surrogates", async () => {
    const t = (name: string, dtype: "F32" | "F4" | "F6_E2M3" = "F32") =>
      tensorFromBytes({ name, dtype, shape: dtype === "F6_E2M3" ? [4] : [2] }, new Uint8Array(dtype === "F32" ? 8 : dtype === "F4" ? 1 : 3));
    const warnings: string[] = [];
    await written({ metadata: { note: "x", format: "pt" }, tensors: [t("a")] }, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual(['metadata dropped (a PyTorch checkpoint has no place for it): "note"']);
    await expect(written({ metadata: null, tensors: [t("a", "F4")] })).rejects.toThrow(/tensor "a": F4 has no torch dtype/);
    expect(await errorCode(written({ metadata: null, tensors: [t("a", "F6_E2M3")] }))).toBe("Unsupported");
    expect(await errorCode(written({ metadata: null, tensors: [t("a"), t("a")] }))).toBe("DuplicateKey");
    expect(await errorCode(written({ metadata: null, tensors: [t("\ud800")] }))).toBe("InvalidName");
  });

  it("refuses a tensor that delivers other bytes than it declares", async () => {
    const liar = {
      ...tensorFromBytes({ name: "a", dtype: "U8", shape: [4] }, new Uint8Array(4)),
      async *chunks() {
        yield new Uint8Array(3);
      },
    };
    expect(await errorCode(written({ metadata: null, tensors: [liar] }))).toBe("ByteLengthMismatch");
  });
});
