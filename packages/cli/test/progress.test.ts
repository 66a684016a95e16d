import { describe, expect, it } from "vitest";
import { createProgressLine, formatSize, renderProgress } from "st-convert";

describe("progress line", () => {
  it("shows percentage, sizes, rate and ETA within the terminal width", () => {
    const line = renderProgress("model.npz", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 80);
    expect(line).toContain(" 50% 512.0 MiB/1.0 GiB 256.0 MiB/s ETA 2s");
    expect(line).toContain("model.npz");
    expect(line.length).toBeLessThanOrEqual(80);
    expect(renderProgress("x".repeat(200), 1, 2, 1, 60).length).toBeLessThanOrEqual(60);
  });

  it("draws nothing during the first half second, then redraws in place and clears", () => {
    let now = 0;
    const out: string[] = [];
    const line = createProgressLine(
      (t) => out.push(t),
      80,
      () => now,
    );
    line.update("f", 10, 100);
    expect(out).toEqual([]);
    now = 600;
    line.update("f", 50, 100);
    expect(out).toHaveLength(1);
    expect(out[0]).toMatch(/^\r\[.*50%/);
    now = 650;
    line.update("f", 60, 100); // within the redraw interval
    expect(out).toHaveLength(1);
    line.clear();
    expect(out[1]).toBe("\r\x1b[K");
  });

  it("a terminal that reports no size (0 columns, as an unsized pseudo-terminal does, or none) gets an 80-column line", () => {
    const full = renderProgress("model.npz", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 80);
    expect(full.length).toBeGreaterThan(40);
    for (const columns of [0, undefined, Number.NaN, -1]) {
      expect(renderProgress("model.npz", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, columns), String(columns)).toBe(full);
      let now = 0;
      const out: string[] = [];
      const line = createProgressLine(
        (t) => out.push(t),
        columns,
        () => now,
      );
      now = 600;
      line.update("model.npz", 512 * 1024 * 1024, 1024 * 1024 * 1024);
      expect(out, String(columns)).toHaveLength(1);
      expect(out[0]).toMatch(/^\r\[=+ +\] {2}50% .* model\.npz\x1b\[K$/);
      expect(out[0]!.length).toBeLessThan(80 + 4);
    }
  });

  it("shows the bytes fetched after the figures, and keeps them on narrower terminals before anything else", () => {
    const fetched = 12.3 * 2 ** 20;
    const wide = renderProgress("https://host/model.safetensors", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 140, fetched);
    expect(wide).toMatch(/^\[=+ +\] {2}50% 512\.0 MiB\/1\.0 GiB 256\.0 MiB\/s ETA 2s, 12\.3 MiB fetched https:\/\/host\/model\.safetensors$/);
    const normal = renderProgress("https://host/model.safetensors", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 80, fetched);
    expect(normal).toBe(" 50% 512.0 MiB/1.0 GiB 256.0 MiB/s ETA 2s, 12.3 MiB fetched …/model.safetensors");
    // Rate and ETA go first, then the sizes; the bytes fetched stay as long as they fit.
    expect(renderProgress("f", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 45, fetched)).toBe(" 50% 512.0 MiB/1.0 GiB, 12.3 MiB fetched");
    expect(renderProgress("f", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 30, fetched)).toBe("50%, 12.3 MiB fetched f");
    expect(renderProgress("f", 5 * 1024 * 1024, undefined, 1, 30, fetched)).toBe("5.0 MiB, 12.3 MiB fetched");
    expect(renderProgress("f", 512 * 1024 * 1024, 1024 * 1024 * 1024, 2, 12, fetched)).toBe("50%");
    // Never the last column, whatever the width: the line must not wrap.
    for (let columns = 1; columns <= 160; columns++) {
      for (const total of [1024 * 1024 * 1024, undefined]) {
        const line = renderProgress("x".repeat(90), 3 * 1024 ** 3, total, 3, columns, 999.9 * 1024 ** 3);
        expect(line.length, `${columns} columns`).toBeLessThanOrEqual(Math.max(1, columns - 1));
      }
    }
  });

  it("draws the bytes fetched from the next draw on, and redraws a drawn line when they change", () => {
    let now = 0;
    const out: string[] = [];
    const line = createProgressLine(
      (t) => out.push(t),
      100,
      () => now,
    );
    line.fetched(1024);
    expect(out).toEqual([]); // nothing is drawn before there is a line to show
    now = 600;
    line.update("u", 10, 100);
    expect(out.at(-1)).toContain(", 1.0 KiB fetched u");
    now = 800;
    line.fetched(2048);
    expect(out).toHaveLength(2);
    expect(out.at(-1)).toContain(", 2.0 KiB fetched u");
  });

  it("measures the rate afresh when the total changes (a download, then the conversion)", () => {
    let now = 0;
    const out: string[] = [];
    const line = createProgressLine(
      (t) => out.push(t),
      100,
      () => now,
    );
    now = 10_000;
    line.update("downloading u", 10 * 2 ** 20, 10 * 2 ** 20);
    expect(out.at(-1)).toContain("1.0 MiB/s");
    now = 12_000;
    line.update("u", 0, 8 * 2 ** 20);
    now = 14_000;
    line.update("u", 4 * 2 ** 20, 8 * 2 ** 20);
    expect(out.at(-1)).toContain(" 50% 4.0 MiB/8.0 MiB 2.0 MiB/s ETA 2s u");
  });

  it("formats sizes with binary units", () => {
    expect([formatSize(0), formatSize(1023), formatSize(1536), formatSize(3 * 2 ** 30)]).toEqual(["0 B", "1023 B", "1.5 KiB", "3.0 GiB"]);
  });

  it("is not drawn when stderr is not a terminal", async () => {
    const { runCli, fixturePath, makeTempDir } = await import("@st-convert/testing");
    const { dir, cleanup } = makeTempDir();
    try {
      const run = runCli([fixturePath("safetensors", "mixed.safetensors"), `${dir}/o.safetensors`]);
      expect(run.stderr).not.toContain("\r");
    } finally {
      cleanup();
    }
  });
});
