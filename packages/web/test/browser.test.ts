/**
 * The converter page in a real browser (Debian's Chromium, headless, driven by playwright-core),
 * served from its production build on 127.0.0.1: what it lists and what it writes must be what
 * the `st-convert` command lists and writes for the same file, byte for byte, and its failures the
 * command's lines.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, isAbsolute, join } from "node:path";
import { CLI_PATH, fixturePath, referencePython, runPython, safetensorsFile } from "@st-convert/testing";
import type { Browser, BrowserContext, Page } from "playwright-core";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { type BuildRecord, type StaticServer, buildPage, describeBrowser, launchChromium, serveStatic } from "./page.ts";

/** One fixture per format the page reads, each with tensors of several dtypes where the format allows. */
const INPUTS = [
  { fixture: "safetensors/mixed.safetensors", format: "safetensors" },
  { fixture: "npy/fortran_f32_be.npy", format: "npy" }, // Fortran order and big-endian: transposed and swapped on the way
  { fixture: "npy/npz_compressed.npz", format: "npz" }, // deflated members: fflate inflates them in the page
  { fixture: "flax/mixed_to_bytes.msgpack", format: "flax" },
  // F4 ("packed") has no numpy, flax or torch form: left out here, refused in its own test.
  { fixture: "json/handwritten.json", format: "json", exclude: "^packed$" },
  { fixture: "torch/training.pt", format: "torch" }, // non-tensor entries: the reader's warnings
  { fixture: "gguf/quant.gguf", format: "gguf" }, // written by gguf-py: quantized blocks dequantized in the page
] as const;

/** The formats the page writes, with the extension its output gets. */
const TARGETS = [
  { to: "safetensors", extension: ".safetensors" },
  { to: "npy", extension: ".npy" },
  { to: "npz", extension: ".npz" },
  { to: "flax", extension: ".msgpack" },
  { to: "json", extension: ".json" },
  { to: "torch", extension: ".bin" },
] as const;

interface CliResult {
  status: number;
  /** The line the command printed for a failure, without `st-convert: `. */
  errorLine: string | undefined;
  /** Its warnings, as `warning: FILE: MESSAGE`. */
  warnings: string[];
  output: Uint8Array | undefined;
}

/** Settings typed into the form, and their command-line spelling. */
interface Settings {
  filter?: string;
  exclude?: string;
  metadata?: string[];
  compress?: boolean;
  cast?: string[];
}

/** What the page did with a conversion. */
interface PageResult {
  state: "done" | "failed";
  errorLine: string;
  warnings: string[];
  fileName: string | undefined;
  output: Uint8Array | undefined;
}

let work: string;

/**
 * Runs the command in a folder holding a copy of the fixture under its own name, as a user who
 * picked that file would: `st-convert NAME out/OUTPUT …`. Its lines name `out/OUTPUT`; the page's
 * name `OUTPUT`, so the prefix is dropped.
 */
function runCli(fixture: string, outputName: string, settings: Settings): CliResult {
  const name = basename(fixture);
  copyFileSync(fixturePath(fixture), join(work, name));
  const args = [CLI_PATH, name, `out/${outputName}`, "--force", "--json"];
  if (settings.filter !== undefined) args.push("--filter", settings.filter);
  if (settings.exclude !== undefined) args.push("--exclude", settings.exclude);
  for (const entry of settings.metadata ?? []) args.push("--metadata", entry);
  if (settings.compress === true) args.push("--compress");
  for (const rule of settings.cast ?? []) args.push("--cast", rule);
  const run = spawnSync(process.execPath, args, { cwd: work, encoding: "utf8", env: { ...process.env, NO_COLOR: "1" } });
  const unprefix = (text: string) => text.replaceAll(`out/${outputName}`, outputName);
  const report = JSON.parse(run.stdout) as { warnings: { file: string; message: string }[] };
  const failure = run.stderr
    .trimEnd()
    .split("\n")
    .filter((line) => line.startsWith("st-convert: ") && !line.startsWith("st-convert: warning: "));
  return {
    status: run.status ?? -1,
    errorLine: failure.length === 0 ? undefined : unprefix(failure.at(-1)!.slice("st-convert: ".length)),
    warnings: report.warnings.map((w) => `warning: ${unprefix(w.file)}: ${w.message}`),
    output: run.status === 0 ? new Uint8Array(readFileSync(join(work, "out", outputName))) : undefined,
  };
}

/** `st-convert info --json FILE` and the totals line of `st-convert info FILE`. */
function runCliInfo(fixture: string): { json: CliInfo; totalsLine: string; errorLine: string | undefined } {
  const name = basename(fixture);
  copyFileSync(fixturePath(fixture), join(work, name));
  const json = spawnSync(process.execPath, [CLI_PATH, "info", name, "--json"], { cwd: work, encoding: "utf8" });
  const text = spawnSync(process.execPath, [CLI_PATH, "info", name], { cwd: work, encoding: "utf8" });
  const lines = text.stdout.trimEnd().split("\n");
  const failure = text.stderr
    .trimEnd()
    .split("\n")
    .find((line) => line.startsWith("st-convert: ") && !line.startsWith("st-convert: warning: "));
  return { json: JSON.parse(json.stdout) as CliInfo, totalsLine: lines.at(-1) ?? "", errorLine: failure?.slice("st-convert: ".length) };
}

interface CliInfo {
  ok: boolean;
  input: { file: string; format: string };
  metadata: Record<string, string> | null;
  tensors: { name: string; dtype: string; shape: number[]; bytes: number; stored?: { type: string; bytes: number } }[];
  totals: { tensors: number; parameters: number; bytes: number };
  warnings: { file: string; message: string }[];
}

/** A regular expression that matches exactly `name`. */
function exactly(name: string): string {
  return `^${name.replace(/[.*+?^${}()|[\]\\/]/g, "\\$&")}$`;
}

/** Time allowed for the page to list or convert one small file (generous: a busy 2-core machine). */
const PAGE_STEP_MS = 60_000;

describeBrowser("the converter page in Chromium", () => {
  let out: string;
  let record: BuildRecord;
  let server: StaticServer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  const pageErrors: string[] = [];
  const foreignRequests: string[] = [];

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "st-convert-web-work-"));
    mkdirSync(join(work, "out"));
    out = mkdtempSync(join(tmpdir(), "st-convert-web-page-"));
    record = await buildPage(out);
    server = await serveStatic(out);
    browser = await launchChromium();
    context = await browser.newContext({ acceptDownloads: true });
    context.on("request", (request) => {
      const url = request.url();
      if (!url.startsWith(`${server.origin}/`) && !url.startsWith("blob:") && !url.startsWith("data:")) foreignRequests.push(`${request.method()} ${url}`);
    });
    page = await openPage(context);
  });

  afterAll(async () => {
    await context?.close();
    await browser?.close();
    await server?.close();
    if (out !== undefined) rmSync(out, { recursive: true, force: true });
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
  });

  async function openPage(target: BrowserContext): Promise<Page> {
    const opened = await target.newPage();
    opened.setDefaultTimeout(PAGE_STEP_MS);
    opened.on("pageerror", (error) => pageErrors.push(String(error)));
    opened.on("console", (message) => {
      if (message.type() === "error") pageErrors.push(message.text());
    });
    await opened.goto(`${server.origin}/`);
    await opened.waitForSelector("form[data-state=idle]", { state: "attached" });
    return opened;
  }

  /** Picks `fixture` in the file input and waits until the page has listed it (or failed to). */
  async function pick(on: Page, fixture: string): Promise<"ready" | "failed"> {
    // Emptied first: a browser fires no change event when the same file is picked again.
    await on.setInputFiles("input[name=file]", []);
    await on.waitForSelector("form[data-state=idle]", { state: "attached" });
    await on.setInputFiles("input[name=file]", isAbsolute(fixture) ? fixture : fixturePath(fixture));
    await on.waitForSelector("form[data-state=ready], form[data-state=failed]", { state: "attached" });
    return (await on.getAttribute("form", "data-state")) as "ready" | "failed";
  }

  /** Fills the form, clicks Convert and collects the download (or the error line). */
  async function convertInPage(
    on: Page,
    to: string,
    settings: Settings,
    collect: () => Promise<Uint8Array | undefined> = async () => undefined,
  ): Promise<PageResult> {
    await on.selectOption("select[name=to]", to);
    await on.fill("input[name=filter]", settings.filter ?? "");
    await on.fill("input[name=exclude]", settings.exclude ?? "");
    await on.fill("textarea[name=metadata]", (settings.metadata ?? []).join("\n"));
    await on.fill("input[name=cast]", (settings.cast ?? []).join(" "));
    const compress = on.locator('input[name="option.compress"]');
    if (await compress.isVisible()) await compress.setChecked(settings.compress === true);
    const download = on.waitForEvent("download", { timeout: PAGE_STEP_MS });
    download.catch(() => {}); // none comes when the conversion fails
    await on.click("button[type=submit]");
    await on.waitForSelector("form[data-state=done], form[data-state=failed]", { state: "attached" });
    const state = (await on.getAttribute("form", "data-state")) as "done" | "failed";
    const errorLine = (await on.textContent("#error")) ?? "";
    const warnings = await on.locator("#warnings li").allTextContents();
    if (state === "failed") return { state, errorLine, warnings, fileName: undefined, output: undefined };
    const collected = await collect();
    if (collected !== undefined) return { state, errorLine, warnings, fileName: undefined, output: collected };
    const file = await download;
    const path = await file.path();
    return { state, errorLine, warnings, fileName: file.suggestedFilename(), output: new Uint8Array(readFileSync(path)) };
  }

  describe.each(INPUTS)("$fixture ($format)", (input) => {
    it("is listed as st-convert info lists it: format, metadata, every tensor, the totals", async () => {
      const cli = runCliInfo(input.fixture);
      expect(cli.json.ok).toBe(true);
      expect(await pick(page, input.fixture)).toBe("ready");
      expect(await page.textContent("#info-title")).toBe(`${basename(input.fixture)}: ${cli.json.input.format}`);
      const rows = await page
        .locator("table#tensors tbody tr")
        .evaluateAll((trs) => trs.map((tr) => [...(tr as HTMLTableRowElement).cells].map((c) => c.textContent)));
      // A "stored" column where the command's report says how the file stores a tensor (a GGUF's ggml types).
      const stored = cli.json.tensors.some((t) => t.stored !== undefined);
      expect(rows).toEqual(
        cli.json.tensors.map((t) => [
          t.name,
          t.dtype,
          `[${t.shape.join(", ")}]`,
          t.bytes.toLocaleString("en-US"),
          ...(stored ? [t.stored === undefined ? "" : `${t.stored.type} ${t.stored.bytes.toLocaleString("en-US")}`] : []),
        ]),
      );
      const metadata = await page
        .locator("table#metadata tbody tr")
        .evaluateAll((trs) => trs.map((tr) => [...(tr as HTMLTableRowElement).cells].map((c) => c.textContent)));
      // A GGUF's typed entries are shown as the command's text view shows them: `TYPE value`.
      const shown = ([key, value]: [string, string]): [string, string] => {
        if (input.format !== "gguf" || !key.startsWith("gguf.")) return [key, value];
        const typed = JSON.parse(value) as { type: string; value: unknown };
        return [key, `${typed.type} ${JSON.stringify(typed.value)}`];
      };
      expect(metadata).toEqual(Object.entries(cli.json.metadata ?? {}).map(shown));
      expect(await page.textContent("#metadata-line")).toBe(
        cli.json.metadata === null ? "metadata: none" : Object.keys(cli.json.metadata).length === 0 ? "metadata: {}" : "metadata:",
      );
      expect(await page.textContent("#totals")).toBe(cli.totalsLine);
      expect(await page.locator("#warnings li").allTextContents()).toEqual(cli.json.warnings.map((w) => `warning: ${w.file}: ${w.message}`));
    });

    it.each(TARGETS)(`converts to $to, byte for byte what st-convert writes`, async (target) => {
      const stem = basename(input.fixture).replace(/\.[^.]+$/, "");
      const outputName = `${stem}${target.extension}`;
      const settings: Settings = { exclude: "exclude" in input ? input.exclude : undefined };
      // A .npy holds one array: the first tensor, by name.
      if (target.to === "npy") settings.filter = exactly(runCliInfo(input.fixture).json.tensors[0]!.name);
      const cli = runCli(input.fixture, outputName, settings);
      expect(cli.status, cli.errorLine).toBe(0);
      expect(await pick(page, input.fixture)).toBe("ready");
      const result = await convertInPage(page, target.to, settings);
      expect(result.errorLine).toBe("");
      expect(result.state).toBe("done");
      expect(result.fileName).toBe(outputName);
      expect(result.warnings).toEqual(cli.warnings);
      expect(result.output?.byteLength).toBe(cli.output!.byteLength);
      expect(Buffer.from(result.output!).equals(Buffer.from(cli.output!))).toBe(true);
    });
  });

  it("converts a distributed checkpoint picked as its files (.metadata and the rank files) as st-convert converts its folder", async () => {
    const folder = fixturePath("dcp", "ranks2");
    const cli = spawnSync(process.execPath, [CLI_PATH, folder, join(work, "out", "dcp.safetensors"), "--force"], { encoding: "utf8" });
    expect(cli.status, cli.stderr).toBe(0);
    await page.setInputFiles("input[name=file]", []);
    await page.waitForSelector("form[data-state=idle]", { state: "attached" });
    await page.setInputFiles(
      "input[name=file]",
      readdirSync(folder).map((name) => join(folder, name)),
    );
    await page.waitForSelector("form[data-state=ready], form[data-state=failed]", { state: "attached" });
    expect(await page.textContent("#error")).toBe("");
    const result = await convertInPage(page, "safetensors", {});
    expect(result.errorLine).toBe("");
    expect(result.state).toBe("done");
    expect(Buffer.from(result.output!).equals(readFileSync(join(work, "out", "dcp.safetensors")))).toBe(true);
  });

  // The GGUF comes from gguf-py (22 MiB of tensors: enough for the header to be placed for the
  // kernel copy); the command and the page must lay the file out alike, since the layout depends on
  // the input alone.
  it.skipIf(referencePython() === undefined)("converts a GGUF laid out for the kernel copy as the command does, byte for byte", async () => {
    const input = join(work, "big.gguf");
    runPython(referencePython()!, "reference_gguf.py", ["big", input]);
    const cli = spawnSync(process.execPath, [CLI_PATH, input, join(work, "out", "big.safetensors"), "--force"], { encoding: "utf8" });
    expect(cli.status, cli.stderr).toBe(0);
    const expected = readFileSync(join(work, "out", "big.safetensors"));
    const n = Number(expected.readBigUInt64LE(0));
    expect(
      n -
        expected
          .subarray(8, 8 + n)
          .toString("utf8")
          .trimEnd().length,
    ).toBeGreaterThan(8);
    expect(await pick(page, input)).toBe("ready");
    const result = await convertInPage(page, "safetensors", {});
    expect(result.errorLine).toBe("");
    expect(result.state).toBe("done");
    expect(Buffer.from(result.output!).equals(expected)).toBe(true);
  });

  it("quantizes as --quantize does, byte for byte (Q8_0 in WebAssembly SIMD, Q4_K's loops in WebAssembly)", async () => {
    // the input: gguf-py's quant.gguf dequantized to F32 by the command (2-D tensors of whole blocks)
    const input = join(work, "dequantized.safetensors");
    const dequantized = spawnSync(process.execPath, [CLI_PATH, fixturePath("gguf", "quant.gguf"), input, "--force", "--quiet"], { encoding: "utf8" });
    expect(dequantized.status, dequantized.stderr).toBe(0);
    const rules = ["Q8_0", "q4_k:Q4_K"];
    const cli = spawnSync(process.execPath, [CLI_PATH, input, join(work, "out", "quantized.gguf"), ...rules.flatMap((r) => ["--quantize", r]), "--force"], {
      encoding: "utf8",
    });
    expect(cli.status, cli.stderr).toBe(0);
    expect(await pick(page, input)).toBe("ready");
    await page.selectOption("select[name=to]", "gguf");
    await page.fill('input[name="option.quantize"]', rules.join(" "));
    const result = await convertInPage(page, "gguf", {});
    expect(result.state, result.errorLine).toBe("done");
    expect(Buffer.from(result.output!).equals(readFileSync(join(work, "out", "quantized.gguf")))).toBe(true);
  });

  it("shows the format options that reading the file or writing the chosen format takes, and no other", async () => {
    const shown = async () =>
      (await page.locator("#format-options label:visible").evaluateAll((ls) => ls.map((l) => (l as HTMLElement).dataset.option))).sort();
    await pick(page, "safetensors/mixed.safetensors");
    await page.selectOption("select[name=to]", "npz");
    expect(await shown()).toEqual(["compress"]);
    await page.selectOption("select[name=to]", "json");
    expect(await shown()).toEqual(["base64"]);
    await pick(page, "torch/training.pt");
    await page.selectOption("select[name=to]", "flax");
    expect(await shown()).toEqual(["key", "sep"]);
  });

  it("lists a dropped file as a picked one", async () => {
    await page.setInputFiles("input[name=file]", []);
    const bytes = [...readFileSync(fixturePath("npy/sample_model.npz"))];
    await page.evaluate((data) => {
      const transfer = new DataTransfer();
      transfer.items.add(new File([new Uint8Array(data)], "dropped.npz"));
      document.querySelector("main")!.dispatchEvent(new DragEvent("drop", { dataTransfer: transfer, bubbles: true, cancelable: true }));
    }, bytes);
    await page.waitForSelector("form[data-state=ready], form[data-state=failed]", { state: "attached" });
    expect(await page.textContent("#info-title")).toBe("dropped.npz: npz");
    expect(await page.textContent("#totals")).toBe(runCliInfo("npy/sample_model.npz").totalsLine);
  });

  it("adds metadata entries as --metadata does", async () => {
    const settings: Settings = { metadata: ["source=the page", "format=np", "empty="] };
    const cli = runCli("npy/npz_compressed.npz", "npz_compressed.safetensors", settings);
    expect(cli.status, cli.errorLine).toBe(0);
    await pick(page, "npy/npz_compressed.npz");
    const result = await convertInPage(page, "safetensors", settings);
    expect(result.state, result.errorLine).toBe("done");
    expect(Buffer.from(result.output!).equals(Buffer.from(cli.output!))).toBe(true);
  });

  it("casts as --cast does (F32=BF16, then norms kept in F32), recording the rules in the metadata", async () => {
    const settings: Settings = { cast: ["F32=BF16", "norm:F32=F32"] };
    const cli = runCli("safetensors/mixed.safetensors", "mixed.safetensors", settings);
    expect(cli.status, cli.errorLine).toBe(0);
    await pick(page, "safetensors/mixed.safetensors");
    const result = await convertInPage(page, "safetensors", settings);
    expect(result.state, result.errorLine).toBe("done");
    expect(Buffer.from(result.output!).equals(Buffer.from(cli.output!))).toBe(true);
  });

  it("casts F32 to BF16 bit for bit as torch's Tensor.to does (fixtures/casts, every class of value)", async () => {
    const values = new Uint8Array(readFileSync(fixturePath("casts", "F32.bin")));
    const expected = readFileSync(fixturePath("casts", "F32-BF16.bin"));
    const count = values.byteLength / 4;
    const input = join(work, "values.safetensors");
    writeFileSync(input, safetensorsFile(JSON.stringify({ values: { dtype: "F32", shape: [count], data_offsets: [0, values.byteLength] } }), values));
    await pick(page, input);
    const result = await convertInPage(page, "safetensors", { cast: ["F32=BF16"] });
    expect(result.state, result.errorLine).toBe("done");
    // Read back by hand: u64 header length, the header, the data.
    const output = Buffer.from(result.output!);
    const headerLength = Number(output.readBigUInt64LE(0));
    const header = JSON.parse(output.subarray(8, 8 + headerLength).toString("utf8"));
    expect(header.__metadata__).toEqual({ "st_convert.cast": "F32=BF16" });
    expect(header.values).toEqual({ dtype: "BF16", shape: [count], data_offsets: [0, count * 2] });
    expect(output.subarray(8 + headerLength).equals(expected)).toBe(true);
  });

  it("inflates a deflated npz with fflate, loaded only then", async () => {
    const fflate = record.chunks.find((c) => c.moduleIds.some((id) => /[\\/]fflate[\\/]/.test(id)));
    expect(fflate).toBeDefined();
    const fresh = await openPage(context);
    try {
      const before = server.requests.length;
      await pick(fresh, "safetensors/mixed.safetensors");
      await convertInPage(fresh, "json", {});
      expect(server.requests.slice(before)).not.toContain(`GET /${fflate!.fileName}`);
      await pick(fresh, "npy/npz_compressed.npz");
      const result = await convertInPage(fresh, "safetensors", {});
      expect(result.state, result.errorLine).toBe("done");
      expect(server.requests.slice(before)).toContain(`GET /${fflate!.fileName}`);
    } finally {
      await fresh.close();
    }
  });

  it("writes a deflated npz (--compress) with fflate that reads back to the same tensors as the command's", async () => {
    const cli = runCli("safetensors/mixed.safetensors", "mixed.npz", { compress: true });
    expect(cli.status, cli.errorLine).toBe(0);
    await pick(page, "safetensors/mixed.safetensors");
    const result = await convertInPage(page, "npz", { compress: true });
    expect(result.state, result.errorLine).toBe("done");
    const output = result.output!;
    // The first member's local header: signature, then compression method 8 (deflate) at offset 8.
    expect([...output.subarray(0, 4)]).toEqual([0x50, 0x4b, 3, 4]);
    expect(output[8]! | (output[9]! << 8)).toBe(8);
    // fflate and zlib may choose other (equally valid) encodings: compare what the archives hold.
    const pagePath = join(work, "page-mixed.npz");
    writeFileSync(pagePath, output);
    const back = (file: string, to: string) => spawnSync(process.execPath, [CLI_PATH, file, to, "--force", "--quiet"], { cwd: work, encoding: "utf8" });
    expect(back("page-mixed.npz", "out/from-page.safetensors").status).toBe(0);
    expect(back("out/mixed.npz", "out/from-cli.safetensors").status).toBe(0);
    expect(readFileSync(join(work, "out/from-page.safetensors")).equals(readFileSync(join(work, "out/from-cli.safetensors")))).toBe(true);
  });

  it("refuses a file the command refuses, with the command's line", async () => {
    const cli = runCliInfo("npy/refuse_object.npy");
    expect(cli.errorLine).toMatch(/\[\w+\]$/);
    expect(await pick(page, "npy/refuse_object.npy")).toBe("failed");
    expect(await page.textContent("#error")).toBe(cli.errorLine);
    expect(await page.isHidden("#info")).toBe(true);
  });

  it("fails a conversion the command fails, with the command's line (F4 into npz)", async () => {
    const cli = runCli("json/handwritten.json", "handwritten.npz", {});
    expect(cli.status).toBe(1);
    expect(cli.errorLine).toContain("[UnsupportedDtype]");
    await pick(page, "json/handwritten.json");
    const result = await convertInPage(page, "npz", {});
    expect(result.state).toBe("failed");
    expect(result.errorLine).toBe(cli.errorLine);
  });

  it("names a filter that keeps nothing as NothingToWrite, and writes nothing", async () => {
    await pick(page, "safetensors/mixed.safetensors");
    const result = await convertInPage(page, "safetensors", { filter: "^no such tensor$" });
    expect(result.state).toBe("failed");
    expect(result.errorLine).toMatch(/^mixed\.safetensors: the selection \(filter\/exclude\) keeps none of the input's 8 tensors; .*\[NothingToWrite\]$/);
    expect(await page.locator("#result a[download]").count()).toBe(0);
  });

  it("streams the output to a file through the File System Access API when asked", async () => {
    const cli = runCli("torch/training.pt", "training.safetensors", {});
    const streaming = await browser.newContext();
    try {
      // The save dialog cannot be driven headless: a stand-in records what the page writes.
      await streaming.addInitScript(() => {
        const state = { name: "", chunks: [] as number[][], closed: false, aborted: false };
        (window as unknown as { __saved: typeof state }).__saved = state;
        (window as unknown as { showSaveFilePicker: unknown }).showSaveFilePicker = async (options: { suggestedName: string }) => {
          state.name = options.suggestedName;
          return {
            createWritable: async () => ({
              write: async (data: Uint8Array) => {
                state.chunks.push([...data]);
              },
              close: async () => {
                state.closed = true;
              },
              abort: async () => {
                state.aborted = true;
              },
            }),
          };
        };
      });
      const on = await openPage(streaming);
      await pick(on, "torch/training.pt");
      await on.selectOption("select[name=save]", "disk");
      const result = await convertInPage(on, "safetensors", {}, async () => {
        const saved = await on.evaluate(() => (window as unknown as { __saved: { name: string; chunks: number[][]; closed: boolean } }).__saved);
        expect(saved.name).toBe("training.safetensors");
        expect(saved.closed).toBe(true);
        return Uint8Array.from(saved.chunks.flat());
      });
      expect(result.state, result.errorLine).toBe("done");
      expect(Buffer.from(result.output!).equals(Buffer.from(cli.output!))).toBe(true);
      expect(await on.textContent("#result")).toContain("saved");
    } finally {
      await streaming.close();
    }
  });

  it("'as a download' of an output at the download limit streams it to disk where the browser can, and otherwise says what the browser may do", async () => {
    const cli = runCli("safetensors/mixed.safetensors", "mixed.npz", {});
    // The limit (512 MiB) made small: mixed.safetensors holds a few hundred bytes of tensors.
    const withPicker = await browser.newContext();
    const withoutPicker = await browser.newContext({ acceptDownloads: true });
    try {
      await withPicker.addInitScript(() => {
        (window as unknown as { ST_CONVERT_DOWNLOAD_LIMIT: number }).ST_CONVERT_DOWNLOAD_LIMIT = 64;
        const state = { name: "", chunks: [] as number[][], closed: false };
        (window as unknown as { __saved: typeof state }).__saved = state;
        (window as unknown as { showSaveFilePicker: unknown }).showSaveFilePicker = async (options: { suggestedName: string }) => {
          state.name = options.suggestedName;
          return {
            createWritable: async () => ({
              write: async (data: Uint8Array) => {
                state.chunks.push([...data]);
              },
              close: async () => {
                state.closed = true;
              },
              abort: async () => {},
            }),
          };
        };
      });
      const on = await openPage(withPicker);
      await pick(on, "safetensors/mixed.safetensors");
      await on.selectOption("select[name=save]", "download");
      const streamed = await convertInPage(on, "npz", {}, async () => {
        const saved = await on.evaluate(() => (window as unknown as { __saved: { name: string; chunks: number[][]; closed: boolean } }).__saved);
        expect(saved).toMatchObject({ name: "mixed.npz", closed: true });
        return Uint8Array.from(saved.chunks.flat());
      });
      expect(streamed.state, streamed.errorLine).toBe("done");
      expect(Buffer.from(streamed.output!).equals(Buffer.from(cli.output!))).toBe(true);
      expect(streamed.warnings.join("\n")).toMatch(
        /mixed\.npz: the output \(.*\) is too large for a download made in the page \(Chromium cancels those of about 600 MiB or more\)/,
      );
      expect(await on.locator("#result a[download]").count()).toBe(0);

      await withoutPicker.addInitScript(() => {
        (window as unknown as { ST_CONVERT_DOWNLOAD_LIMIT: number }).ST_CONVERT_DOWNLOAD_LIMIT = 64;
        delete (window as unknown as { showSaveFilePicker?: unknown }).showSaveFilePicker;
      });
      const plain = await openPage(withoutPicker);
      await pick(plain, "safetensors/mixed.safetensors");
      await plain.selectOption("select[name=save]", "download");
      const offered = await convertInPage(plain, "npz", {});
      expect(offered.state).toBe("done");
      expect(Buffer.from(offered.output!).equals(Buffer.from(cli.output!))).toBe(true);
      expect(offered.warnings.join("\n")).toMatch(/may be too large for the browser to download: Chromium cancels .* and this page cannot see whether it did/);
      const said = (await plain.textContent("#result")) ?? "";
      expect(said).toMatch(/Offered as a download: mixed\.npz .*\(the browser saves it; check its downloads\)/);
      expect(said).not.toMatch(/saved\.|done/);
    } finally {
      await withPicker.close();
      await withoutPicker.close();
    }
  });

  it("uploads nothing: every request is a GET for a file of the page, and no script failed", async () => {
    expect(server.requests.length).toBeGreaterThan(0);
    const files = new Set(["/", "/index.html", ...record.chunks.map((c) => `/${c.fileName}`)]);
    for (const request of server.requests) {
      const [method, path] = request.split(" ");
      expect(method).toBe("GET");
      if (!files.has(path!)) expect(path).toMatch(/^\/assets\/[\w.-]+\.css$|^\/favicon\.ico$/);
    }
    expect(foreignRequests).toEqual([]);
    expect(pageErrors).toEqual([]);
  });
});
