/**
 * The page's tree, tensor statistics with their histogram, and comparison of two files, in
 * Chromium: every number on the page must be the one `st-convert stats|info --tree|diff --json`
 * reports for the same file. Screenshots of each view are written to the work folder (and, with
 * ST_CONVERT_SCREENSHOTS=DIR, kept there) for a person to look at.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { CLI_PATH, fixturePath, safetensorsFile } from "@st-convert/testing";
import type { Browser, Page } from "playwright-core";
import { afterAll, beforeAll, expect, it } from "vitest";
import { type StaticServer, buildPage, describeBrowser, launchChromium, serveStatic } from "./page.ts";

const PAGE_STEP_MS = 60_000;

function cli<T>(args: readonly string[], status = 0): T {
  const run = spawnSync(process.execPath, [CLI_PATH, ...args, "--json"], { encoding: "utf8" });
  expect(run.status, run.stderr).toBe(status);
  return JSON.parse(run.stdout) as T;
}

/** A value of the JSON report as the page writes it. */
function asText(value: unknown): string {
  return value === null ? "null" : String(value);
}

/** A checkpoint with 4 identical layers and a fifth that differs: built here, byte by byte. */
function layeredFile(path: string, nudge = 0): void {
  const header: Record<string, unknown> = {};
  const parts: Uint8Array[] = [];
  let at = 0;
  const add = (name: string, shape: number[], seed: number) => {
    const count = shape.reduce((a, b) => a * b, 1);
    const values = Float32Array.from({ length: count }, (_, i) => Math.sin(seed * 7 + i) * (seed + 1));
    if (name === "lm_head.weight") values[5]! += nudge;
    header[name] = { dtype: "F32", shape, data_offsets: [at, at + 4 * count] };
    parts.push(new Uint8Array(values.buffer));
    at += 4 * count;
  };
  add("model.embed_tokens.weight", [16, 8], 0);
  for (let i = 0; i < 4; i++) {
    add(`model.layers.${i}.self_attn.q_proj.weight`, [8, 8], i + 1);
    add(`model.layers.${i}.mlp.up_proj.weight`, [16, 8], i + 2);
  }
  add("model.layers.4.mlp.up_proj.weight", [4, 8], 9);
  add("lm_head.weight", [16, 8], 11);
  writeFileSync(path, safetensorsFile(JSON.stringify(header), Buffer.concat(parts)));
}

describeBrowser("the page's tree, statistics and comparison in Chromium", () => {
  let work: string;
  let out: string;
  let server: StaticServer;
  let browser: Browser;
  let page: Page;
  const pageErrors: string[] = [];
  const shots = process.env.ST_CONVERT_SCREENSHOTS;

  beforeAll(async () => {
    work = mkdtempSync(join(tmpdir(), "st-convert-web-explore-"));
    out = mkdtempSync(join(tmpdir(), "st-convert-web-explore-page-"));
    await buildPage(out);
    server = await serveStatic(out);
    browser = await launchChromium();
    const context = await browser.newContext({ viewport: { width: 1100, height: 1400 } });
    page = await context.newPage();
    page.setDefaultTimeout(PAGE_STEP_MS);
    page.on("pageerror", (error) => pageErrors.push(String(error)));
    page.on("console", (message) => {
      if (message.type() === "error") pageErrors.push(message.text());
    });
    await page.goto(`${server.origin}/`);
    await page.waitForSelector("form[data-state=idle]", { state: "attached" });
    if (shots !== undefined) mkdirSync(shots, { recursive: true });
  });

  afterAll(async () => {
    await browser?.close();
    await server?.close();
    if (out !== undefined) rmSync(out, { recursive: true, force: true });
    if (work !== undefined) rmSync(work, { recursive: true, force: true });
    expect(pageErrors).toEqual([]);
  });

  async function pick(path: string): Promise<void> {
    await page.setInputFiles("input[name=file]", []);
    await page.waitForSelector("form[data-state=idle]", { state: "attached" });
    await page.setInputFiles("input[name=file]", path);
    await page.waitForSelector("form[data-state=ready]", { state: "attached" });
  }

  async function screenshot(name: string): Promise<void> {
    const path = join(shots ?? work, `${name}.png`);
    await page.screenshot({ path, fullPage: true });
    expect(readFileSync(path).subarray(1, 4).toString()).toBe("PNG");
  }

  it("a click on each tensor shows the statistics stats --json reports, and a histogram of its finite values", async () => {
    const file = fixturePath("safetensors", "mixed.safetensors");
    await pick(file);
    const expected = cli<{ tensors: Record<string, unknown>[] }>(["stats", file]).tensors;
    // Every group opened, as a user would to reach each tensor.
    for (let open = 0; open < 10; open++) {
      const closed = page.locator("details.group:not([open]) > summary");
      if ((await closed.count()) === 0) break;
      await closed.first().click();
    }
    for (const want of expected) {
      const name = want.name as string;
      await page.click(`button.tensor[data-name="${name}"]`);
      await page.waitForSelector(`section#tensor-look[data-state=ready][data-name="${name}"]`, { state: "attached" });
      for (const key of ["min", "max", "mean", "std", "nan", "posinf", "neginf", "zeros"]) {
        expect(await page.textContent(`td[data-stat=${key}]`), `${name}.${key}`).toBe(asText(want[key]));
      }
      const counts = ((await page.getAttribute("canvas#histogram", "data-counts")) ?? "")
        .split(",")
        .filter((c) => c !== "")
        .map(Number);
      const elements = (want.shape as number[]).reduce((a, b) => a * b, 1);
      const finite = elements - (want.nan as number) - (want.posinf as number) - (want.neginf as number);
      expect(
        counts.reduce((a, b) => a + b, 0),
        name,
      ).toBe(finite);
    }
    await page.click('button.tensor[data-name="model.embed_tokens.weight"]');
    await page.waitForSelector('section#tensor-look[data-state=ready][data-name="model.embed_tokens.weight"]', { state: "attached" });
    // The histogram is drawn: the canvas is not blank.
    const inked = await page.evaluate(() => {
      const canvas = document.querySelector("canvas#histogram") as HTMLCanvasElement;
      const pixels = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
      let count = 0;
      for (let i = 3; i < pixels.length; i += 4) if (pixels[i]! > 0) count++;
      return count;
    });
    expect(inked).toBeGreaterThan(500);
    await screenshot("tensor-statistics");
  });

  it("groups names as info --tree does, repeated layers folded, each group collapsible", async () => {
    const file = join(work, "layers.safetensors");
    layeredFile(file);
    await pick(file);
    interface Node {
      name: string;
      tensors: number;
      params: number;
      children: Node[];
    }
    const tree = cli<{ tree: Node }>(["info", file, "--tree"]).tree;
    const groups: string[] = [];
    const walk = (node: Node) => {
      for (const c of node.children) {
        if (c.children.length > 0) groups.push(`${c.name} ${c.params.toLocaleString("en-US")} params`);
        walk(c);
      }
    };
    walk(tree);
    const shown = await page.$$eval("details.group > summary", (summaries) =>
      summaries.map((s) => `${s.querySelector(".group-name")!.textContent} ${/([\d,]+) params/.exec(s.textContent ?? "")![0]}`),
    );
    expect(shown).toEqual(groups);
    expect(shown).toContain("{0..3} 768 params");
    const folded = page.locator('details[data-group="model.layers.0"]');
    expect(await folded.locator("> summary").textContent()).toContain("×4");
    expect(await folded.evaluate((d) => (d as HTMLDetailsElement).open)).toBe(false);
    await folded.locator("> summary").click();
    expect(await folded.evaluate((d) => (d as HTMLDetailsElement).open)).toBe(true);
    await page.click('button.tensor[data-name="model.layers.0.self_attn.q_proj.weight"]');
    await page.waitForSelector('section#tensor-look[data-state=ready][data-name="model.layers.0.self_attn.q_proj.weight"]', { state: "attached" });
    await screenshot("tree");
  });

  it("compares two files as diff --json does, exactly and with tolerances", async () => {
    const a = join(work, "a.safetensors");
    layeredFile(a);
    // B: the same tensors but one element nudged, converted to npz by the command.
    const nudged = join(work, "nudged.safetensors");
    layeredFile(nudged, 0.001);
    const b = join(work, "b.npz");
    expect(spawnSync(process.execPath, [CLI_PATH, nudged, b, "--force"]).status).toBe(0);
    copyFileSync(fixturePath("safetensors", "mixed.safetensors"), join(work, "mixed.safetensors"));
    await pick(a);
    for (const tolerance of [[], ["--atol", "0.01"], ["--rtol", "0.0000001"]]) {
      const want = cli<{ same: boolean; tensors: Record<string, unknown>[] }>(["diff", a, b, ...tolerance], tolerance[1] === "0.01" ? 0 : 1);
      await page.fill("input[name=atol]", tolerance[0] === "--atol" ? tolerance[1]! : "");
      await page.fill("input[name=rtol]", tolerance[0] === "--rtol" ? tolerance[1]! : "");
      await page.setInputFiles("input[name=compare]", []);
      await page.setInputFiles("input[name=compare]", b);
      await page.waitForSelector("section#compare[data-state=ready]", { state: "attached" });
      expect(await page.getAttribute("p#diff-summary", "data-same")).toBe(String(want.same));
      for (const t of want.tensors) {
        const row = `tr[data-name="${t.name as string}"]`;
        expect(await page.getAttribute(row, "data-status"), t.name as string).toBe(t.status);
        expect(await page.textContent(`${row} td[data-field=differing]`)).toBe(t.differing === null ? "" : String(t.differing));
        expect(await page.textContent(`${row} td[data-field=maxAbsDiff]`)).toBe(t.maxAbsDiff === null ? "" : String(t.maxAbsDiff));
        expect(await page.textContent(`${row} td[data-field=maxRelDiff]`)).toBe(t.maxRelDiff === null ? "" : String(t.maxRelDiff));
        expect(await page.textContent(`${row} td[data-field=firstIndex]`)).toBe(t.firstIndex === null ? "" : `[${(t.firstIndex as number[]).join(", ")}]`);
      }
      await page.evaluate(() => document.querySelector("section#compare")!.setAttribute("data-state", "idle"));
    }
    await page.setInputFiles("input[name=compare]", join(work, "mixed.safetensors"));
    await page.waitForSelector("section#compare[data-state=ready]", { state: "attached" });
    const other = cli<{ totals: { onlyInB: number } }>(["diff", a, join(work, "mixed.safetensors")], 1);
    expect(await page.locator("tr[data-status=onlyInB]").count()).toBe(other.totals.onlyInB);
    await screenshot("compare");
  });
});
