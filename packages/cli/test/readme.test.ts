import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { expect, it } from "vitest";
import { FORMATS } from "st-convert";
import { runReadmeSynopsis } from "@st-convert/testing";

it("the README's library example runs and its assertions hold", () => {
  expect(() => runReadmeSynopsis(fileURLToPath(new URL("..", import.meta.url)))).not.toThrow();
});

it("the README's format list names every registered format with each of its extensions", () => {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const list = /^Formats: ([\s\S]*?)\n\n/m.exec(readme)?.[1]?.replace(/\s+/g, " ");
  expect(list).toBeDefined();
  for (const format of FORMATS) {
    expect(list, format.name).toMatch(new RegExp(`(^|[ (,])${format.name} \\(`));
    for (const extension of format.extensions) expect(list, `${format.name} ${extension}`).toContain(`\`${extension}\``);
  }
});

it("the README does not say that URL inputs are refused in batches (they are converted: test/remote.test.ts)", () => {
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8").replace(/\s+/g, " ");
  expect(readme).not.toMatch(/not for batches/);
  expect(readme).toMatch(/A URL is an input too, for `convert`, `info` and batches/);
});
