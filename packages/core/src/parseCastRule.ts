/**
 * Cast rules as the command line spells them (`--cast F32=BF16`, `--cast BF16`,
 * `--cast 'norm:F32=F32'`), the choice of a tensor's target dtype, and the rules' text for the
 * metadata that records a cast.
 */
import { FLOAT_CAST_DTYPES, INTEGER_CAST_DTYPES, isFloatCastDtype, isIntegerCastDtype } from "./castKernels.js";
import { castTensor } from "./castTensor.js";
import { type Dtype, isDtype } from "./dtypes.js";
import { StConvertError } from "./StConvertError.js";
import type { TensorEntry } from "./Tensor.js";

/** One parsed `--cast` rule. */
export interface CastRule {
  /** Tensors whose name it matches (`RegExp#test`, compiled with the `u` flag); undefined: all. */
  readonly pattern: RegExp | undefined;
  /**
   * The dtype it casts from; undefined (a rule written `TO` alone): every float dtype when `to`
   * is a float, every integer dtype but BOOL when `to` is an integer.
   */
  readonly from: Dtype | undefined;
  readonly to: Dtype;
  /** The rule in canonical form (dtypes upper-case); {@link parseCastRule} reads it back. */
  readonly text: string;
}

const CASTABLE = [...FLOAT_CAST_DTYPES, ...INTEGER_CAST_DTYPES].join(", ");

/**
 * Parses `[NAME_REGEX:]FROM=TO` or `[NAME_REGEX:]TO`. Dtype codes are case-insensitive. The last
 * `:` separates the regular expression (which may hold colons: dtype codes never do).
 * `FROM=FROM` is allowed: a later rule keeping some tensors as they are (`norm:F32=F32`).
 * @throws StConvertError `InvalidOption` for a malformed rule, an unknown dtype, a dtype
 *   st-convert does not cast (C64, F4, F6), a cast between a float and an integer dtype (refused:
 *   torch would truncate or round values silently), `BOOL` alone (BOOL needs its source named,
 *   `U8=BOOL`), an empty or invalid regular expression.
 */
export function parseCastRule(text: string): CastRule {
  const where = `--cast ${JSON.stringify(text)}`;
  const colon = text.lastIndexOf(":");
  const spec = text.slice(colon + 1);
  let pattern: RegExp | undefined;
  let patternText = "";
  if (colon >= 0) {
    patternText = text.slice(0, colon);
    if (patternText === "")
      throw new StConvertError("InvalidOption", `${where}: the name pattern before ":" is empty; leave out "NAME_REGEX:" to cast every tensor`);
    try {
      pattern = new RegExp(patternText, "u");
    } catch (error) {
      throw new StConvertError("InvalidOption", `${where}: ${(error as Error).message}`);
    }
  }
  const parts = spec.split("=");
  if (parts.length > 2 || parts.some((p) => p === "")) {
    throw new StConvertError("InvalidOption", `${where}: expected [NAME_REGEX:]FROM=TO or [NAME_REGEX:]TO, with dtypes among ${CASTABLE}`);
  }
  const [to, from] = parts.length === 2 ? [castDtype(parts[1]!, where), castDtype(parts[0]!, where)] : [castDtype(parts[0]!, where), undefined];
  if (from !== undefined && isFloatCastDtype(from) !== isFloatCastDtype(to)) {
    throw new StConvertError(
      "InvalidOption",
      `${where}: st-convert does not cast between float and integer dtypes (${from} to ${to}): the values would be rounded, truncated or wrapped`,
    );
  }
  if (from === undefined && to === "BOOL") {
    throw new StConvertError("InvalidOption", `${where}: name the dtype to cast to BOOL from (U8=BOOL): BOOL alone would cast every integer tensor`);
  }
  const dtypes = from === undefined ? to : `${from}=${to}`;
  return { pattern, from, to, text: pattern === undefined ? dtypes : `${patternText}:${dtypes}` };
}

function castDtype(code: string, where: string): Dtype {
  const upper = code.toUpperCase();
  if (!isDtype(upper)) throw new StConvertError("InvalidOption", `${where}: unknown dtype ${JSON.stringify(code)}; st-convert casts ${CASTABLE}`);
  if (!isFloatCastDtype(upper) && !isIntegerCastDtype(upper)) {
    throw new StConvertError("InvalidOption", `${where}: st-convert does not cast ${upper}; it casts ${CASTABLE}`);
  }
  return upper;
}

/** True when `rule` applies to a tensor of this name and dtype. */
function applies(rule: CastRule, name: string, dtype: Dtype): boolean {
  if (rule.from !== undefined ? rule.from !== dtype : isFloatCastDtype(rule.to) ? !isFloatCastDtype(dtype) : !isIntegerCastDtype(dtype) || dtype === "BOOL") {
    return false;
  }
  if (rule.pattern === undefined) return true;
  rule.pattern.lastIndex = 0;
  return rule.pattern.test(name);
}

/**
 * The dtype a tensor is cast to: the last rule that applies to it decides (so a later
 * `norm:F32=F32` keeps norms in F32 after `F32=BF16`). Undefined when no rule applies or the
 * deciding rule keeps the tensor's dtype.
 */
export function castTarget(rules: readonly CastRule[], name: string, dtype: Dtype): Dtype | undefined {
  for (let k = rules.length - 1; k >= 0; k--) {
    const rule = rules[k]!;
    if (applies(rule, name, dtype)) return rule.to === dtype ? undefined : rule.to;
  }
  return undefined;
}

/**
 * The tensors with the rules applied: each one a rule casts is a {@link castTensor} of it, the
 * others are passed through as they are.
 * @throws StConvertError as {@link castTensor} does.
 */
export function castTensors(tensors: readonly TensorEntry[], rules: readonly CastRule[]): TensorEntry[] {
  return tensors.map((entry) => {
    const to = castTarget(rules, entry.name, entry.dtype);
    return to === undefined ? entry : castTensor(entry, to);
  });
}

/**
 * The rules as one metadata value (`"st_convert.cast": "F32=BF16"`): their canonical texts in
 * order, separated by a space.
 */
export function formatCastRules(rules: readonly CastRule[]): string {
  return rules.map((rule) => rule.text).join(" ");
}
