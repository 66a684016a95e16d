/**
 * Cheap rewrites between a reader and a writer: keep or drop tensors by name, rename them, add or
 * override metadata. They change infos only; tensor bytes stream through untouched.
 */
import { type Metadata, StConvertError, type TensorEntry, type TensorSource, createMetadata, quoteName } from "@st-convert/core";

/** A rename rule: every match of `pattern` in a name is replaced by `replacement` (`$1` refers to groups). */
export interface RenameRule {
  pattern: RegExp;
  replacement: string;
}

/** What to change on the way through. */
export interface TransformOptions {
  /** Keep only tensors whose name matches at least one of these (all, when empty or absent). */
  filter?: readonly RegExp[];
  /** Drop tensors whose name matches any of these (applied after `filter`). */
  exclude?: readonly RegExp[];
  /** Rules applied in order to each kept name. */
  rename?: readonly RenameRule[];
  /** Metadata entries added to (or replacing those of) the input's metadata. */
  metadata?: Metadata;
}

/** True when no option would change anything. */
export function isIdentity(options: TransformOptions): boolean {
  return (
    (options.filter ?? []).length === 0 &&
    (options.exclude ?? []).length === 0 &&
    (options.rename ?? []).length === 0 &&
    Object.keys(options.metadata ?? {}).length === 0
  );
}

/**
 * The source with the options applied.
 * @throws StConvertError `InvalidArgument` when renaming makes two tensors share a name.
 */
export function transformTensors(source: TensorSource, options: TransformOptions): TensorSource {
  if (isIdentity(options)) return source;
  const filter = options.filter ?? [];
  const exclude = options.exclude ?? [];
  // Global copies made once, not per tensor: String#replace needs the g flag to replace every match.
  const rename = (options.rename ?? []).map((rule) => ({ pattern: globalCopy(rule.pattern), replacement: rule.replacement }));
  const renamedFrom = new Map<string, string>();
  const tensors: TensorEntry[] = [];
  for (const entry of source.tensors) {
    if (filter.length > 0 && !filter.some((re) => matches(re, entry.name))) continue;
    if (exclude.some((re) => matches(re, entry.name))) continue;
    const name = rename.reduce((n, rule) => n.replace(rule.pattern, rule.replacement), entry.name);
    const clash = renamedFrom.get(name);
    if (clash !== undefined) {
      throw new StConvertError("InvalidArgument", `--rename maps both ${quoteName(clash)} and ${quoteName(entry.name)} to ${quoteName(name)}`, {
        tensor: entry.name,
      });
    }
    renamedFrom.set(name, entry.name);
    tensors.push(name === entry.name ? entry : renamed(entry, name));
  }
  const extra = options.metadata ?? {};
  const metadata = Object.keys(extra).length === 0 ? source.metadata : createMetadata([...Object.entries(source.metadata ?? {}), ...Object.entries(extra)]);
  return { metadata, tensors };
}

function renamed(entry: TensorEntry, name: string): TensorEntry {
  return {
    name,
    dtype: entry.dtype,
    shape: entry.shape,
    byteLength: entry.byteLength,
    chunks: (options) => entry.chunks(options),
  };
}

/** `RegExp#test` without the `lastIndex` state a global regex would carry between calls. */
function matches(re: RegExp, name: string): boolean {
  re.lastIndex = 0;
  return re.test(name);
}

function globalCopy(re: RegExp): RegExp {
  return re.global ? re : new RegExp(re.source, `${re.flags}g`);
}

/**
 * Parses the command line's `--rename FROM=TO` (FROM a regular expression, TO a replacement with
 * `$1`…; the first `=` separates them).
 * @throws StConvertError `InvalidArgument` for a missing `=` or an invalid expression.
 */
export function parseRenameRule(text: string): RenameRule {
  const at = text.indexOf("=");
  if (at < 0) throw new StConvertError("InvalidArgument", `--rename ${JSON.stringify(text)}: expected FROM=TO (FROM a regular expression)`);
  return { pattern: parsePattern(text.slice(0, at), "--rename"), replacement: text.slice(at + 1) };
}

/**
 * A regular expression from the command line.
 * @throws StConvertError `InvalidArgument` when it does not compile.
 */
export function parsePattern(text: string, option: string): RegExp {
  try {
    return new RegExp(text, "u");
  } catch (error) {
    throw new StConvertError("InvalidArgument", `${option} ${JSON.stringify(text)}: ${(error as Error).message}`);
  }
}

/**
 * Parses `--metadata key=value` entries (the first `=` separates key and value; the value may be empty).
 * @throws StConvertError `InvalidArgument` for an entry without `=` or with an empty key.
 */
export function parseMetadataEntries(entries: readonly string[]): Metadata {
  const metadata = createMetadata();
  for (const entry of entries) {
    const at = entry.indexOf("=");
    if (at <= 0) throw new StConvertError("InvalidArgument", `--metadata ${JSON.stringify(entry)}: expected KEY=VALUE`);
    metadata[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return metadata;
}
