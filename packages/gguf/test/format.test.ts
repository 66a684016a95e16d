import { describe, expect, it } from "vitest";
import { ggufFormat, sniffGguf } from "../src/format.js";

describe("ggufFormat", () => {
  it("is named gguf and claims .gguf", () => {
    expect(ggufFormat.name).toBe("gguf");
    expect(ggufFormat.extensions).toEqual([".gguf"]);
  });

  it("sniffs the GGUF magic and nothing else", () => {
    expect(sniffGguf(new TextEncoder().encode("GGUF\x03\0\0\0"))).toBe(true);
    expect(sniffGguf(new TextEncoder().encode("GGU"))).toBe(false);
    expect(sniffGguf(new TextEncoder().encode("GGML\x03\0\0\0"))).toBe(false);
  });
});
