import { describe, expect, it } from "vitest";
import { isStConvertError, readSafetensors } from "@st-convert/core";
import {
  recordHostileCases,
  safetensorsHeader as header,
  safetensorsHostileCases as hostileCases,
  safetensorsFile,
  safetensorsEntry as t,
} from "@st-convert/testing";

recordHostileCases("safetensors", ".safetensors", hostileCases);

describe("hostile safetensors files", () => {
  it.each(hostileCases)("%s", async (_attack, file, expected) => {
    let outcome: string;
    try {
      await readSafetensors(file);
      outcome = "ok";
    } catch (error) {
      if (!isStConvertError(error)) throw error;
      outcome = error.code;
    }
    expect(outcome).toBe(expected);
  });

  it("names the failing tensor and the rule in the message", async () => {
    const file = safetensorsFile(header(t("good", "U8", "1", "0,1"), t("bad", "I32", "2,2", "1,5")), 5);
    await expect(readSafetensors(file)).rejects.toThrow(/tensor "bad": invalid shape, data type, or offset/);
  });

  it("reports the first failing tensor in offset order", async () => {
    const file = safetensorsFile(header(t("z", "U8", "1", "2,3"), t("y", "U8", "1", "0,1")), 3);
    await expect(readSafetensors(file)).rejects.toThrow(/tensor "z": invalid offset/);
  });

  it("reads no tensor bytes while validating a header", async () => {
    const bytes = safetensorsFile(header(t("a", "U8", "1000", "0,1000")), 1000);
    const reads: [number, number][] = [];
    const source = {
      size: bytes.byteLength,
      read: async (offset: number, length: number) => (reads.push([offset, length]), bytes.subarray(offset, offset + length)),
    };
    await readSafetensors(source);
    expect(reads.every(([offset, length]) => offset + length <= bytes.byteLength - 1000)).toBe(true);
  });
});
