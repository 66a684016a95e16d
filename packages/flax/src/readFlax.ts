/**
 * Reads flax msgpack checkpoints (`flax.serialization.to_bytes`, `msgpack_serialize`) as named
 * tensors, walking the structure from the source in small windows: ext payloads are located, not
 * loaded, so a file of any size is listed in constant memory and its arrays are read on demand.
 *
 * Spec: flax 0.12.8 `flax/serialization.py` (`_ndarray_to_bytes`, `_msgpack_ext_pack`, `_chunk`,
 * `_unchunk_array_leaves_in_place`, `msgpack_restore`); the msgpack spec for the encoding.
 * `docs/formats.md` §3 records what the reference does, observed.
 */
import {
  type ByteInput,
  type ByteSource,
  type ChunkOptions,
  type CommonErrorCode,
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  type TensorEntry,
  type TensorSource,
  StConvertError,
  dtypeFromNumpyName,
  fileStem,
  quoteName,
  readRange,
  tensorByteLength,
  toByteSource,
  withContext,
} from "@st-convert/core";
import { MsgpackCursor, Tag } from "./MsgpackCursor.js";

/** Codes of flax refusals besides the common ones; the msgpack ones are msgpack-python's words. */
export type FlaxErrorCode =
  | CommonErrorCode
  /** Invalid msgpack: a reserved byte, invalid UTF-8 in a string, a container used as a map key. */
  | "FormatError"
  /** Bytes after the top-level value (msgpack-python: `ExtraData`). */
  | "ExtraData"
  /** An ndarray ext payload that is not `[shape, dtype name, bytes]` as flax writes it. */
  | "InvalidArray"
  /** A `__msgpack_chunked_array__` dict whose shape or chunks do not make one array. */
  | "InvalidChunkedArray"
  /** Two arrays end up with the same name. */
  | "DuplicateKey";

/**
 * Deepest nesting of maps and arrays accepted: msgpack-python's unpacker stack (flax's own reader)
 * refuses 1025 levels, so nothing deeper is a flax checkpoint. It also bounds our explicit stack.
 */
export const MAX_DEPTH = 1024;

/**
 * Most arrays (tensors and chunks) listed from one file: a safetensors header, capped at 100 MB by
 * the reference, holds about this many entries, and the list's memory stays in the hundreds of MB.
 */
export const MAX_ARRAYS = 1_000_000;

/**
 * Longest tensor name, in UTF-16 units. Real names are under a kilobyte; the bound keeps a hostile
 * file's keys from costing more than a few MB per level of nesting.
 */
export const MAX_NAME_LENGTH = 65_536;

/** Most dimensions of an array: numpy's `NPY_MAXDIMS` (64 since numpy 2.0). */
export const MAX_RANK = 64;

/** Skipped leaves reported one by one; the rest are counted in one closing notice. */
export const MAX_WARNINGS = 20;

/** Longest dtype name read (`float8_e4m3fnuz` has 15 bytes); longer ones are no numpy dtype name. */
const MAX_DTYPE_NAME_BYTES = 64;

/** The key flax puts in a dict that holds one array in chunks (`_chunk` in `serialization.py`). */
export const CHUNKED_ARRAY_MARKER = "__msgpack_chunked_array__";

/** Options of {@link readFlax}. */
export interface FlaxReadOptions {
  /** Joins the keys of the tree into tensor names. Default `"."` (`params.Dense_0.kernel`). */
  sep?: string;
  /**
   * Keep leaves that are Python numbers or bools as 0-d tensors (int → I64, or U64 past 2^63 − 1;
   * float → F64; bool → BOOL) instead of skipping them. Default false.
   */
  keepScalars?: boolean;
  /** Receives notices of skipped leaves and names that cannot be split back. */
  onWarning?: (message: string) => void;
  /**
   * Name of the tensor when the file's top-level value is itself an array (`msgpack_serialize(x)`
   * of a bare array). Default: the source's file name without directory and extension, else `"tensor"`.
   */
  rootName?: string;
  /** Default {@link MAX_DEPTH}. */
  maxDepth?: number;
  /** Default {@link MAX_ARRAYS}. */
  maxArrays?: number;
  /** Default {@link MAX_NAME_LENGTH}. */
  maxNameLength?: number;
  /** Default {@link MAX_WARNINGS}. */
  maxWarnings?: number;
}

/** One array of a flax file, with where its bytes are. */
export interface FlaxTensor extends TensorEntry {
  /**
   * `[offset, length]` of the raw bytes in the file: one range, or one per chunk of a chunked
   * array (none for a Python number kept with `keepScalars`, whose bytes are made in memory).
   */
  readonly ranges: readonly (readonly [number, number])[];
}

/** A flax checkpoint whose arrays have been located but not read. */
export interface FlaxFile extends TensorSource {
  readonly format: "flax";
  /** Always null: flax msgpack has no place for metadata. */
  readonly metadata: null;
  /** Arrays in the order of the file. */
  readonly tensors: readonly FlaxTensor[];
  /** Leaves that were skipped because they are not arrays (strings, None, numbers without `keepScalars`…). */
  readonly skipped: number;
}

/** An ndarray ext payload, located. */
interface ArrayRef {
  readonly dtype: Dtype;
  readonly shape: number[];
  readonly offset: number;
  readonly byteLength: number;
}

/** A tensor found during the walk; `bad` names a non-string key on its path (checked at the end). */
interface Found {
  readonly tensor: FlaxTensor;
  readonly bad: string | undefined;
  readonly sepInKey: boolean;
}

/** Where a value sits in the tree. */
interface Slot {
  /** Joined name of the value. */
  readonly name: string;
  /** A non-string key on the path, described, if any. */
  readonly bad: string | undefined;
  readonly sepInKey: boolean;
  /** The map the value belongs to, with its key, if the key is a string. */
  readonly parent: Frame | undefined;
  readonly key: string | undefined;
}

/**
 * The entries of a `shape` or `chunks` dict inside a dict that may turn out to be a chunked array
 * (its marker key may come last). `bad` describes the first entry flax could not use; entries
 * after it are not kept, so the record stays as small as the arrays it points to.
 */
interface Parts {
  readonly values: Map<string, number | ArrayRef>;
  bad: string | undefined;
}

interface Frame {
  readonly kind: typeof Tag.Map | typeof Tag.Array;
  /** Entries (maps) or items (arrays) still to read. */
  remaining: number;
  /** `slot.parent` is undefined for the top-level value, whose children are named by their key alone. */
  readonly slot: Slot;
  /** This container and all above it are maps: flax unchunks a marked dict only there. */
  readonly dicts: boolean;
  /** This map is the value of `shape` or `chunks` in a dict that may be a chunked array. */
  readonly role: "shape" | "chunks" | undefined;
  index: number;
  /** Map: the key whose value comes next, or null while a key is expected. */
  key: { text: string; bad: string | undefined; sepInKey: boolean } | null;
  marker: boolean;
  shape: Parts | "other" | undefined;
  chunks: Parts | "other" | undefined;
  /** Set on the map that is the value of `shape`/`chunks`: what its entries hold. */
  parts: Parts | undefined;
  /** Lengths of the found and warning lists when this map began: a chunked array rolls them back. */
  readonly foundMark: number;
  readonly warningMark: number;
  readonly skippedMark: number;
}

/**
 * Lists the arrays of a flax msgpack file: nested maps become names joined with `sep`, list items
 * give their index as a segment, ext 1 (ndarray) and ext 3 (numpy scalar) leaves become tensors,
 * chunked arrays become one tensor. Leaves that are not arrays are skipped and reported through
 * `onWarning` (Python complex included: complex128 has no safetensors dtype). Nothing of the
 * arrays' bytes is read here; `chunks()` reads them later.
 *
 * @throws StConvertError `UnexpectedEof` (truncated, or a declared length past the end),
 *   `ExtraData`, `FormatError`, `InvalidArray`, `ByteLengthMismatch` (payload bytes ≠ shape ×
 *   itemsize), `UnknownDtype` (a dtype without a safetensors equivalent: complex128, int4, …),
 *   `InvalidChunkedArray`, `InvalidName` (a non-string key on an array's path), `DuplicateKey`,
 *   `LimitExceeded` (depth, arrays, name length), `Unsupported` (a dimension past 2^53),
 *   `InvalidArgument` (an empty `sep`).
 */
export async function readFlax(input: ByteInput, options: FlaxReadOptions = {}): Promise<FlaxFile> {
  const source = toByteSource(input);
  try {
    return await new FlaxWalker(source, options).walk();
  } catch (error) {
    throw withContext(error, { file: source.name });
  }
}

class FlaxWalker {
  readonly #source: ByteSource;
  readonly #cursor: MsgpackCursor;
  readonly #sep: string;
  readonly #keepScalars: boolean;
  readonly #rootName: string;
  readonly #maxDepth: number;
  readonly #maxArrays: number;
  readonly #maxNameLength: number;
  readonly #maxWarnings: number;
  readonly #onWarning: ((message: string) => void) | undefined;
  readonly #found: Found[] = [];
  readonly #warnings: string[] = [];
  #skipped = 0;
  #arrays = 0;
  readonly #stack: Frame[] = [];

  constructor(source: ByteSource, options: FlaxReadOptions) {
    this.#source = source;
    this.#cursor = new MsgpackCursor(source);
    this.#sep = options.sep ?? ".";
    if (typeof this.#sep !== "string" || this.#sep === "") {
      throw new StConvertError("InvalidArgument", "the name separator must be a non-empty string");
    }
    this.#keepScalars = options.keepScalars ?? false;
    this.#rootName = options.rootName ?? fileStem(source.name) ?? "tensor";
    this.#maxDepth = options.maxDepth ?? MAX_DEPTH;
    this.#maxArrays = options.maxArrays ?? MAX_ARRAYS;
    this.#maxNameLength = options.maxNameLength ?? MAX_NAME_LENGTH;
    this.#maxWarnings = options.maxWarnings ?? MAX_WARNINGS;
    this.#onWarning = options.onWarning;
  }

  async walk(): Promise<FlaxFile> {
    const cursor = this.#cursor;
    await this.#value({ name: this.#rootName, bad: undefined, sepInKey: false, parent: undefined, key: undefined });
    // An explicit stack, not recursion: nesting is bounded by maxDepth, never by the JS call stack.
    while (this.#stack.length > 0) {
      const frame = this.#stack[this.#stack.length - 1]!;
      // `key` is null in an array, and in a map until its next key is read.
      if (frame.key === null && frame.remaining === 0) {
        this.#close(frame);
        continue;
      }
      if (frame.kind === Tag.Map && frame.key === null) {
        await this.#readKey(frame);
        continue;
      }
      frame.remaining--;
      const key = frame.key;
      frame.key = null;
      const text = key === null ? String(frame.index++) : key.text;
      await this.#value({
        name: frame.slot.parent === undefined ? text : `${frame.slot.name}${this.#sep}${text}`,
        bad: frame.slot.bad ?? key?.bad,
        sepInKey: frame.slot.sepInKey || key?.sepInKey === true,
        parent: frame,
        key: key !== null && key.bad === undefined ? key.text : undefined,
      });
    }
    if (cursor.position !== this.#source.size) {
      throw new StConvertError("ExtraData", `extra data: the top-level value ends at byte ${cursor.position} of a ${this.#source.size}-byte file`);
    }
    return this.#finish();
  }

  async #readKey(frame: Frame): Promise<void> {
    const cursor = this.#cursor;
    const tag = await cursor.next();
    if (tag === Tag.Str) {
      if (cursor.length > 3 * this.#maxNameLength) {
        throw new StConvertError(
          "LimitExceeded",
          `a map key of ${cursor.length} bytes at byte ${cursor.headerAt} is longer than the name limit of ${this.#maxNameLength}`,
        );
      }
      const text = await cursor.string(cursor.length);
      if (text === CHUNKED_ARRAY_MARKER && frame.dicts) frame.marker = true;
      frame.key = { text, bad: undefined, sepInKey: text.includes(this.#sep) };
      return;
    }
    let description: string;
    switch (tag) {
      case Tag.Int:
        description = `the integer key ${cursor.int}`;
        break;
      case Tag.Float:
        description = `the float key ${cursor.float}`;
        break;
      case Tag.Bool:
        description = `the key ${cursor.bool ? "True" : "False"}`;
        break;
      case Tag.Nil:
        description = "the key None";
        break;
      case Tag.Bin:
        cursor.skip(cursor.length);
        description = "a bytes key";
        break;
      default:
        // Python cannot hash a dict or list; an ext key would be an ndarray, unhashable too.
        throw new StConvertError("FormatError", `invalid map key at byte ${cursor.headerAt}: a ${tag === Tag.Ext ? "ext value" : "container"} cannot be a key`);
    }
    frame.key = { text: `[${description}]`, bad: description, sepInKey: false };
  }

  /** Reads one value into `slot`: opens a container, or handles a leaf. */
  async #value(slot: Slot): Promise<void> {
    const cursor = this.#cursor;
    const tag = await cursor.next();
    const parent = slot.parent;
    // `dicts` is only ever true on a map.
    const roleInParent = parent?.dicts === true && (slot.key === "shape" || slot.key === "chunks") ? slot.key : undefined;
    if (roleInParent !== undefined && tag !== Tag.Map) parent![roleInParent] = "other";

    if (tag === Tag.Map || tag === Tag.Array) {
      if (this.#stack.length + 1 > this.#maxDepth) {
        throw new StConvertError(
          "LimitExceeded",
          `nesting deeper than ${this.#maxDepth} maps and arrays at byte ${cursor.headerAt} (msgpack-python raises StackError past 1024)`,
        );
      }
      this.#checkNameLength(slot.name);
      const dicts = tag === Tag.Map && (parent === undefined || parent.dicts);
      const role = tag === Tag.Map ? roleInParent : undefined;
      this.#stack.push({
        kind: tag,
        remaining: cursor.length,
        slot,
        dicts,
        role,
        index: 0,
        key: null,
        marker: false,
        shape: undefined,
        chunks: undefined,
        parts: role === undefined ? undefined : { values: new Map(), bad: undefined },
        foundMark: this.#found.length,
        warningMark: this.#warnings.length,
        skippedMark: this.#skipped,
      });
      this.#part(slot, "a dict or list");
      return;
    }

    switch (tag) {
      case Tag.Ext: {
        const type = cursor.extType;
        if (type === 1 || type === 3) {
          const ref = await this.#readArray(cursor.length, slot.name);
          this.#part(slot, parent?.role === "chunks" ? ref : "an ndarray");
          this.#add(slot, ref.dtype, ref.shape, [[ref.offset, ref.byteLength]]);
          return;
        }
        cursor.skip(cursor.length);
        this.#part(slot, `an ext value of type ${type}`);
        this.#skip(slot, type === 2 ? "a Python complex (complex128 has no safetensors dtype)" : `an ext value of type ${type}, which flax does not write`);
        return;
      }
      case Tag.Int: {
        const int = cursor.int;
        this.#part(slot, parent?.role === "shape" && typeof int === "number" && int >= 0 ? int : `the integer ${int}`);
        if (this.#keepScalars) {
          const bytes = new Uint8Array(8);
          const big = BigInt(int);
          const signed = big < 1n << 63n;
          if (signed) new DataView(bytes.buffer).setBigInt64(0, big, true);
          else new DataView(bytes.buffer).setBigUint64(0, big, true);
          this.#addScalar(slot, signed ? "I64" : "U64", bytes);
        } else {
          this.#skip(slot, `a Python int (${int})`);
        }
        return;
      }
      case Tag.Float: {
        this.#part(slot, "a float");
        if (this.#keepScalars) {
          const bytes = new Uint8Array(8);
          new DataView(bytes.buffer).setFloat64(0, cursor.float, true);
          this.#addScalar(slot, "F64", bytes);
        } else {
          this.#skip(slot, `a Python float (${cursor.float})`);
        }
        return;
      }
      case Tag.Bool:
        this.#part(slot, "a bool");
        if (this.#keepScalars) this.#addScalar(slot, "BOOL", Uint8Array.of(cursor.bool ? 1 : 0));
        else this.#skip(slot, `a bool (${cursor.bool ? "True" : "False"})`);
        return;
      case Tag.Nil:
        this.#part(slot, "None");
        this.#skip(slot, "None");
        return;
      case Tag.Str:
        this.#part(slot, "a string");
        await cursor.checkUtf8(cursor.length);
        this.#skip(slot, "a string");
        return;
      case Tag.Bin:
        this.#part(slot, "bytes");
        cursor.skip(cursor.length);
        this.#skip(slot, "bytes");
        return;
    }
  }

  /**
   * Records a value of a `shape` or `chunks` dict: a dimension, a chunk, or (a string) the
   * description of something flax could not use there.
   */
  #part(slot: Slot, value: number | ArrayRef | string): void {
    const parts = slot.parent?.parts;
    if (parts === undefined || parts.bad !== undefined) return;
    if (slot.key === undefined) parts.bad = `a non-string key holds ${typeof value === "string" ? value : "a value"}`;
    else if (typeof value === "string") parts.bad = `"${slot.key}" is ${value}`;
    else if (parts.values.size > MAX_RANK && slot.parent!.role === "shape") parts.bad = `it has more than ${MAX_RANK} entries`;
    else parts.values.set(slot.key, value);
  }

  /**
   * Locates an ndarray payload `[shape, dtype name, bytes]` (`_ndarray_to_bytes`) at the cursor
   * and moves past it.
   */
  async #readArray(payloadLength: number, name: string): Promise<ArrayRef> {
    this.#countArray(name);
    const cursor = this.#cursor;
    try {
      return await cursor.within(cursor.position + payloadLength, "InvalidArray", () => this.#arrayPayload(payloadLength, name));
    } catch (error) {
      throw withContext(error, { tensor: name });
    }
  }

  /**
   * Runs inside `cursor.within`: a container count or a str/bin length past the payload's end is
   * refused by the cursor itself (`InvalidArray`), so only the int headers of the shape can overrun.
   */
  async #arrayPayload(payloadLength: number, name: string): Promise<ArrayRef> {
    const cursor = this.#cursor;
    const end = cursor.position + payloadLength;
    const at = cursor.headerAt;
    const fail = (code: string, rule: string): never => {
      throw new StConvertError(code, `${rule} (the ndarray at byte ${at})`, { tensor: name });
    };
    if (payloadLength === 0 || (await cursor.next()) !== Tag.Array || cursor.length !== 3) {
      fail("InvalidArray", "the payload is not the msgpack array [shape, dtype name, bytes]");
    }
    if ((await cursor.next()) !== Tag.Array) fail("InvalidArray", "the shape is not an array of integers");
    const rank = cursor.length;
    if (rank > MAX_RANK) fail("InvalidArray", `the shape has ${rank} dimensions; numpy allows at most ${MAX_RANK}`);
    const shape: number[] = [];
    for (let i = 0; i < rank; i++) {
      if ((await cursor.next()) !== Tag.Int) fail("InvalidArray", "the shape is not an array of integers");
      const dim = cursor.int;
      if (dim < 0) fail("InvalidArray", `the shape has the negative dimension ${dim}`);
      if (typeof dim === "bigint") fail("Unsupported", `the dimension ${dim} is past 2^53 - 1, the largest integer st-convert handles exactly`);
      shape.push(dim as number);
    }
    if (cursor.position > end) fail("InvalidArray", "the payload is shorter than the values it declares");
    const nameTag = await cursor.next();
    // The reference unpacks the payload with raw=True, so the dtype name may be a str or a bin.
    if (nameTag !== Tag.Str && nameTag !== Tag.Bin) fail("InvalidArray", "the dtype name is not a string");
    if (cursor.length > MAX_DTYPE_NAME_BYTES) fail("UnknownDtype", `a dtype name of ${cursor.length} bytes is no numpy dtype name`);
    const dtypeName = await cursor.string(cursor.length);
    const info = dtypeFromNumpyName(dtypeName);
    if (info === undefined) {
      fail("UnknownDtype", `the dtype ${JSON.stringify(dtypeName)} has no safetensors equivalent${dtypeHint(dtypeName)}`);
    }
    if ((await cursor.next()) !== Tag.Bin) fail("InvalidArray", "the array bytes are not a msgpack bin");
    const offset = cursor.position;
    const byteLength = cursor.length;
    if (offset + byteLength !== end) fail("InvalidArray", `${end - offset - byteLength} bytes follow the array bytes inside the payload`);
    // Its errors are named by #readArray.
    const expected = tensorByteLength(info!.code, shape);
    if (expected !== byteLength) {
      fail("ByteLengthMismatch", `${info!.numpyName} shape [${shape.join(", ")}] needs ${expected} bytes, the payload holds ${byteLength}`);
    }
    cursor.skip(byteLength);
    return { dtype: info!.code, shape, offset, byteLength };
  }

  #checkNameLength(name: string): void {
    if (name.length > this.#maxNameLength) {
      throw new StConvertError("LimitExceeded", `a name of ${name.length} characters exceeds the limit of ${this.#maxNameLength}`);
    }
  }

  #countArray(name: string): void {
    if (++this.#arrays > this.#maxArrays) {
      throw new StConvertError("LimitExceeded", `more than ${this.#maxArrays} arrays in one file`, { tensor: name });
    }
  }

  #add(slot: Slot, dtype: Dtype, shape: readonly number[], ranges: readonly (readonly [number, number])[]): void {
    this.#checkNameLength(slot.name);
    this.#found.push({ tensor: sourceTensor(this.#source, slot.name, dtype, shape, ranges), bad: slot.bad, sepInKey: slot.sepInKey });
  }

  #addScalar(slot: Slot, dtype: Dtype, bytes: Uint8Array): void {
    this.#checkNameLength(slot.name);
    this.#countArray(slot.name);
    const tensor: FlaxTensor = {
      name: slot.name,
      dtype,
      shape: [],
      byteLength: bytes.byteLength,
      ranges: [],
      async *chunks() {
        yield bytes;
      },
    };
    this.#found.push({ tensor, bad: slot.bad, sepInKey: slot.sepInKey });
  }

  #skip(slot: Slot, what: string): void {
    this.#skipped++;
    if (this.#warnings.length < this.#maxWarnings) this.#warnings.push(`skipped ${quoteName(slot.name)}: ${what} is not an array`);
  }

  #close(frame: Frame): void {
    this.#stack.pop();
    const parent = frame.slot.parent;
    if (frame.role !== undefined && parent !== undefined) parent[frame.role] = frame.parts;
    if (!frame.marker) return;
    // flax's `_unchunk_array_leaves_in_place`: the dict stands for one array. What its values
    // produced while it was read (the chunks as 1-d tensors, the marker and dims as leaves) goes.
    this.#found.length = frame.foundMark;
    this.#warnings.length = frame.warningMark;
    this.#skipped = frame.skippedMark;
    const { dtype, shape, ranges } = this.#unchunk(frame);
    this.#add(frame.slot, dtype, shape, ranges);
  }

  #unchunk(frame: Frame): { dtype: Dtype; shape: number[]; ranges: [number, number][] } {
    const name = frame.slot.name;
    const fail = (rule: string): never => {
      throw new StConvertError("InvalidChunkedArray", `chunked array: ${rule}`, { tensor: name });
    };
    const dims = indexed(frame.shape, "shape", fail);
    const parts = indexed(frame.chunks, "chunks", fail);
    const shape = dims.map((dim, i) => (typeof dim === "number" ? dim : fail(`shape["${i}"] is not a non-negative integer`)));
    if (parts.length === 0) fail("there are no chunks (numpy cannot concatenate nothing)");
    let dtype: Dtype | undefined;
    let elements = 0;
    const ranges: [number, number][] = [];
    parts.forEach((part, i) => {
      if (typeof part !== "object") return fail(`chunks["${i}"] is not an ndarray`);
      if (part.shape.length !== 1) return fail(`chunks["${i}"] has shape [${part.shape.join(", ")}]; flax writes 1-d chunks`);
      if (dtype !== undefined && part.dtype !== dtype) return fail(`chunks["${i}"] is ${part.dtype} while chunks["0"] is ${dtype}`);
      dtype = part.dtype;
      elements += part.shape[0]!;
      ranges.push([part.offset, part.byteLength]);
    });
    let needed = 1n;
    for (const dim of shape) needed *= BigInt(dim);
    if (BigInt(elements) !== needed) fail(`the chunks hold ${elements} elements, shape [${shape.join(", ")}] needs ${needed}`);
    return { dtype: dtype!, shape, ranges };
  }

  #finish(): FlaxFile {
    const names = new Set<string>();
    let sepWarned = false;
    const tensors: FlaxTensor[] = [];
    for (const { tensor, bad, sepInKey } of this.#found) {
      if (bad !== undefined) {
        throw new StConvertError("InvalidName", `the path to this array holds ${bad}; tensor names need string keys`, { tensor: tensor.name });
      }
      if (names.has(tensor.name)) {
        throw new StConvertError(
          "DuplicateKey",
          `two arrays have this name (a repeated map key, or a key that holds the separator ${JSON.stringify(this.#sep)}: choose another separator)`,
          { tensor: tensor.name },
        );
      }
      names.add(tensor.name);
      if (sepInKey && !sepWarned) {
        sepWarned = true;
        this.#warn(
          `${quoteName(tensor.name)} has a key that holds the separator ${JSON.stringify(this.#sep)}; written back as flax, such names split into a different tree (choose another separator)`,
        );
      }
      tensors.push(tensor);
    }
    for (const message of this.#warnings) this.#warn(message);
    if (this.#skipped > this.#warnings.length) {
      this.#warn(`skipped ${this.#skipped - this.#warnings.length} more leaves that are not arrays (${this.#skipped} in all)`);
    }
    return { format: "flax", metadata: null, tensors, skipped: this.#skipped };
  }

  #warn(message: string): void {
    this.#onWarning?.(message);
  }
}

/** The values of a `{"0": …, "1": …}` dict in index order, as flax's `_dict_to_tuple` takes them. */
function indexed(parts: Parts | "other" | undefined, what: string, fail: (rule: string) => never): (number | ArrayRef)[] {
  if (parts === undefined) return fail(`the dict has no "${what}" key`);
  if (parts === "other") return fail(`"${what}" is not a dict`);
  if (parts.bad !== undefined) return fail(`in "${what}", ${parts.bad}`);
  const { values } = parts;
  const out: (number | ArrayRef)[] = [];
  for (let i = 0; i < values.size; i++) {
    const value = values.get(String(i));
    if (value === undefined) return fail(`"${what}" has ${values.size} keys but not "${i}" (flax expects "0" to "${values.size - 1}")`);
    out.push(value);
  }
  return out;
}

function dtypeHint(name: string): string {
  if (/^(float4|float6|int4|uint4|int2|uint2)/.test(name)) return " (ml_dtypes keeps one value per byte, safetensors packs them)";
  if (name === "complex128" || name === "float128" || name === "complex256") return " (safetensors has no 128-bit complex or extended float)";
  return "";
}

function sourceTensor(source: ByteSource, name: string, dtype: Dtype, shape: readonly number[], ranges: readonly (readonly [number, number])[]): FlaxTensor {
  const byteLength = ranges.reduce((sum, [, length]) => sum + length, 0);
  return {
    name,
    dtype,
    shape: [...shape],
    byteLength,
    ranges,
    async *chunks({ chunkSize = DEFAULT_CHUNK_SIZE, reuse = false }: ChunkOptions = {}) {
      // Each range has its own buffers, so reuse holds across the switch from one range to the next.
      for (const [offset, length] of ranges) yield* readRange(source, offset, length, { chunkSize, reuse });
    },
  };
}
