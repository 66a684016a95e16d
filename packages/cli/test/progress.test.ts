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
