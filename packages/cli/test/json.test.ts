/**
 * The st-convert command with the JSON tensor form: safetensors to JSON and back byte for byte
 * (values and --base64), info on a .json, detection by content, and refusals as exit 1 with one
 * line naming the file, the tensor and the rule.
 */
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { fixturePath, makeTempDir, runCli, expectOneLineRefusal as oneLineRefusal } from "@st-convert/testing";

let dir: string;
let cleanup: () => void;
beforeEach(() => ({ dir, cleanup } = makeTempDir()));
afterEach(() => cleanup());

const goldens = readdirSync(fixturePath("safetensors")).filter((f) => f.endsWith(".safetensors"));

describe("st-convert safetensors -> json -> safetensors", () => {
  it.each(
    goldens.flatMap((f) => [
      [f, "values"],
      [f, "base64"],
    ]),
  )("%s (%s) comes back byte-identical", (name, form) => {
    const json = join(dir, "x.json");
    const back = join(dir, "back.safetensors");
    const there = runCli([fixturePath("safetensors", name), json, ...(form === "base64" ? ["--base64"] : [])]);
    expect(there.status, there.stderr).toBe(0);
    expect(there.stderr).not.toContain("warning");
    const text = readFileSync(json, "utf8");
    if (form === "base64") expect(text).not.toContain('"data": [');
    const again = runCli([json, back]);
    expect(again.status, again.stderr).toBe(0);
    expect(readFileSync(back).equals(readFileSync(fixturePath("safetensors", name)))).toBe(true);
  });

  it("writes the values form a person can read", () => {
    const json = join(dir, "m.json");
    expect(runCli([fixturePath("safetensors", "mixed.safetensors"), json]).status).toBe(0);
    const text = readFileSync(json, "utf8");
    expect(text).toMatch(/^\{\n {2}"__metadata__": \{"format": "pt"\},\n {2}"step": \{"dtype": "I64", "shape": \[\], "data": \[1234\]\},\n/);
    expect(text).toContain('"mask": {"dtype": "BOOL", "shape": [2, 2], "data": [');
  });

  it("warns when a tensor goes as base64 because values cannot carry its bytes", () => {
    const st = join(dir, "nan.safetensors");
    // A safetensors file with one F32 tensor holding a NaN with a payload.
    const json = '{"x":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}}';
    const header = json + " ".repeat((8 - (json.length % 8)) % 8);
    const bytes = Buffer.concat([Buffer.from([header.length, 0, 0, 0, 0, 0, 0, 0]), Buffer.from(header), Buffer.from([1, 0, 0xc0, 0x7f])]);
    writeFileSync(st, bytes);
    const run = runCli([st, join(dir, "nan.json")]);
    expect(run.status).toBe(0);
    expect(run.stderr).toMatch(/st-convert: warning: \S+: tensor "x": written as data_base64/);
    expect(readFileSync(join(dir, "nan.json"), "utf8")).toContain('"data_base64": "AQDAfw=="');
    expect(runCli([join(dir, "nan.json"), join(dir, "back.safetensors")]).status).toBe(0);
    expect(readFileSync(join(dir, "back.safetensors")).equals(bytes)).toBe(true);
  });
});

describe("st-convert info on a .json", () => {
  it("lists the tensors and metadata", () => {
    const run = runCli(["info", fixturePath("json", "handwritten.json"), "--json"]);
    expect(run.status, run.stderr).toBe(0);
    const report = JSON.parse(run.stdout) as { input: { format: string }; metadata: unknown; tensors: { name: string; dtype: string; shape: number[] }[] };
    expect(report.input.format).toBe("json");
    expect(report.metadata).toEqual({ source: "written by hand, per packages/json/README.md" });
    expect(report.tensors.slice(0, 3)).toEqual([
      { name: "weights", dtype: "F32", shape: [2, 3], bytes: 24 },
      { name: "bias", dtype: "F16", shape: [4], bytes: 8 },
      { name: "scale", dtype: "BF16", shape: [], bytes: 2 },
    ]);
    expect(report.tensors).toHaveLength(13);
  });

  it("recognises the form by content when the name does not tell", () => {
    const odd = join(dir, "tensors.txt");
    writeFileSync(odd, readFileSync(fixturePath("json", "handwritten.json")));
    const run = runCli(["info", odd, "--json"]);
    expect(run.status, run.stderr).toBe(0);
    expect(JSON.parse(run.stdout).input.format).toBe("json");
  });
});

describe("refusals", () => {
  const refused: [string, string, string, RegExp][] = [
    [
      "a value out of range",
      '{"w": {"dtype": "U8", "shape": [2], "data": [1, 300]}}',
      "ValueOutOfRange",
      /bad\.json: tensor "w": w\.data\[1\]: 300 is out of range for U8 \(0 to 255\)/,
    ],
    ["a count mismatch", '{"w": {"dtype": "F32", "shape": [2, 2], "data": [1, 2, 3]}}', "ShapeMismatch", /bad\.json: tensor "w": w\.data: 3 values/],
    [
      "a duplicate key",
      '{"w": {"dtype": "U8", "dtype": "U8", "shape": [], "data": 1}}',
      "DuplicateKey",
      /bad\.json: tensor "w": w: the field "dtype" appears twice/,
    ],
    ["an unknown dtype", '{"w": {"dtype": "F128", "shape": [1], "data": [1]}}', "UnknownDtype", /bad\.json: tensor "w": w\.dtype: unknown dtype "F128"/],
    ["non-string metadata", '{"__metadata__": {"step": 3}}', "InvalidMetadata", /bad\.json: __metadata__\.step: the value is a number, not a string/],
    ["a float overflowing F16", '{"h": {"dtype": "F16", "shape": [1], "data": [1e5]}}', "ValueOutOfRange", /tensor "h": h\.data\[0\]: 1e5 overflows F16/],
    ["broken JSON", '{"w": {"dtype": "U8", "shape": [1], "data": [1,]}}', "InvalidJson", /bad\.json: tensor "w": w\.data\[0\]: a '\]' right after ','/],
  ];
  it.each(refused)("%s: exit 1, one line naming the file, the tensor and the rule; no output left", (_case, doc, code, line) => {
    const bad = join(dir, "bad.json");
    writeFileSync(bad, doc);
    const out = join(dir, "out.safetensors");
    expect(oneLineRefusal([bad, out], code)).toMatch(line);
    expect(readdirSync(dir)).toEqual(["bad.json"]);
  });

  it("info refuses what the scan finds, exit 1", () => {
    const bad = join(dir, "bad.json");
    writeFileSync(bad, '{"w": {"dtype": "U8", "shape": [2], "data": [1, 2, 3]}}');
    expect(oneLineRefusal(["info", bad], "ShapeMismatch")).toContain('tensor "w"');
  });

  it("--to json writes the form under any name", () => {
    const out = join(dir, "tensors.txt");
    expect(runCli([fixturePath("safetensors", "dtype_u8.safetensors"), out, "--to", "json"]).status).toBe(0);
    expect(readFileSync(out, "utf8")).toMatch(/^\{\n {2}"x": \{"dtype": "U8", "shape": \[2, 3\], "data": \[/);
  });
});
