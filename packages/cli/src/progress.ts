/**
 * A one-line progress bar on a terminal: bytes, rate and ETA, redrawn in place. It stays silent
 * for short conversions (nothing is drawn during the first half second) and is only used when
 * stderr is a TTY; piped output gets nothing.
 */

/** How a progress line is drawn and cleared. */
export interface ProgressLine {
  /** Redraws the line: `label`, `done` of `total` bytes. */
  update(label: string, done: number, total: number): void;
  /** Removes the line (before printing anything else). */
  clear(): void;
}

/** Delay before the first draw, so that quick conversions print nothing. */
const QUIET_START_MS = 500;
/** Redraws at most this often. */
const REDRAW_MS = 100;

/** A progress line writing to `write` (stderr) on a terminal `columns` wide; `now` is injectable for tests. */
export function createProgressLine(write: (text: string) => void, columns = 80, now: () => number = Date.now): ProgressLine {
  const started = now();
  let lastDraw = 0;
  let drawn = false;
  return {
    update(label, done, total) {
      const t = now();
      if (t - started < QUIET_START_MS || (t - lastDraw < REDRAW_MS && done < total)) return;
      lastDraw = t;
      drawn = true;
      write(`\r${renderProgress(label, done, total, (t - started) / 1000, columns)}\x1b[K`);
    },
    clear() {
      if (drawn) write("\r\x1b[K");
      drawn = false;
    },
  };
}

/** The text of one progress line, at most `columns` wide. */
export function renderProgress(label: string, done: number, total: number, seconds: number, columns = 80): string {
  const fraction = total > 0 ? Math.min(done / total, 1) : 1;
  const rate = seconds > 0 ? done / seconds : 0;
  const eta = rate > 0 && total > done ? (total - done) / rate : 0;
  const stats = `${(fraction * 100).toFixed(0).padStart(3)}% ${formatSize(done)}/${formatSize(total)} ${formatSize(rate)}/s ETA ${formatDuration(eta)}`;
  const barWidth = Math.max(10, Math.min(30, columns - stats.length - 20));
  const filled = Math.round(fraction * barWidth);
  const bar = `[${"=".repeat(filled)}${" ".repeat(barWidth - filled)}]`;
  const room = columns - bar.length - stats.length - 3;
  const shownLabel = room <= 3 ? "" : label.length > room ? `…${label.slice(label.length - room + 1)}` : label;
  return `${bar} ${stats}${shownLabel === "" ? "" : ` ${shownLabel}`}`;
}

/** Bytes with a binary unit: `512 B`, `1.5 MiB`. */
export function formatSize(bytes: number): string {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let value = bytes;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return unit === 0 ? `${Math.round(value)} B` : `${value.toFixed(1)} ${units[unit]}`;
}

function formatDuration(seconds: number): string {
  const s = Math.ceil(seconds);
  if (s < 60) return `${s}s`;
  if (s < 3600) return `${Math.floor(s / 60)}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(s / 3600)}h${String(Math.floor((s % 3600) / 60)).padStart(2, "0")}m`;
}
