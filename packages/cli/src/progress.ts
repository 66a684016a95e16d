/**
 * A one-line progress bar on a terminal: bytes, rate and ETA, and for remote inputs the bytes
 * fetched over the network, redrawn in place. It stays silent for short conversions (nothing is
 * drawn during the first half second) and is only used when stderr is a TTY that can redraw (not
 * `TERM=dumb`); piped output gets nothing. The line never reaches the terminal's last column, so
 * it never wraps: on a narrow terminal it drops the bar, then the rate and ETA, then the sizes,
 * then shortens what is left.
 */

/** How a progress line is drawn and cleared. */
export interface ProgressLine {
  /** Redraws the line: `label`, `done` of `total` bytes (`total` unknown: no percentage, no ETA). */
  update(label: string, done: number, total: number | undefined): void;
  /**
   * The bytes fetched over the network so far (every remote input together), shown after the
   * figures as `12.3 MiB fetched` from the next draw on; redraws a line already drawn.
   */
  fetched(bytes: number): void;
  /** Removes the line (before printing anything else). */
  clear(): void;
}

/** Delay before the first draw, so that quick conversions print nothing. */
const QUIET_START_MS = 500;
/** Redraws at most this often. */
const REDRAW_MS = 100;

/**
 * The width to draw for: `columns` as the terminal reports it, or 80 when it reports no size (a
 * pseudo-terminal nobody sized says 0 columns, and a line one column wide was redrawn one
 * character at a time).
 */
export function terminalColumns(columns: number | undefined): number {
  return columns !== undefined && Number.isInteger(columns) && columns > 0 ? columns : 80;
}

/** A progress line writing to `write` (stderr) on a terminal `columns` wide (unknown or 0: 80); `now` is injectable for tests. */
export function createProgressLine(write: (text: string) => void, reported?: number, now: () => number = Date.now): ProgressLine {
  const columns = terminalColumns(reported);
  const started = now();
  /** When the measure shown began: another total is another measure (a download, then the conversion), with its own rate. */
  let since = started;
  let lastDraw = 0;
  let drawn = false;
  let shown: { label: string; done: number; total: number | undefined } | undefined;
  let fetched: number | undefined;
  const draw = (final: boolean) => {
    const t = now();
    if (shown === undefined || t - started < QUIET_START_MS || (t - lastDraw < REDRAW_MS && !final)) return;
    lastDraw = t;
    drawn = true;
    write(`\r${renderProgress(shown.label, shown.done, shown.total, (t - since) / 1000, columns, fetched)}\x1b[K`);
  };
  return {
    update(label, done, total) {
      if (shown !== undefined && total !== shown.total) since = now();
      shown = { label, done, total };
      draw(total !== undefined && done >= total);
    },
    fetched(bytes) {
      fetched = bytes;
      if (drawn) draw(false);
    },
    clear() {
      if (drawn) write("\r\x1b[K");
      drawn = false;
    },
  };
}

/** Narrowest bar worth drawing, and the widest. */
const BAR_MIN = 10;
const BAR_MAX = 30;
/** Label room below which the label is left out rather than cut to a stub. */
const LABEL_MIN = 4;

/**
 * The text of one progress line, shorter than `columns` (unknown or 0: 80; the last column is never written: many
 * terminals wrap as soon as it is filled). `fetched`, when given, is the network traffic of
 * remote inputs (`, 12.3 MiB fetched`). Richest layout that fits: bar, figures and label; then
 * figures and label; then the figures; then without rate and ETA; then the percentage (or bytes)
 * with the bytes fetched; then the percentage (or bytes) alone, cut to fit.
 */
export function renderProgress(label: string, done: number, total: number | undefined, seconds: number, columns?: number, fetched?: number): string {
  const width = Math.max(1, terminalColumns(columns) - 1);
  const rate = seconds > 0 ? done / seconds : 0;
  const fraction = total === undefined ? undefined : total > 0 ? Math.min(done / total, 1) : 1;
  const percent = fraction === undefined ? "" : `${(fraction * 100).toFixed(0).padStart(3)}% `;
  const eta = total !== undefined && rate > 0 && total > done ? (total - done) / rate : 0;
  const network = fetched === undefined ? "" : `, ${formatSize(fetched)} fetched`;
  const sizes = total === undefined ? formatSize(done) : `${percent}${formatSize(done)}/${formatSize(total)}`;
  const stats = `${sizes} ${formatSize(rate)}/s${total === undefined ? "" : ` ETA ${formatDuration(eta)}`}${network}`;
  const withLabel = (head: string): string => {
    const room = width - head.length - 1;
    if (room < LABEL_MIN || label === "") return head;
    return `${head} ${label.length > room ? `…${label.slice(label.length - room + 1)}` : label}`;
  };
  const barWidth = Math.min(BAR_MAX, width - stats.length - 1 - 2 - 20);
  if (fraction !== undefined && barWidth >= BAR_MIN) {
    const filled = Math.round(fraction * barWidth);
    return withLabel(`[${"=".repeat(filled)}${" ".repeat(barWidth - filled)}] ${stats}`);
  }
  const brief = fraction === undefined ? formatSize(done) : percent.trim();
  for (const layout of [stats, `${sizes}${network}`, `${brief}${network}`]) if (layout.length <= width) return withLabel(layout);
  return brief.slice(0, width);
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
