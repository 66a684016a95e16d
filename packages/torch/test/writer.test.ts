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

  describe("metadata in the state dict's _metadata, as torch.save writes it (fixtures/torch_metadata, gen_torch_metadata.py)", () => {
    const kept = (name: string) => readFileSync(fixturePath("torch_metadata", name));
    /**
     * A pickle's bytes less the memo: each BINPUT/LONG_BINPUT dropped, each BINGET/LONG_BINGET's index
     * blanked. Only for these small pickles, whose strings hold none of those opcode bytes where it matters:
     * opcodes are walked, strings skipped by their length.
     */
    const withoutTupleMemo = (pickle: Buffer): Buffer => {
      const out: number[] = [];
      for (let at = 0; at < pickle.length; ) {
        const op = pickle[at]!;
        const arg = { 0x80: 1, 0x71: 1, 0x72: 4, 0x68: 1, 0x6a: 4, 0x4b: 1, 0x4d: 2, 0x4a: 4 }[op] ?? 0;
        const text = op === 0x58 ? 4 + pickle.readUInt32LE(at + 1) : op === 0x63 ? pickle.indexOf(0x0a, pickle.indexOf(0x0a, at) + 1) - at : 0;
        const size = 1 + (text > 0 ? text : arg);
        if (op === 0x68 || op === 0x6a) out.push(op);
        else if (op !== 0x71 && op !== 0x72) out.push(...pickle.subarray(at, at + size));
        at += size;
      }
      return Buffer.from(out);
    };
    /** The bytes of a checkpoint's data.pkl. */
    const pickleOf = async (bytes: Uint8Array) => {
      const source = bytesSource(bytes);
      const member = (await locateMembers(source, await readZipDirectory(source))).find((m) => m.name.endsWith("/data.pkl"))!;
      return Buffer.from(bytes.subarray(member.dataOffset, member.dataOffset + member.size));
    };

    for (const name of ["metadata.pt", "metadata_one.pt"]) {
      it(`${name}: read back as metadata; written again, the pickle is torch.save's but for its memo`, async () => {
        const original = await readTorch(kept(name));
        const entries =
          name === "metadata.pt"
            ? { "gguf.general.architecture": '{"type":"STRING","value":"llama"}', note: "é😀", other: "x", format: "pt" }
            : { k: "v", format: "pt" };
        expect({ ...original.metadata }).toEqual(entries);
        const warnings: string[] = [];
        const bytes = await written(original, { onWarning: (m) => warnings.push(m) });
        expect(warnings).toEqual([]);
        // torch.save memoizes every tuple (a BINPUT after each); our writer memoizes none, as for any checkpoint.
        expect(withoutTupleMemo(await pickleOf(bytes)).equals(withoutTupleMemo(await pickleOf(kept(name))))).toBe(true);
        expect({ ...(await readTorch(bytes)).metadata }).toEqual(entries);
      });
    }

    it("a module's state dict: its version entry beside ours is not metadata", async () => {
      expect({ ...(await readTorch(kept("module.pt"))).metadata }).toEqual({ k: "v", format: "pt" });
    });

    it("entries that are not a str to a str are left out, each with a warning", async () => {
      const warnings: string[] = [];
      const file = await readTorch(kept("mixed.pt"), { onWarning: (m) => warnings.push(m) });
      expect({ ...file.metadata }).toEqual({ kept: "yes", format: "pt" });
      expect(warnings).toHaveLength(2);
      expect(warnings.every((w) => /^metadata entry .* is not a str to a str: left out$/.test(w))).toBe(true);
    });
  });

  it("aliases in the metadata become names over the kept tensor's storage", async () => {
    const w = tensorFromBytes({ name: "lm_head.weight", dtype: "F32", shape: [2] }, new Uint8Array(new Float32Array([1, 2]).buffer));
    const bytes = await written({ metadata: { format: "pt", "transformer.wte.weight": "lm_head.weight" }, tensors: [w] });
    const back = await readTorch(bytes);
    expect(back.tensors.map((t) => t.name)).toEqual(["lm_head.weight"]);
    expect(back.aliases).toEqual({ "transformer.wte.weight": "lm_head.weight" });
  });

  it("keeps other metadata in the state dict's _metadata, dropping only what a pickle cannot hold; refuses F4/F6, duplicate names, lone surrogates", async () => {
    const t = (name: string, dtype: "F32" | "F4" | "F6_E2M3" = "F32") =>
      tensorFromBytes({ name, dtype, shape: dtype === "F6_E2M3" ? [4] : [2] }, new Uint8Array(dtype === "F32" ? 8 : dtype === "F4" ? 1 : 3));
    const warnings: string[] = [];
    const bytes = await written({ metadata: { note: "x", format: "pt", bad: "\udc00" }, tensors: [t("a")] }, { onWarning: (m) => warnings.push(m) });
    expect(warnings).toEqual(['metadata dropped (a lone UTF-16 surrogate, which a pickle cannot encode): "bad"']);
    expect({ ...(await readTorch(bytes)).metadata }).toEqual({ note: "x", format: "pt" });
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
