/**
 * Outputs that are folders of files (a distributed checkpoint): every file the format writes goes
 * to a temporary name inside the folder and is put in place only once all were written, as the
 * shards of a sharded checkpoint are; a folder made for the output is removed again on failure.
 */
import { mkdir, rm, stat } from "node:fs/promises";
import { join } from "node:path";
import { type ByteSink, StConvertError } from "@st-convert/core";
import { type AtomicFileSink, createFileSink } from "@st-convert/core/node";

/**
 * Runs `write` with a way to open files inside `dir`, then puts all of them in place.
 * @returns the paths written, in the order opened.
 * @throws StConvertError `OutputExists` when a file the format writes exists and `force` is off,
 *   `Io` when `dir` is a file or cannot be made; and what `write` throws (nothing is left behind).
 */
export async function writeFolderOutput(dir: string, force: boolean, write: (open: (name: string) => Promise<ByteSink>) => Promise<void>): Promise<string[]> {
  const existing = await stat(dir).catch(() => undefined);
  if (existing !== undefined && !existing.isDirectory()) throw new StConvertError("Io", "this format writes a folder, and a file has this name", { file: dir });
  const created = await mkdir(dir, { recursive: true }).catch((error: unknown) => {
    throw new StConvertError("Io", `cannot create the output folder: ${(error as Error).message}`, { file: dir, cause: error });
  });
  const sinks: AtomicFileSink[] = [];
  const open = async (name: string): Promise<ByteSink> => {
    const path = join(dir, name);
    const sink = await createFileSink(path, { force, deferPlacement: true });
    if (sink.kind !== "file") {
      await sink.abort();
      throw new StConvertError("Io", "a file of the output folder must be a regular file", { file: path });
    }
    sinks.push(sink);
    return sink;
  };
  try {
    await write(open);
    for (const sink of sinks) await sink.close();
    for (const sink of sinks) await sink.place();
  } catch (error) {
    for (const sink of sinks) await sink.abort();
    if (created !== undefined) await rm(created, { recursive: true }).catch(() => {});
    throw error;
  }
  return sinks.map((sink) => sink.name ?? dir);
}
