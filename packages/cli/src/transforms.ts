/**
 * Cheap rewrites between a reader and a writer: keep or drop tensors by name, rename them, add or
 * override metadata. They change infos only; tensor bytes stream through untouched.
 */
import {
  type CastRule,
  type Metadata,
  StConvertError,
  type TensorEntry,
  type TensorSource,
  castTarget,
  castTensor,
  createMetadata,
  formatCastRules,
  parseCastRule,
  quoteName,
} from "@st-convert/core";

/** The metadata key that records the casts a conversion made (unless `recordCast` is false). */
export const CAST_METADATA_KEY = "st_convert.cast";

/**
 * A rename rule: every match of `pattern` in a name is replaced by `replacement` (`$1` refers to
 * groups). A string pattern is a regular expression's source, compiled with the `u` flag.
 */
export interface RenameRule {
  pattern: RegExp | string;
  replacement: string;
}

/** What to change on the way through. Patterns may be `RegExp`s or their sources as strings. */
export interface TransformOptions {
  /** Keep only tensors whose name matches at least one of these (all, when empty or absent). */
  filter?: readonly (RegExp | string)[];
  /** Drop tensors whose name matches any of these (applied after `filter`). */
  exclude?: readonly (RegExp | string)[];
  /** Rules applied in order to each kept name. */
  rename?: readonly RenameRule[];
  /** Metadata entries added to (or replacing those of) the input's metadata. */
  metadata?: Metadata;
  /**
   * Dtype casts, as `--cast` spells them (`F32=BF16`, `BF16`, `norm:F32=F32`) or parsed; matched
   * against the names as read (before `rename`), the last applicable rule deciding.
   */
  cast?: readonly (string | CastRule)[];
  /** Record the casts made in the metadata (`"st_convert.cast": "F32=BF16"`). Default true. */
  recordCast?: boolean;
}

/** {@link TransformOptions} checked and compiled once, for use on every tensor. */
export interface CompiledTransforms {
  readonly filter: readonly RegExp[];
  readonly exclude: readonly RegExp[];
  /** Global copies: String#replace needs the g flag to replace every match. */
  readonly rename: readonly { pattern: RegExp; replacement: string }[];
  readonly metadata: Metadata | undefined;
  readonly cast: readonly CastRule[];
  readonly recordCast: boolean;
}

/**
 * Checks and compiles the options (a library caller may pass strings or values of the wrong type).
 * @throws StConvertError `InvalidOption` for a pattern that is neither a RegExp nor a valid
 *   expression's source, or a rule without a string replacement.
 */
export function compileTransforms(options: TransformOptions): CompiledTransforms {
  const patterns = (list: unknown, option: string): RegExp[] => {
    if (list === undefined) return [];
    if (!Array.isArray(list)) throw new StConvertError("InvalidOption", `${option} must be a list of regular expressions (RegExp or string)`);
    return list.map((p) => toRegExp(p, option));
  };
  const rules = options.rename ?? [];
  if (!Array.isArray(rules)) throw new StConvertError("InvalidOption", "rename must be a list of { pattern, replacement } rules");
  const result: CompiledTransforms = {
    filter: patterns(options.filter, "filter"),
    exclude: patterns(options.exclude, "exclude"),
    rename: rules.map((rule: RenameRule) => {
      if (typeof rule !== "object" || rule === null || typeof rule.replacement !== "string") {
        throw new StConvertError("InvalidOption", "a rename rule is { pattern: RegExp | string, replacement: string }");
      }
      return { pattern: globalCopy(toRegExp(rule.pattern, "rename")), replacement: rule.replacement };
    }),
    metadata: options.metadata,
    cast: castRules(options.cast),
    recordCast: options.recordCast ?? true,
  };
  compiled.add(result);
  return result;
}

function castRules(rules: unknown): CastRule[] {
  if (rules === undefined) return [];
  if (!Array.isArray(rules)) throw new StConvertError("InvalidOption", 'cast must be a list of rules such as "F32=BF16"');
  return rules.map((rule) => (typeof rule === "string" ? parseCastRule(rule) : (rule as CastRule)));
}

function toRegExp(pattern: unknown, option: string): RegExp {
  if (pattern instanceof RegExp) return pattern;
  if (typeof pattern === "string") return parsePattern(pattern, option);
  throw new StConvertError("InvalidOption", `${option}: ${String(pattern)} is neither a RegExp nor a string`);
}

/** True when the filter and exclusions keep the tensor called `name`. */
export function selects(transforms: CompiledTransforms, name: string): boolean {
  if (transforms.filter.length > 0 && !transforms.filter.some((re) => matches(re, name))) return false;
  return !transforms.exclude.some((re) => matches(re, name));
}

/** True when no option would change anything. */
function isIdentity(transforms: CompiledTransforms): boolean {
  return (
    transforms.filter.length === 0 &&
    transforms.exclude.length === 0 &&
    transforms.rename.length === 0 &&
    transforms.cast.length === 0 &&
    Object.keys(transforms.metadata ?? {}).length === 0
  );
}

/**
 * The source with the options applied.
 * @throws StConvertError `InvalidArgument` when renaming makes two tensors share a name;
 *   `InvalidOption` for malformed options (see {@link compileTransforms}).
 */
export function transformTensors(source: TensorSource, options: TransformOptions | CompiledTransforms): TensorSource {
  const transforms = isCompiled(options) ? options : compileTransforms(options);
  if (isIdentity(transforms)) return source;
  const renamedFrom = new Map<string, string>();
  const tensors: TensorEntry[] = [];
  let casts = 0;
  for (const read of source.tensors) {
    if (!selects(transforms, read.name)) continue;
    const to = transforms.cast.length === 0 ? undefined : castTarget(transforms.cast, read.name, read.dtype);
    const entry = to === undefined ? read : castTensor(read, to);
    if (to !== undefined) casts++;
    const name = renamedName(transforms, entry.name);
    const clash = renamedFrom.get(name);
    if (clash !== undefined) {
      throw new StConvertError("InvalidArgument", `--rename maps both ${quoteName(clash)} and ${quoteName(entry.name)} to ${quoteName(name)}`, {
        tensor: entry.name,
      });
    }
    renamedFrom.set(name, entry.name);
    tensors.push(name === entry.name ? entry : renamed(entry, name));
  }
  const extra: [string, string][] = Object.entries(transforms.metadata ?? {});
  if (casts > 0 && transforms.recordCast) extra.push([CAST_METADATA_KEY, formatCastRules(transforms.cast)]);
  const metadata = extra.length === 0 ? source.metadata : createMetadata([...Object.entries(source.metadata ?? {}), ...extra]);
  return { metadata, tensors };
}

/** A tensor's name after the rename rules. */
export function renamedName(transforms: CompiledTransforms, name: string): string {
  return transforms.rename.reduce((n, rule) => n.replace(rule.pattern, rule.replacement), name);
}

function renamed(entry: TensorEntry, name: string): TensorEntry {
  return {
    name,
    dtype: entry.dtype,
    shape: entry.shape,
    byteLength: entry.byteLength,
    chunks: (options) => entry.chunks(options),
    extent: entry.extent === undefined ? undefined : () => entry.extent!(),
    extents: entry.extents === undefined ? undefined : () => entry.extents!(),
  };
}

/** `RegExp#test` without the `lastIndex` state a global regex would carry between calls. */
function matches(re: RegExp, name: string): boolean {
  re.lastIndex = 0;
  return re.test(name);
}

function isCompiled(options: TransformOptions | CompiledTransforms): options is CompiledTransforms {
  return compiled.has(options);
}

/** Results of {@link compileTransforms}, told apart from raw options without a visible marker. */
const compiled = new WeakSet<object>();

function globalCopy(re: RegExp): RegExp {
  return re.global ? re : new RegExp(re.source, `${re.flags}g`);
}

/**
 * Parses the command line's `--rename FROM=TO` (FROM a regular expression, TO a replacement with
 * `$1`…; the first `=` separates them).
 * @throws StConvertError `InvalidOption` for a missing `=` or an invalid expression.
 */
export function parseRenameRule(text: string): RenameRule {
  const at = text.indexOf("=");
  if (at < 0) throw new StConvertError("InvalidOption", `--rename ${JSON.stringify(text)}: expected FROM=TO (FROM a regular expression)`);
  return { pattern: parsePattern(text.slice(0, at), "--rename"), replacement: text.slice(at + 1) };
}

/**
 * A regular expression from the command line.
 * @throws StConvertError `InvalidOption` when it does not compile.
 */
export function parsePattern(text: string, option: string): RegExp {
  try {
    return new RegExp(text, "u");
  } catch (error) {
    throw new StConvertError("InvalidOption", `${option} ${JSON.stringify(text)}: ${(error as Error).message}`);
  }
}

/**
 * Parses `--metadata key=value` entries (the first `=` separates key and value; the value may be empty).
 * @throws StConvertError `InvalidOption` for an entry without `=` or with an empty key.
 */
export function parseMetadataEntries(entries: readonly string[]): Metadata {
  const metadata = createMetadata();
  for (const entry of entries) {
    const at = entry.indexOf("=");
    if (at <= 0) throw new StConvertError("InvalidOption", `--metadata ${JSON.stringify(entry)}: expected KEY=VALUE`);
    metadata[entry.slice(0, at)] = entry.slice(at + 1);
  }
  return metadata;
}
