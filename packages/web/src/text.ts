/**
 * How the page words counts, sizes and failures: the same words the command prints, so that a
 * line seen in the page can be searched for in the CLI's docs and issues.
 */
import { isStConvertError } from "@st-convert/core";

/** `1234567` → `1,234,567`. */
export function groupDigits(value: number): string {
  return String(value).replace(/\B(?=(\d{3})+(?!\d))/g, ",");
}

/** `plural(1, "tensor")` → `1 tensor`, `plural(50000, "byte")` → `50,000 bytes`. */
export function plural(count: number, noun: string): string {
  return `${groupDigits(count)} ${count === 1 ? noun : `${noun}s`}`;
}

/** `1536` → `1.5 KiB` (binary units, one decimal; bytes as a whole number). */
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

/**
 * One line for a failure, as the command prints it after `st-convert: `: the error's message
 * (file, tensor, rule) and its code in brackets; anything else is a defect of ours.
 */
export function describeError(error: unknown): string {
  if (isStConvertError(error)) return `${error.message} [${error.code}]`;
  return `internal error: ${error instanceof Error ? error.message : String(error)} (please report this)`;
}
