/** How the CLI writes counts: digits grouped by thousands, nouns agreeing with their number. */

/** `1234567` → `1,234,567` (Intl's toLocaleString costs a millisecond per thousand calls). */
export function groupDigits(value: number | bigint): string {
  return String(value).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/**
 * Elements of a tensor of this shape, as a plain number: a zero anywhere makes an empty tensor,
 * however large the other dims (no Infinity × 0). Cheaper than core's exact `elementCount`, which
 * goes through BigInt: this runs once per tensor of a listing or a shard plan.
 */
export function parameterCount(shape: readonly number[]): number {
  if (shape.includes(0)) return 0;
  let elements = 1;
  for (const d of shape) elements *= d;
  return elements;
}

/** `plural(1, "tensor")` → `1 tensor`, `plural(50000, "file")` → `50,000 files`. */
export function plural(count: number, noun: string, nouns = `${noun}s`): string {
  return `${groupDigits(count)} ${count === 1 ? noun : nouns}`;
}
