/**
 * A JSON Schema (2020-12) validator for the keywords schema.json uses, for tests only: no schema
 * library is a dependency. Unknown keywords fail loudly, so the schema cannot outgrow it silently.
 */
type Schema = boolean | { [keyword: string]: unknown };

const KNOWN = new Set([
  "$schema",
  "$id",
  "title",
  "description",
  "$defs",
  "$ref",
  "type",
  "enum",
  "const",
  "properties",
  "additionalProperties",
  "required",
  "items",
  "minItems",
  "maxItems",
  "minimum",
  "maximum",
  "pattern",
  "anyOf",
  "oneOf",
  "allOf",
  "if",
  "then",
  "contentEncoding",
]);

function typeOf(value: unknown): string {
  if (value === null) return "null";
  if (Array.isArray(value)) return "array";
  return typeof value;
}

export function validate(root: Schema, value: unknown): boolean {
  const resolve = (ref: string): Schema => {
    const name = /^#\/\$defs\/(.+)$/.exec(ref)?.[1];
    const found = name === undefined ? undefined : (root as Record<string, Record<string, Schema>>).$defs?.[name];
    if (found === undefined) throw new Error(`unresolved ${ref}`);
    return found;
  };
  const check = (schema: Schema, v: unknown): boolean => {
    if (schema === true) return true;
    if (schema === false) return false;
    for (const keyword of Object.keys(schema)) if (!KNOWN.has(keyword)) throw new Error(`validator does not know ${keyword}`);
    // biome-ignore lint/suspicious/noExplicitAny: a JSON Schema node is any JSON value
    const s = schema as Record<string, any>;
    if (s.$ref !== undefined && !check(resolve(s.$ref), v)) return false;
    if (s.type !== undefined) {
      const t = typeOf(v);
      const ok = s.type === t || (s.type === "integer" && t === "number" && Number.isInteger(v)) || (s.type === "number" && t === "number");
      if (!ok) return false;
    }
    if (s.enum !== undefined && !s.enum.includes(v)) return false;
    if (s.const !== undefined && s.const !== v) return false;
    if (typeOf(v) === "object") {
      const obj = v as Record<string, unknown>;
      for (const key of s.required ?? []) if (!(key in obj)) return false;
      for (const [key, item] of Object.entries(obj)) {
        const sub = s.properties?.[key];
        if (sub !== undefined) {
          if (!check(sub, item)) return false;
        } else if (s.additionalProperties !== undefined && !check(s.additionalProperties, item)) return false;
      }
    }
    if (Array.isArray(v)) {
      if (s.items !== undefined && !v.every((item) => check(s.items, item))) return false;
      if (s.minItems !== undefined && v.length < s.minItems) return false;
      if (s.maxItems !== undefined && v.length > s.maxItems) return false;
    }
    if (typeof v === "number") {
      if (s.minimum !== undefined && v < s.minimum) return false;
      if (s.maximum !== undefined && v > s.maximum) return false;
    }
    if (typeof v === "string" && s.pattern !== undefined && !new RegExp(s.pattern, "u").test(v)) return false;
    if (s.anyOf !== undefined && !s.anyOf.some((sub: Schema) => check(sub, v))) return false;
    if (s.oneOf !== undefined && s.oneOf.filter((sub: Schema) => check(sub, v)).length !== 1) return false;
    if (s.allOf !== undefined && !s.allOf.every((sub: Schema) => check(sub, v))) return false;
    if (s.if !== undefined && check(s.if, v) && s.then !== undefined && !check(s.then, v)) return false;
    return true;
  };
  return check(root, value);
}
