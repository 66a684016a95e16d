// `pnpm hostile`: every hostile file of every reader's test suite, run through the command itself
// (`st-convert FILE out.safetensors`, which reads headers and every tensor's bytes) under
// /usr/bin/time (a distributed checkpoint's case is a folder, read as the command reads one). Each must be refused (exit 1, one line, the expected code) or accepted as its test
// says, within 5 s and 200 MB of peak memory. Prints the worst figures; exits 1 on any breach.
//
//   pnpm hostile [--keep DIR]
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { measure } from "./measure.mjs";

const { values } = parseArgs({ options: { keep: { type: "string" } } });
const root = fileURLToPath(new URL("..", import.meta.url));
const cli = join(root, "packages", "cli", "dist", "st-convert.cjs");
const corpus = values.keep ?? mkdtempSync(join(tmpdir(), "st-convert-hostile-"));
const TIME_LIMIT_S = 5;
const RSS_LIMIT_MB = 200;

// 1. The hostile tests write their cases to the corpus folder.
const vitest = join(root, "node_modules", ".bin", "vitest");
const collect = spawnSync(vitest, ["run", "hostile"], { cwd: root, stdio: "inherit", env: { ...process.env, ST_CONVERT_HOSTILE_DIR: corpus } });
if (collect.status !== 0) process.exit(collect.status ?? 1);
const entries = readFileSync(join(corpus, "manifest.jsonl"), "utf8")
  .trim()
  .split("\n")
  .map((line) => JSON.parse(line));

// 2. The command on each, measured.
const results = [];
for (const entry of entries) {
  const input = join(corpus, entry.file);
  const output = join(corpus, "out.safetensors");
  const run = measure(process.execPath, [cli, input, output, "--force", "--quiet"], corpus, { timeout: 60_000 });
  const { seconds, rssMiB: rssMB } = run;
  rmSync(output, { force: true });
  const lines = run.stderr.trim() === "" ? [] : run.stderr.trim().split("\n");
  const refusedAsExpected = entry.expected === "ok" ? run.status === 0 : run.status === 1 && lines.length === 1 && lines[0].includes(`[${entry.expected}]`);
  // A refusal by the command may come from a check that runs before the reader's (the output
  // format's own rules): exit 1 with one coded line is still a clean refusal.
  const clean =
    entry.expected === "ok"
      ? run.status === 0
      : run.status === 1 && lines.length === 1 && /\[[A-Za-z0-9]+\]$/.test(lines[0]) && !lines[0].includes("internal error");
  results.push({ ...entry, status: run.status, seconds, rssMB, refusedAsExpected, clean, message: lines[0] ?? "" });
}

// 3. Report.
const byFormat = new Map();
for (const r of results) byFormat.set(r.format, [...(byFormat.get(r.format) ?? []), r]);
console.log("\n| reader | cases | refused or accepted cleanly | same code as the reader's test | slowest | largest peak RSS |");
console.log("|---|---|---|---|---|---|");
for (const [format, rs] of byFormat) {
  const slowest = rs.reduce((a, b) => (b.seconds > a.seconds ? b : a));
  const largest = rs.reduce((a, b) => (b.rssMB > a.rssMB ? b : a));
  console.log(
    `| ${format} | ${rs.length} | ${rs.filter((r) => r.clean).length} | ${rs.filter((r) => r.refusedAsExpected).length} | ${slowest.seconds.toFixed(2)} s (${slowest.attack}) | ${largest.rssMB.toFixed(0)} MB (${largest.attack}) |`,
  );
}
const breaches = results.filter((r) => !r.clean || r.seconds > TIME_LIMIT_S || r.rssMB > RSS_LIMIT_MB);
for (const r of results.filter((r) => r.clean && !r.refusedAsExpected))
  console.log(`note: ${r.format} "${r.attack}": refused by the command with another code than the reader's: ${r.message}`);
for (const r of breaches)
  console.log(`BREACH: ${r.format} "${r.attack}": status ${r.status}, ${r.seconds.toFixed(2)} s, ${r.rssMB.toFixed(0)} MB: ${r.message}`);
console.log(`\nhostile: ${results.length} files, ${breaches.length} breaches (limits: ${TIME_LIMIT_S} s, ${RSS_LIMIT_MB} MB)`);
if (values.keep === undefined) rmSync(corpus, { recursive: true, force: true });
process.exit(breaches.length > 0 ? 1 : 0);
