/**
 * One file, one meaning: the classes of checkpoint on which the differential fuzzer found
 * st-convert and `torch.load(weights_only=True)` (torch 2.13) disagreeing, each built byte by byte
 * and named after its class. The verdicts were checked against real torch while these were written.
 */
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { MemorySink, type TensorEntry, bytesSource, readTensorBytes } from "@st-convert/core";
import { openFileSource } from "@st-convert/core/node";
import { readTorch, writeTorch } from "@st-convert/torch";
import { errorCode } from "@st-convert/testing";
import { Pickle, f32, statePickle, torchZip, zip } from "./build.js";

const work = mkdtempSync(join(tmpdir(), "st-convert-torch-agreement-"));
afterAll(() => rmSync(work, { recursive: true, force: true }));

const W = { key: "0", numel: 4, size: [4], stride: [1] };
const STORE = { "0": f32(1, 2, 3, 4) };
const text = (s: string) => new TextEncoder().encode(s);

async function names(bytes: Uint8Array): Promise<string[]> {
  const file = await readTorch(bytes);
  for (const t of file.tensors) await readTensorBytes(t);
  return file.tensors.map((t) => t.name);
}

function floats(bytes: Uint8Array): number[] {
  return [...new Float32Array(bytes.slice().buffer)];
}

/** The records of a checkpoint as torchZip lays them out, for zips built member by member. */
function records(pickle = statePickle({ w: W })) {
  return [
    { name: "archive/data.pkl", data: pickle },
    { name: "archive/byteorder", data: text("little") },
    { name: "archive/data/0", data: f32(1, 2, 3, 4) },
    { name: "archive/version", data: text("3\n") },
  ];
}

describe("torch-records-outside-the-root-folder", () => {
  it("a record outside the first record's folder is refused, as torch refuses it", async () => {
    for (const name of ["x.txt", "other/y"]) {
      const bytes = zip([...records(), { name, data: text("hi") }]);
      await expect(readTorch(bytes)).rejects.toThrow(/outside the archive's root folder "archive\/".*not in a subdirectory/);
    }
  });

  it("a first record not in a folder is refused", async () => {
    const bytes = zip([{ name: "x.txt", data: text("hi") }, ...records()]);
    await expect(readTorch(bytes)).rejects.toThrow(/is not in a folder; torch: "file in archive is not in a subdirectory"/);
  });

  it("the root is the first record's folder: a nested data.pkl (a/b/data.pkl) is not found there", async () => {
    const nested = records().map((m) => ({ ...m, name: m.name.replace("archive/", "a/b/") }));
    expect(await errorCode(readTorch(zip(nested)))).toBe("InvalidCheckpoint");
  });
});

describe("torch-required-records", () => {
  it("no version record is refused; .data/version stands in for it", async () => {
    await expect(readTorch(torchZip(statePickle({ w: W }), STORE, { records: { version: undefined } }))).rejects.toThrow(/no archive\/version record/);
    const dataVersion = torchZip(statePickle({ w: W }), STORE, { records: { version: undefined, ".data/version": "3\n" } });
    expect(await names(dataVersion)).toEqual(["w"]);
  });

  it("records are looked up ignoring ASCII case, as miniz compares names", async () => {
    const upper = records().map((m) => (m.name === "archive/data.pkl" ? { ...m, name: "archive/DATA.PKL" } : m));
    expect(await names(zip(upper))).toEqual(["w"]);
  });

  it("two records whose names differ only in case are refused (which one torch reads is not defined)", async () => {
    const bytes = zip([...records(), { name: "archive/BYTEORDER", data: text("big") }]);
    expect(await errorCode(readTorch(bytes))).toBe("DuplicateKey");
  });

  it("a storage declared in a skipped value must have its record too (torch loads every storage)", async () => {
    const p = new Pickle().proto().dict().str("w").tensor(W).setitem();
    p.str("extra").raw(0x5d).mark().str("storage").global("torch", "FloatStorage").str("1").str("cpu").int(2).tuple().raw(0x51).raw(0x61).setitem();
    await expect(readTorch(torchZip(p.stop().bytes(), STORE))).rejects.toThrow(/storage "1" has no member "archive\/data\/1"/);
  });

  it("a TorchScript archive (constants.pkl) is refused by name", async () => {
    const bytes = torchZip(statePickle({ w: W }), STORE, { records: { "constants.pkl": "" } });
    await expect(readTorch(bytes)).rejects.toThrow(/TorchScript archive/);
  });
});

describe("torch-record-contents", () => {
  const withRecord = (name: string, value: string) => torchZip(statePickle({ w: W }), STORE, { records: { [name]: value } });

  it("the version record is read as std::stoull reads it, and must be 1 to 10", async () => {
    for (const ok of ["3", "3\n", " 3", "3x", "+3", "10"]) expect(await names(withRecord("version", ok))).toEqual(["w"]);
    for (const bad of ["x", "", "-1", "0", "0x3", "11", "99"]) expect(await errorCode(readTorch(withRecord("version", bad)))).toBe("InvalidCheckpoint");
  });

  it("byteorder must be exactly little or big", async () => {
    for (const bad of ["little\n", "LITTLE", ""]) {
      await expect(readTorch(withRecord("byteorder", bad))).rejects.toThrow(/not exactly "little" or "big"; torch: "Unknown endianness type"/);
    }
  });

  it(".storage_alignment must be an int literal as Python's int() reads it; .format_version may be anything", async () => {
    for (const ok of ["64", " 64\n", "6_4", "-1", "+64"]) expect(await names(withRecord(".storage_alignment", ok))).toEqual(["w"]);
    for (const bad of ["x", "", "6__4"]) expect(await errorCode(readTorch(withRecord(".storage_alignment", bad)))).toBe("InvalidCheckpoint");
    for (const any of ["1", "x", ""]) expect(await names(withRecord(".format_version", any))).toEqual(["w"]);
  });

  it("a deflated .data/serialization_id that inflates to another size than declared is refused: torch reads that record too", async () => {
    const id = text("1234567890123456789012345678901234567890");
    expect(await names(zip([...records(), { name: "archive/.data/serialization_id", data: id, deflate: true }]))).toEqual(["w"]);
    const lying = zip([...records(), { name: "archive/.data/serialization_id", data: id, deflate: true, size: 41 }]);
    expect(await errorCode(readTorch(lying))).toBe("MemberSizeMismatch");
  });

  it("a storage record no tensor names whose size is not its declaration's is refused", async () => {
    const p = new Pickle().proto().dict().str("w").tensor(W).setitem();
    p.str("extra").raw(0x5d).mark().str("storage").global("torch", "FloatStorage").str("1").str("cpu").int(2).tuple().raw(0x51).raw(0x61).setitem();
    const bytes = torchZip(p.stop().bytes(), { ...STORE, "1": f32(1, 2, 3) });
    await expect(readTorch(bytes)).rejects.toThrow(/storage "1" is declared as 2 × torch.FloatStorage elements \(8 bytes\), but holds 12 bytes/);
  });
});

describe("torch-rebuild-semantics", () => {
  const rebuild = (args: (p: Pickle) => Pickle, callee = "_rebuild_tensor_v2", module = "torch._utils") =>
    torchZip(args(new Pickle().proto().dict().str("w").global(module, callee).mark()).tuple().reduce().setitem().stop().bytes(), STORE);
  const storage = (p: Pickle, cls = "FloatStorage") => p.mark().str("storage").global("torch", cls).str("0").str("cpu").int(4).tuple().raw(0x51);
  const od = (p: Pickle) => p.global("collections", "OrderedDict").raw(0x29).reduce();

  it("requires_grad must be a bool, and True only on a floating-point or complex tensor", async () => {
    expect(await names(rebuild((p) => od(storage(p).int(0).ints([4]).ints([1]).raw(0x88))))).toEqual(["w"]);
    await expect(readTorch(rebuild((p) => od(storage(p).int(0).ints([4]).ints([1]).int(1))))).rejects.toThrow(/requires_grad is an int, not a bool/);
    await expect(readTorch(rebuild((p) => od(storage(p, "IntStorage").int(0).ints([4]).ints([1]).raw(0x88))))).rejects.toThrow(
      /requires_grad is True on a int32 tensor/,
    );
  });

  it("_rebuild_parameter takes three arguments, _rebuild_from_type_v2 four", async () => {
    const param = (extra: number) =>
      torchZip(
        (() => {
          const p = new Pickle().proto().dict().str("w").global("torch._utils", "_rebuild_parameter").mark().tensor(W).raw(0x89);
          od(p);
          for (let i = 0; i < extra; i++) p.raw(0x4e);
          return p.tuple().reduce().setitem().stop().bytes();
        })(),
        STORE,
      );
    expect(await names(param(0))).toEqual(["w"]);
    expect(await errorCode(readTorch(param(1)))).toBe("InvalidTensor");
    const fromType = (state: boolean) => {
      const p = new Pickle().proto().dict().str("w").global("torch._tensor", "_rebuild_from_type_v2").mark();
      p.global("torch._utils", "_rebuild_tensor_v2").global("torch", "Tensor").mark();
      od(storage(p).int(0).ints([4]).ints([1]).raw(0x89)).tuple();
      if (state) p.raw(0x4e);
      return torchZip(p.tuple().reduce().setitem().stop().bytes(), STORE);
    };
    expect(await names(fromType(true))).toEqual(["w"]);
    await expect(readTorch(fromType(false))).rejects.toThrow(/takes 4 arguments \(func, new_type, args, state\), not 3/);
  });

  it("a storage class or a dtype called, an unhashable dict key, are refused", async () => {
    const called = new Pickle().proto().dict().str("w").tensor(W).setitem().str("s").global("torch", "FloatStorage").raw(0x29).reduce().setitem();
    await expect(readTorch(torchZip(called.stop().bytes(), STORE))).rejects.toThrow(/torch.FloatStorage is called.*not callable/);
    const listKey = new Pickle().proto().dict().str("w").tensor(W).setitem().raw(0x5d).int(1).setitem();
    await expect(readTorch(torchZip(listKey.stop().bytes(), STORE))).rejects.toThrow(/unhashable type: 'list'/);
  });

  it("a zip checkpoint's persistent id has exactly five items", async () => {
    const six = rebuild((p) =>
      od(p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(4).raw(0x4e).tuple().raw(0x51).int(0).ints([4]).ints([1]).raw(0x89)),
    );
    expect(await errorCode(readTorch(six))).toBe("InvalidStorage");
  });
});

describe("torch-bools-as-integers", () => {
  const view = (offset: (p: Pickle) => Pickle, size: (p: Pickle) => Pickle, stride: (p: Pickle) => Pickle) => {
    const p = new Pickle().proto().dict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
    p.mark().str("storage").global("torch", "FloatStorage").str("0").str("cpu").int(4).tuple().raw(0x51);
    stride(size(offset(p)))
      .raw(0x89)
      .global("collections", "OrderedDict")
      .raw(0x29)
      .reduce();
    return torchZip(p.tuple().reduce().setitem().stop().bytes(), STORE);
  };
  const tuple =
    (...items: (number | boolean)[]) =>
    (p: Pickle) => {
      p.mark();
      for (const v of items) typeof v === "boolean" ? p.raw(v ? 0x88 : 0x89) : p.int(v);
      return p.tuple();
    };

  it("a bool after the first item of size or stride counts as 1 or 0, as torch's parser takes it", async () => {
    const file = await readTorch(view((p) => p.int(0), tuple(4, 1), tuple(1, true)));
    expect(file.tensors[0]!.shape).toEqual([4, 1]);
    expect(floats(await readTensorBytes(file.tensors[0]!))).toEqual([1, 2, 3, 4]);
    expect((await readTorch(view((p) => p.int(0), tuple(2, false), tuple(1, 1)))).tensors[0]!.shape).toEqual([2, 0]);
  });

  it("a bool as the offset or as the first item of a tuple is refused, as torch's set_() refuses it", async () => {
    for (const bytes of [
      view((p) => p.raw(0x89), tuple(4), tuple(1)),
      view((p) => p.int(0), tuple(true, 2), tuple(2, 1)),
      view((p) => p.int(0), tuple(4), tuple(true)),
    ]) {
      await expect(readTorch(bytes)).rejects.toThrow(/is a bool, which torch's set_\(\) refuses/);
    }
  });
});

describe("torch-strides-torch-ignores", () => {
  const view = (size: readonly number[], stride: readonly number[], offset = 0) =>
    torchZip(statePickle({ w: { key: "0", numel: 4, offset, size, stride } }), STORE);

  it("any stride along a dimension of size 1, and any stride or offset of an empty tensor, is read", async () => {
    const one = await readTorch(view([1, 2], [-7, 1]));
    expect(floats(await readTensorBytes(one.tensors[0]!))).toEqual([1, 2]);
    expect(floats(await readTensorBytes((await readTorch(view([2, 1], [1, 2 ** 60]))).tensors[0]!))).toEqual([1, 2]);
    expect((await readTorch(view([0, 3], [2 ** 62, -1], 2 ** 40))).tensors[0]!.byteLength).toBe(0);
  });

  it("a negative stride along a dimension that moves, and one outside int64, are refused", async () => {
    await expect(readTorch(view([2], [-1]))).rejects.toThrow(/Storage size calculation overflowed/);
    expect(await errorCode(readTorch(view([0], [2 ** 63])))).toBe("InvalidTensor");
  });

  it("sizes are multiplied left to right in int64: [2^32, 2^32, 0] overflows, [0, 2^32, 2^32] does not", async () => {
    await expect(readTorch(view([2 ** 32, 2 ** 32, 0], [1, 1, 1]))).rejects.toThrow(/numel: integer multiplication overflow/);
    expect((await readTorch(view([0, 2 ** 32, 2 ** 32], [1, 1, 1]))).tensors[0]!.shape).toEqual([0, 2 ** 32, 2 ** 32]);
  });
});

describe("torch-bool-bytes", () => {
  it("a bool storage's non-zero bytes read as 0x01, as torch gives them back", async () => {
    const bytes = torchZip(statePickle({ b: { key: "0", cls: "BoolStorage", numel: 4, size: [4], stride: [1] } }), {
      "0": Uint8Array.from([0, 1, 0x55, 0xff]),
    });
    const file = await readTorch(bytes);
    expect([...(await readTensorBytes(file.tensors[0]!))]).toEqual([0, 1, 1, 1]);
    const strided = torchZip(statePickle({ b: { key: "0", cls: "BoolStorage", numel: 4, size: [2], stride: [2] } }), { "0": Uint8Array.from([0x55, 0, 0, 0]) });
    expect([...(await readTensorBytes((await readTorch(strided)).tensors[0]!))]).toEqual([1, 0]);
  });
});

describe("torch-record-names-cut-at-nul", () => {
  it("a record name holding NUL is kept whole, as miniz keeps it: byteorder\\0z is not the byteorder record", async () => {
    const bytes = torchZip(statePickle({ w: W }), STORE, { extra: [{ name: "archive/byteorder\0z", data: text("big") }] });
    const file = await readTorch(bytes);
    expect(file.bigEndian).toBe(false);
    expect(floats(await readTensorBytes(file.tensors[0]!))).toEqual([1, 2, 3, 4]);
  });
});

describe("torch-archive-after-archive", () => {
  it("an archive after another is refused (torch finds neither), never read as the second", async () => {
    const first = torchZip(statePickle({ w: W }), STORE);
    const second = torchZip(statePickle({ v: W }), STORE);
    await expect(readTorch(Buffer.concat([first, second]))).rejects.toThrow(/bytes or another archive come before this one/);
  });
});

describe("torch-miniz-container-checks", () => {
  it("bytes before the archive, an entry count that lies, a disk number, a masked header, a name that is not UTF-8: refused", async () => {
    const cases: Uint8Array[] = [
      zip([{ name: "archive/junk", data: text("x") }, ...records()], {}).subarray(0),
      zip(records(), { count: 3 }),
      zip(records(), { count: 5 }),
      zip(records(), { disk: 1 }),
      zip([...records(), { name: "archive/extra", data: text("z"), flags: 0x2000 }]),
      zip([...records(), { name: "", rawName: Uint8Array.from([0x61, 0x72, 0x63, 0x68, 0x69, 0x76, 0x65, 0x2f, 0xff]), data: text("z") }]),
    ];
    // The first case shifted: its local headers no longer where the directory says.
    const shifted = zip(records(), { prefix: text("PK\u0003\u0004junk") });
    for (const bytes of [...cases.slice(1), shifted]) expect(await errorCode(readTorch(bytes))).toMatch(/BadZipFile|Unsupported/);
    expect(await names(cases[0]!)).toEqual(["w"]);
  });

  it("ZIP64 end records as miniz reads them: disks 0, two counts that agree, a locator that points at the record", async () => {
    const sink = new MemorySink();
    await writeTorch(
      {
        tensors: [
          {
            name: "w",
            dtype: "F32",
            shape: [2],
            byteLength: 8,
            chunks: async function* () {
              yield f32(1, 2);
            },
          },
        ],
        metadata: null,
      },
      sink,
    );
    await sink.close();
    const good = sink.bytes();
    expect(await names(good)).toEqual(["w"]);
    const end64 = good.byteLength - 22 - 20 - 56;
    const locator = good.byteLength - 22 - 20;
    const changed = (at: number, value: bigint, width: 4 | 8) => {
      const copy = good.slice();
      const v = new DataView(copy.buffer);
      if (width === 8) v.setBigUint64(at, value, true);
      else v.setUint32(at, Number(value), true);
      return copy;
    };
    const directory = Number(new DataView(good.buffer, good.byteOffset).getBigUint64(end64 + 48, true));
    const cases: [Uint8Array, RegExp][] = [
      [changed(end64 + 24, 5n, 8), /two entry counts differ/],
      [changed(end64 + 16, 1n, 4), /span multiple disks/],
      [changed(locator + 8, BigInt(end64 - 8), 8), /locator does not point/],
      [changed(directory + 34, 2n, 4), /starts on disk 2/],
    ];
    for (const [bytes, message] of cases) await expect(readTorch(bytes)).rejects.toThrow(message);
    expect(await names(changed(directory + 34, 1n, 4))).toEqual(["w"]);
  });

  it("a name that is UTF-8 without flag 11 is read as UTF-8, as torch reads every name", async () => {
    const bytes = zip([...records(), { name: "archive/é", data: text("z") }]);
    expect(await names(bytes)).toEqual(["w"]);
  });
});

describe("torch-legacy-structure", () => {
  const protocol = [0x80, 2, 0x4d, 0xe9, 0x03, 0x2e];
  const sysInfo = [0x80, 2, 0x7d, 0x2e];
  const magicBytes = [0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19];
  const objectPickle = () => {
    const p = new Pickle().proto().dict().str("w").global("torch._utils", "_rebuild_tensor_v2").mark();
    p.mark().str("storage").global("torch", "FloatStorage").str("k").str("cpu").int(4).raw(0x4e).tuple().raw(0x51);
    return p.int(0).ints([4]).ints([1]).raw(0x89).global("collections", "OrderedDict").raw(0x29).reduce().tuple().reduce().setitem().stop().bytes();
  };
  const legacy = (magic: number[], keys: Uint8Array) =>
    Buffer.concat([Uint8Array.from([...magic, ...protocol, ...sysInfo]), objectPickle(), keys, Uint8Array.from([4, 0, 0, 0, 0, 0, 0, 0, ...f32(1, 2, 3, 4)])]);
  const list = new Pickle().proto().raw(0x5d).str("k").raw(0x61).stop().bytes();

  it("a magic number after other opcodes (NONE left under the LONG1) is recognised, as torch unpickles it", async () => {
    expect(await names(legacy([0x80, 2, 0x4e, 0x8a, 0x0a, ...magicBytes, 0x2e], list))).toEqual(["w"]);
  });

  it("a key list that is a tuple or a one-key set is read; a set of several keys is refused (no one order)", async () => {
    const magic = [0x80, 2, 0x8a, 0x0a, ...magicBytes, 0x2e];
    const tuple = new Pickle().proto().mark().str("k").tuple().stop().bytes();
    expect(await names(legacy(magic, tuple))).toEqual(["w"]);
    const set = new Pickle().proto().raw(0x8f).mark().str("k").raw(0x90).stop().bytes();
    expect(await names(legacy(magic, set))).toEqual(["w"]);
    const two = new Pickle().proto().raw(0x8f).mark().str("k").str("j").raw(0x90).stop().bytes();
    await expect(readTorch(legacy(magic, two))).rejects.toThrow(/a set of several keys/);
  });
});

describe("writer classes", () => {
  const tensor = (name: string, dtype: TensorEntry["dtype"], shape: number[], bytes: Uint8Array): TensorEntry => ({
    name,
    dtype,
    shape,
    byteLength: bytes.byteLength,
    async *chunks() {
      if (bytes.byteLength > 0) yield bytes;
    },
  });
  const write = async (tensors: TensorEntry[]) => {
    const sink = new MemorySink();
    await writeTorch({ tensors, metadata: null }, sink);
    await sink.close();
    return sink.bytes();
  };
  const refusedBeforeWriting = async (tensors: TensorEntry[], message: RegExp) => {
    const sink = new MemorySink();
    await expect(writeTorch({ tensors, metadata: null }, sink)).rejects.toThrow(message);
    expect(sink.bytes().byteLength).toBe(0);
  };

  it("torch-writer-empty-shape-overflow: refused by name before the first byte", async () => {
    await refusedBeforeWriting([tensor("e", "F32", [2 ** 32, 2 ** 32, 0], new Uint8Array(0))], /tensor "e": the shape .* multiplies past 2\^63 - 1/);
    await refusedBeforeWriting([tensor("e", "F32", [0, 2 ** 32, 2 ** 32], new Uint8Array(0))], /tensor "e": .* C-order strides past 2\^63 - 1/);
    const fine = await readTorch(await write([tensor("e", "F32", [0, 2 ** 20, 2 ** 20], new Uint8Array(0))]));
    expect(fine.tensors[0]!.shape).toEqual([0, 2 ** 20, 2 ** 20]);
  });

  it("rank past 64: refused by name before the first byte, as the reader's MAX_RANK", async () => {
    await refusedBeforeWriting([tensor("r", "U8", new Array(65).fill(1), new Uint8Array(1))], /tensor "r": 65 dimensions, more than the 64/);
    expect((await readTorch(await write([tensor("r", "U8", new Array(64).fill(1), new Uint8Array(1))]))).tensors[0]!.shape).toHaveLength(64);
  });

  it("torch-writer-lone-state-dict: a lone tensor named state_dict reads back under its own name", async () => {
    const file = await readTorch(await write([tensor("state_dict", "F32", [2], f32(1, 2))]));
    expect(file.tensors.map((t) => t.name)).toEqual(["state_dict"]);
  });

  it("torch-writer-bool-bytes: a BOOL byte other than 0 and 1 is refused by name before the first byte", async () => {
    await refusedBeforeWriting([tensor("b", "BOOL", [3], Uint8Array.from([0, 1, 0x55]))], /tensor "b": element 2 is the byte 85, not a BOOL/);
    const ok = await readTorch(await write([tensor("b", "BOOL", [2], Uint8Array.from([0, 1]))]));
    expect([...(await readTensorBytes(ok.tensors[0]!))]).toEqual([0, 1]);
  });
});

describe("tiled gather of non-contiguous views", () => {
  /** The view's elements in C order, gathered one index at a time: the reference the tiles must match. */
  function expected(storage: Uint8Array, es: number, offset: number, shape: readonly number[], strides: readonly number[]): Uint8Array {
    const count = shape.reduce((n, d) => n * d, 1);
    const out = new Uint8Array(count * es);
    const index = new Array(shape.length).fill(0);
    for (let i = 0; i < count; i++) {
      let at = offset;
      for (let d = 0; d < shape.length; d++) at += index[d] * strides[d]!;
      out.set(storage.subarray(at * es, (at + 1) * es), i * es);
      for (let d = shape.length - 1; d >= 0; d--) {
        if (++index[d] < shape[d]!) break;
        index[d] = 0;
      }
    }
    return out;
  }
  const cases: { what: string; cls: string; es: number; numel: number; offset: number; shape: number[]; stride: number[] }[] = [
    { what: "a transposed F32 weight, 37 × 23", cls: "FloatStorage", es: 4, numel: 37 * 23, offset: 0, shape: [23, 37], stride: [1, 23] },
    { what: "a transposed F16 slice with an offset", cls: "HalfStorage", es: 2, numel: 30 * 19, offset: 5, shape: [14, 30], stride: [1, 19] },
    { what: "a permuted 3-D I64 tensor (an outer dimension)", cls: "LongStorage", es: 8, numel: 3 * 7 * 5, offset: 0, shape: [3, 5, 7], stride: [35, 1, 5] },
    { what: "runs of two U8 elements, transposed in pairs", cls: "ByteStorage", es: 1, numel: 9 * 11 * 2, offset: 0, shape: [9, 11, 2], stride: [2, 18, 1] },
    { what: "a view with no adjacent dimension (every other column)", cls: "FloatStorage", es: 4, numel: 12 * 10, offset: 1, shape: [10, 6], stride: [1, 20] },
  ];
  for (const c of cases) {
    it(`${c.what}: tiles of a few rows match the element-by-element gather`, async () => {
      const storage = new Uint8Array(c.numel * c.es);
      for (let i = 0; i < storage.byteLength; i++) storage[i] = (i * 131 + 7) & 0xff;
      const bytes = torchZip(statePickle({ v: { key: "0", cls: c.cls, numel: c.numel, offset: c.offset, size: c.shape, stride: c.stride } }), { "0": storage });
      const want = expected(storage, c.es, c.offset, c.shape, c.stride);
      // Tile sizes that split rows unevenly, one row, and the whole view, read from the file (window 0), then from a window.
      const tiles = [1, 3 * c.es * c.shape.slice(1).reduce((n, d) => n * d, 1) + 1, 50, 2 ** 20];
      const path = join(work, `${c.cls}-${c.shape.join("x")}.pt`);
      writeFileSync(path, bytes);
      const onDisk = await openFileSource(path);
      // From memory (async reads) and from a file (synchronous reads into the tile's buffer).
      const runs = [...tiles.map((t) => [t, 0, bytesSource(bytes)] as const), [2 ** 20, undefined, bytesSource(bytes)] as const, [50, 0, onDisk] as const];
      for (const [gatherTileSize, maxGatherWindow, source] of runs) {
        const file = await readTorch(source, { gatherTileSize, maxGatherWindow });
        expect(file.tensors[0]!.contiguous).toBe(false);
        const parts: Uint8Array[] = [];
        for await (const chunk of file.tensors[0]!.chunks({ chunkSize: 24 })) {
          expect(chunk.byteLength).toBeLessThanOrEqual(24);
          parts.push(new Uint8Array(chunk));
        }
        expect(Buffer.concat(parts).equals(Buffer.from(want))).toBe(true);
      }
      await onDisk.close();
    });
  }
});
