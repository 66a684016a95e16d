/** How the CLI writes counts: digits grouped by thousands, nouns agreeing with their number. */

/** `1234567` → `1,234,567` (Intl's toLocaleString costs a millisecond per thousand calls). */
export function groupDigits(value: number | bigint): string {
  return String(value).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** `plural(1, "tensor")` → `1 tensor`, `plural(50000, "file")` → `50,000 files`. */
export function plural(count: number, noun: string, nouns = `${noun}s`): string {
  return `${groupDigits(count)} ${count === 1 ? noun : nouns}`;
}
