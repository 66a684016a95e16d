/**
 * The hostile corpus on disk: each package's hostile test hands its cases to
 * {@link recordHostileCases}; when `ST_CONVERT_HOSTILE_DIR` is set (by `pnpm hostile`), they are
 * written there as files with a manifest, so that the command itself can be run on every one of
 * them under `/usr/bin/time` (scripts/hostile-bounds.mjs). Otherwise it does nothing.
 */
import { appendFileSync, cpSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";

/** One line of `manifest.jsonl`. */
export interface HostileCorpusEntry {
  format: string;
  attack: string;
  file: string;
  /** The error code the reader must refuse it with, or "ok" for a file it must accept. */
  expected: string;
}

/**
 * Writes `cases` (attack, bytes, expected code or "ok") as `<dir>/<format>/<n>.<extension>` when
 * `ST_CONVERT_HOSTILE_DIR` is set.
 */
export function recordHostileCases(format: string, extension: string, cases: readonly (readonly [string, Uint8Array, string, ...unknown[]])[]): void {
  const dir = process.env.ST_CONVERT_HOSTILE_DIR;
  if (dir === undefined || dir === "") return;
  mkdirSync(join(dir, format), { recursive: true });
  const lines = cases.map(([attack, bytes, expected], i) => {
    const file = join(format, `${String(i).padStart(4, "0")}${extension}`);
    writeFileSync(join(dir, file), bytes);
    const entry: HostileCorpusEntry = { format, attack, file, expected };
    return JSON.stringify(entry);
  });
  appendFileSync(join(dir, "manifest.jsonl"), `${lines.join("\n")}\n`);
}

/**
 * Copies folders that are one checkpoint each (a distributed checkpoint) into the corpus as
 * `<dir>/<format>/<n>/`, when `ST_CONVERT_HOSTILE_DIR` is set: the command reads a folder as it
 * reads a file.
 */
export function recordHostileFolders(format: string, cases: readonly (readonly [string, string, string])[]): void {
  const dir = process.env.ST_CONVERT_HOSTILE_DIR;
  if (dir === undefined || dir === "") return;
  mkdirSync(join(dir, format), { recursive: true });
  const lines = cases.map(([attack, folder, expected], i) => {
    const file = join(format, String(i).padStart(4, "0"));
    cpSync(folder, join(dir, file), { recursive: true });
    const entry: HostileCorpusEntry = { format, attack, file, expected };
    return JSON.stringify(entry);
  });
  appendFileSync(join(dir, "manifest.jsonl"), `${lines.join("\n")}\n`);
}
