/**
 * Reads flax msgpack checkpoints (`flax.serialization.to_bytes`, `msgpack_serialize`) as named
 * tensors, walking the structure from the source in small windows: ext payloads are located, not
 * loaded, so a file of any size is listed in constant memory and its arrays are read on demand.
 * What the tensors cannot say (values that are not arrays, empty containers, lists, numpy scalars,
 * key order) is recorded in the metadata under `flax.tree` (see `FlaxTree.ts`), from which the
 * writer rebuilds the file.
 *
 * Spec: flax 0.12.8 `flax/serialization.py` (`_ndarray_to_bytes`, `_msgpack_ext_pack`,
 * `_msgpack_ext_unpack`, `_chunk`, `_unchunk_array_leaves_in_place`, `msgpack_restore`);
 * msgpack-python 1.x `unpackb` and `Timestamp`; the msgpack spec for the encoding.
 * `docs/formats.md` §3 records what the reference does, observed.
 */
import {
  type ByteInput,
  type ByteSource,
  type ChunkOptions,
  type CommonErrorCode,
  DEFAULT_CHUNK_SIZE,
  type Dtype,
  type Metadata,
  type TensorEntry,
  type TensorExtent,
  type TensorSource,
  StConvertError,
  compareCodePoints,
  createMetadata,
  dtypeFromNumpyName,
  dtypeInfo,
  fileStem,
  isStConvertError,
  quoteName,
  readRange,
  tensorByteLength,
  toByteSource,
  withContext,
} from "@st-convert/core";
import {
  CHUNKED_ARRAY_MARKER,
  FLAX_TREE_KEY,
  FLAX_TREE_VERSION,
  type FlaxValue,
  MAX_CHUNK_SIZE,
  floatJson,
  intJson,
  keyIdentity,
  timestampFault,
  timestampLengthFault,
  toHex,
} from "./FlaxTree.js";
import { MsgpackCursor, Tag } from "./MsgpackCursor.js";

/** Codes of flax refusals besides the common ones; the msgpack ones are msgpack-python's words. */
export type FlaxErrorCode =
  | CommonErrorCode
  /** Invalid msgpack: a reserved byte, invalid UTF-8 in a string, a container or an ndarray used as a map key. */
  | "FormatError"
  /** Bytes after the top-level value (msgpack-python: `ExtraData`). */
  | "ExtraData"
  /** An ndarray ext payload that is not `[shape, dtype name, bytes]` as flax writes it, or an array numpy cannot make. */
  | "InvalidArray"
  /** A `__msgpack_chunked_array__` dict whose shape or chunks do not make one array. */
  | "InvalidChunkedArray"
  /** Another ext value `msgpack_restore` cannot decode: a bad timestamp or complex, a negative type. */
  | "InvalidExt"
  /** A map repeats a key, or two arrays end up with the same name. */
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

/**
 * Most entries in one map. Its keys are kept while it is read, to refuse a repeated one: this
 * bounds their memory to about 200 MB. flax's dicts hold a few thousand keys; a flat state dict
 * about as many as {@link MAX_ARRAYS}.
 */
export const MAX_MAP_ENTRIES = 4_194_304;

/**
 * Largest `flax.tree` record (JSON characters) for the values that are not arrays: it bounds the
 * memory they take while the file is walked; real checkpoints need a few hundred bytes.
 */
export const MAX_TREE_BYTES = 16 * 1024 * 1024;

/**
 * Largest record that also gives every array's place (the key order). Past it only what the
 * names cannot say is kept (flax restores by key, so `from_bytes` does not need the order): an
 * npz archive comment, where the record travels through `.npz`, holds 65,535 bytes in all.
 */
export const MAX_ORDERED_TREE_BYTES = 32 * 1024;

/** Longest dtype name read (`float8_e4m3fnuz` has 15 bytes); longer ones are no numpy dtype name. */
const MAX_DTYPE_NAME_BYTES = 64;

/**
 * Arrays up to this many bytes are copied while the walk has them in its window: a file read
 * per tiny tensor (an optimizer's counters, biases) costs far more than the copy.
 */
const INLINE_ARRAY_BYTES = 4096;

/** Most bytes copied that way from one file: bounds the memory the copies take. */
const MAX_INLINE_BYTES = 16 * 1024 * 1024;

/** Memory the copies are cut from, a block at a time, so that each costs no allocation of its own. */
const INLINE_SLAB_BYTES = 64 * 1024;

/**
 * The longest head an ndarray payload can have before its bytes: an array32 of 3, a shape of
 * MAX_RANK uint64 dims, a str32 dtype name of MAX_DTYPE_NAME_BYTES, a bin32 header (5 + 5 + 64 × 9
 * + 5 + 64 + 5 bytes), rounded up. The window is filled with this much before the head is parsed.
 */
const MAX_ARRAY_HEAD = 1024;

/** msgpack-python's nested `unpackb` of a complex payload stops at this depth, as the outer one does. */
const MAX_COMPLEX_DEPTH = 1024;

/** numpy refuses an array whose non-zero dimensions times its itemsize pass `NPY_MAX_INTP`. */
const NPY_MAX_INTP = 2n ** 63n - 1n;

export { CHUNKED_ARRAY_MARKER };

/** Options of {@link readFlax}. */
export interface FlaxReadOptions {
  /** Joins the keys of the tree into tensor names. Default `"."` (`params.Dense_0.kernel`). */
  sep?: string;
  /**
   * Also list leaves that are Python numbers or bools as 0-d tensors (int → I64, or U64 past
   * 2^63 − 1; float → F64; bool → BOOL). The tree records them either way; written back as flax
   * they are Python numbers again. Default false.
   */
  keepScalars?: boolean;
  /** Receives notices of leaves that could not be recorded and names that cannot be split back. */
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
  /** Default {@link MAX_MAP_ENTRIES}. */
  maxMapEntries?: number;
  /** Default {@link MAX_TREE_BYTES}. */
  maxTreeBytes?: number;
  /** Default {@link MAX_ORDERED_TREE_BYTES}. */
  maxOrderedTreeBytes?: number;
  /**
   * The arrays the caller keeps (the CLI's `--filter`/`--exclude`), by name: an array whose dtype
   * has no safetensors equivalent (complex128, …) and whose name this refuses is left out instead
   * of refusing the file. Its payload is still checked as far as its dtype name. Default: every array.
   */
  include?: (name: string) => boolean;
}

/** One array of a flax file, with where its bytes are. */
export interface FlaxTensor extends TensorEntry {
  /**
   * `[offset, length]` of the raw bytes in the file: one range, or one per chunk of a chunked
   * array (none for a value made in memory: a Python number kept with `keepScalars`, a numpy bool
   * scalar whose byte was neither 0 nor 1, normalised to 1 as flax restores it).
   */
  readonly ranges: readonly (readonly [number, number])[];
}

/** A flax checkpoint whose arrays have been located but not read. */
export interface FlaxFile extends TensorSource {
  readonly format: "flax";
  /**
   * `{"flax.tree": record}` when the tree holds more than the tensor names say (values that are
   * not arrays, empty dicts, lists, numpy scalars, key order), else null.
   */
  readonly metadata: Metadata | null;
  /** Arrays in the order of the file. */
  readonly tensors: readonly FlaxTensor[];
  /** Leaves that are not tensors (strings, None, numbers without `keepScalars`…). */
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

/** A map key as read. */
interface Key {
  readonly text: string;
  /** A non-string key, described. */
  readonly bad: string | undefined;
  readonly sepInKey: boolean;
  /** The key as the record writes it. */
  readonly json: unknown;
}

/** Where a value sits in the tree. */
interface Slot {
  /** Joined name of the value. */
  readonly name: string;
  /** A non-string key on the path, described, if any. */
  readonly bad: string | undefined;
  readonly sepInKey: boolean;
  /** The container the value belongs to (undefined for the top-level value). */
  readonly parent: Frame | undefined;
  /** The key, if the parent is a map and the key a string. */
  readonly key: string | undefined;
  /** The key as the record writes it (a map's value). */
  readonly keyJson: unknown;
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
  /** Byte offset of the container's header, for messages. */
  readonly at: number;
  /** Entries (maps) or items (arrays) still to read. */
  remaining: number;
  readonly count: number;
  readonly slot: Slot;
  /** This container and all above it are maps: flax unchunks a marked dict only there. */
  readonly dicts: boolean;
  /** This map is the value of `shape` or `chunks` in a dict that may be a chunked array. */
  readonly role: "shape" | "chunks" | undefined;
  index: number;
  /** Map: the key whose value comes next, or null while a key is expected. */
  key: Key | null;
  /** String keys read so far: a list while they come in code-point order, then a set; a repeated key is refused. */
  keys: string[] | Set<string>;
  /** Identities of the keys that are not strings (`1`, `True` and `1.0` are one key in Python). */
  otherKeys: Set<string> | undefined;
  /** The last string key, to tell whether the keys come in code-point order. */
  lastKey: string | undefined;
  unsorted: boolean;
  marker: boolean;
  shape: Parts | "other" | undefined;
  chunks: Parts | "other" | undefined;
  /** Set on the map that is the value of `shape`/`chunks`: what its entries hold. */
  parts: Parts | undefined;
  /** The record of what the names cannot say: `[key, node, …]` for a map, every item for a list. */
  readonly rec: unknown[];
  /** Something below must be recorded even when the key order is not. */
  essential: boolean;
  /** Values of this container begun in the complete record (for its commas). */
  written: number;
  /** Lengths of the found and warning lists, and of the records, when this container began: a chunked array rolls them back. */
  readonly foundMark: number;
  readonly warningMark: number;
  readonly skippedMark: number;
  readonly fullMark: number;
  readonly fullBytesMark: number;
  readonly recordMark: number;
  readonly unsortedMark: number;
}

/**
 * Lists the arrays of a flax msgpack file: nested maps become names joined with `sep`, list items
 * give their index as a segment, ext 1 (ndarray) and ext 3 (numpy scalar) leaves become tensors,
 * chunked arrays become one tensor. Everything else (Python numbers, strings, None, bytes,
 * complex numbers, empty dicts and lists, other ext values) is recorded with the tree's shape in
 * `metadata["flax.tree"]` when the tree needs it, so that writing back as flax gives the same
 * tree. Nothing of the arrays' bytes is read here except small ones; `chunks()` reads the rest.
 *
 * @throws StConvertError `UnexpectedEof` (truncated, or a declared length past the end),
 *   `ExtraData`, `FormatError`, `InvalidArray` (also an array numpy finds too big),
 *   `ByteLengthMismatch` (payload bytes ≠ shape × itemsize), `UnknownDtype` (a dtype without a
 *   safetensors equivalent: complex128, int4, …), `InvalidChunkedArray`, `InvalidExt` (a
 *   timestamp, complex or ext type msgpack_restore refuses), `InvalidName` (a non-string key on
 *   an array's path), `DuplicateKey` (a repeated key, or two arrays of one name), `LimitExceeded`
 *   (depth, arrays, name length), `Unsupported` (a dimension past 2^53), `InvalidArgument` (an
 *   empty `sep`).
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
  readonly #maxMapEntries: number;
  readonly #maxTreeBytes: number;
  readonly #maxOrderedTreeBytes: number;
  readonly #onWarning: ((message: string) => void) | undefined;
  readonly #include: ((name: string) => boolean) | undefined;
  readonly #found: Found[] = [];
  /** Notices of skipped leaves: given only when the tree cannot be recorded. */
  readonly #warnings: string[] = [];
  #skipped = 0;
  #arrays = 0;
  readonly #stack: Frame[] = [];

  /** The complete record (JSON text in pieces), until it passes its bound. */
  #full: string[] | null = [];
  #fullBytes = 0;
  /** False once the record of what the names cannot say passed its bound. */
  #recording = true;
  #recordBytes = 0;
  #recordNotice: string | undefined;
  /** The top-level value's record, and whether the names alone could not rebuild it. */
  #root: { json: unknown; essential: boolean } | undefined;
  /** Maps whose keys are not in code-point order (the writer's order without a record). */
  #unsorted = 0;

  #inlineLeft = MAX_INLINE_BYTES;
  #slab = new Uint8Array(0);
  #slabAt = 0;

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
    this.#maxMapEntries = options.maxMapEntries ?? MAX_MAP_ENTRIES;
    this.#maxTreeBytes = options.maxTreeBytes ?? MAX_TREE_BYTES;
    this.#maxOrderedTreeBytes = options.maxOrderedTreeBytes ?? MAX_ORDERED_TREE_BYTES;
    this.#onWarning = options.onWarning;
    this.#include = options.include;
  }

  async walk(): Promise<FlaxFile> {
    const cursor = this.#cursor;
    const top = this.#value({ name: this.#rootName, bad: undefined, sepInKey: false, parent: undefined, key: undefined, keyJson: undefined });
    if (top !== undefined) await top;
    // An explicit stack, not recursion: nesting is bounded by maxDepth, never by the JS call stack.
    // Values are read synchronously while the window holds them: only a refill is awaited.
    while (this.#stack.length > 0) {
      const frame = this.#stack[this.#stack.length - 1]!;
      // `key` is null in an array, and in a map until its next key is read.
      if (frame.key === null && frame.remaining === 0) {
        this.#close(frame);
        continue;
      }
      if (frame.kind === Tag.Map && frame.key === null) {
        const reading = this.#readKey(frame);
        if (reading !== undefined) await reading;
        continue;
      }
      frame.remaining--;
      const key = frame.key;
      frame.key = null;
      const text = key === null ? String(frame.index++) : key.text;
      const reading = this.#value({
        name: frame.slot.parent === undefined ? text : `${frame.slot.name}${this.#sep}${text}`,
        bad: frame.slot.bad ?? key?.bad,
        sepInKey: frame.slot.sepInKey || key?.sepInKey === true,
        parent: frame,
        key: key !== null && key.bad === undefined ? key.text : undefined,
        keyJson: key?.json,
      });
      if (reading !== undefined) await reading;
    }
    if (cursor.position !== this.#source.size) {
      throw new StConvertError("ExtraData", `extra data: the top-level value ends at byte ${cursor.position} of a ${this.#source.size}-byte file`);
    }
    return this.#finish();
  }

  /** Reads a map's next key into `frame.key`; returns a promise only when the window had to be refilled. */
  #readKey(frame: Frame): Promise<void> | undefined {
    const cursor = this.#cursor;
    const ready = cursor.headerReady();
    if (ready !== undefined) return ready.then(() => this.#readKey(frame));
    const tag = cursor.nextSync();
    if (tag === Tag.Ext) return this.#extKey(frame);
    if (tag === Tag.Str || tag === Tag.Bin) {
      if (cursor.length > 3 * this.#maxNameLength) {
        throw new StConvertError(
          "LimitExceeded",
          `a map key of ${cursor.length} bytes at byte ${cursor.headerAt} is longer than the name limit of ${this.#maxNameLength}`,
        );
      }
      const payload = cursor.ensure(cursor.length);
      if (payload !== undefined) return payload.then(() => this.#keyOf(frame, tag));
    }
    this.#keyOf(frame, tag);
    return undefined;
  }

  /** The key whose header was just read (its payload, if any, in the window). */
  #keyOf(frame: Frame, tag: Tag): void {
    const cursor = this.#cursor;
    if (tag === Tag.Str) {
      const text = cursor.stringSync(cursor.length);
      if (text === CHUNKED_ARRAY_MARKER && frame.dicts) frame.marker = true;
      // While the keys come in code-point order, a new one is past all before it and cannot
      // repeat them: they are only kept in a list. From the first one out of order, each is looked up.
      if (!frame.unsorted && frame.lastKey !== undefined && compareCodePoints(text, frame.lastKey) <= 0) {
        frame.unsorted = true;
        frame.keys = new Set(frame.keys as string[]);
      }
      if (frame.unsorted) {
        const keys = frame.keys as Set<string>;
        this.#checkRepeat(frame, text, keys, text);
        keys.add(text);
      } else {
        (frame.keys as string[]).push(text);
      }
      frame.lastKey = text;
      frame.key = { text, bad: undefined, sepInKey: text.includes(this.#sep), json: text };
      return;
    }
    let value: FlaxValue;
    let json: unknown;
    let description: string;
    switch (tag) {
      case Tag.Int:
        value = { kind: "int", value: BigInt(cursor.int) };
        json = { i: intJson(cursor.int) };
        description = `the integer key ${cursor.int}`;
        break;
      case Tag.Float:
        value = { kind: "float", bits: float64Bits(cursor.float) };
        json = { f: floatJson(value.bits) };
        description = `the float key ${cursor.float}`;
        break;
      case Tag.Bool:
        value = { kind: "bool", value: cursor.bool };
        json = cursor.bool;
        description = `the key ${cursor.bool ? "True" : "False"}`;
        break;
      case Tag.Nil:
        value = { kind: "nil" };
        json = null;
        description = "the key None";
        break;
      case Tag.Bin: {
        const bytes = new Uint8Array(cursor.length);
        cursor.readIntoSync(bytes);
        value = { kind: "bin", value: bytes };
        json = { b: toHex(bytes) };
        description = "a bytes key";
        break;
      }
      default:
        // Python cannot hash a dict or list (msgpack_restore: TypeError).
        throw new StConvertError("FormatError", `invalid map key at byte ${cursor.headerAt}: a container cannot be a key`);
    }
    this.#otherKey(frame, value, json, description);
  }

  /** A key that is not a string: checked for a repeat as Python compares keys, and kept as the key of the next value. */
  #otherKey(frame: Frame, value: FlaxValue, json: unknown, description: string): void {
    const identity = keyIdentity(value);
    if (identity !== undefined) {
      frame.otherKeys ??= new Set();
      this.#checkRepeat(frame, identity, frame.otherKeys, description);
      frame.otherKeys.add(identity);
    }
    frame.key = { text: `[${description}]`, bad: description, sepInKey: false, json };
  }

  /**
   * A key that is an ext value (its header just read). msgpack-python accepts any key Python can
   * hash: a timestamp, a complex, an ext type flax does not know; like the other keys that are
   * not strings, such a key names no tensor. An ndarray cannot be hashed. A numpy scalar is
   * refused on purpose: Python compares it equal to the int, float, str or bytes of its value,
   * by rules that depend on its dtype, so which keys repeat (and so which value flax keeps)
   * would need numpy's equality for every dtype; flax's `to_state_dict` makes every key a string.
   */
  async #extKey(frame: Frame): Promise<void> {
    const cursor = this.#cursor;
    const at = cursor.headerAt;
    const type = cursor.extType;
    const length = cursor.length;
    const tensor = frame.slot.parent === undefined ? undefined : frame.slot.name;
    if (type === 1) {
      throw new StConvertError("FormatError", `invalid map key at byte ${at}: an ndarray (ext 1) cannot be a key, Python cannot hash it`, { tensor });
    }
    if (type === 3) {
      throw new StConvertError(
        "InvalidName",
        `the map key at byte ${at} is a numpy scalar (ext 3), which Python takes for the int, float, str or bytes of its value by its dtype's rules (np.str_('w') is the key 'w', np.int16(1) the key 1); st-convert refuses such keys, as it cannot tell which keys repeat`,
        { tensor },
      );
    }
    if (type < -1) {
      throw new StConvertError(
        "InvalidExt",
        `the ext key at byte ${at} has the type ${type}; msgpack_restore refuses types below 0 other than -1 (a timestamp)`,
        {
          tensor,
        },
      );
    }
    if (length > 3 * this.#maxNameLength) {
      throw new StConvertError("LimitExceeded", `a map key of ${length} bytes at byte ${at} is longer than the name limit of ${this.#maxNameLength}`);
    }
    if (type === 2) {
      const [real, imag] = await this.#readComplex(length, frame.slot.name);
      const parts = `${new DataView(real.buffer).getFloat64(0)}, ${new DataView(imag.buffer).getFloat64(0)}`;
      this.#otherKey(frame, { kind: "complex", real, imag }, { c: [floatJson(real), floatJson(imag)] }, `the complex key complex(${parts})`);
      return;
    }
    const data = await cursor.bytes(length);
    if (type === -1) {
      const fault = timestampFault(data);
      if (fault !== undefined) throw new StConvertError("InvalidExt", `${fault} at byte ${at}; msgpack_restore refuses it`, { tensor });
    }
    const description = type === -1 ? "a timestamp key" : `an ext key of type ${type}`;
    this.#otherKey(frame, { kind: "ext", code: type, data }, { x: [type, toHex(data)] }, description);
  }

  #checkRepeat(frame: Frame, identity: string, seen: Set<string>, description: string): void {
    if (!seen.has(identity)) return;
    throw new StConvertError(
      "DuplicateKey",
      `the map at byte ${frame.at} repeats the key ${frame.otherKeys === seen ? description : JSON.stringify(description)} (msgpack_restore keeps only the last value, st-convert refuses the file)`,
      { tensor: frame.slot.parent === undefined ? undefined : frame.slot.name },
    );
  }

  /**
   * Reads one value into `slot`: opens a container, or handles a leaf. Synchronous while the
   * window holds what it reads; returns a promise only when it had to wait for the source.
   */
  #value(slot: Slot): Promise<void> | undefined {
    const cursor = this.#cursor;
    const ready = cursor.headerReady();
    if (ready !== undefined) return ready.then(() => this.#value(slot));
    const tag = cursor.nextSync();
    const parent = slot.parent;
    // `dicts` is only ever true on a map.
    const roleInParent = parent?.dicts === true && (slot.key === "shape" || slot.key === "chunks") ? slot.key : undefined;
    if (roleInParent !== undefined && tag !== Tag.Map) parent![roleInParent] = "other";
    this.#begin(slot);

    switch (tag) {
      case Tag.Map:
      case Tag.Array:
        this.#open(slot, tag, roleInParent);
        return undefined;
      case Tag.Ext: {
        const type = cursor.extType;
        const length = cursor.length;
        if (type === 1 || type === 3) {
          this.#countArray(slot.name);
          // The payload's head (shape, dtype name, bin header) is read from the window in one go.
          const head = cursor.ensure(Math.min(length, MAX_ARRAY_HEAD));
          if (head !== undefined) return head.then(() => this.#array(slot, type, length));
          return this.#array(slot, type, length);
        }
        return this.#extValue(slot, type, length);
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
          this.#leaf(slot, { s: "int" }, true);
        } else {
          this.#skip(slot, `a Python int (${int})`);
          this.#leaf(slot, { i: intJson(int) }, true);
        }
        return undefined;
      }
      case Tag.Float: {
        this.#part(slot, "a float");
        if (this.#keepScalars) {
          const bytes = new Uint8Array(8);
          new DataView(bytes.buffer).setFloat64(0, cursor.float, true);
          this.#addScalar(slot, "F64", bytes);
          this.#leaf(slot, { s: "float" }, true);
        } else {
          this.#skip(slot, `a Python float (${cursor.float})`);
          this.#leaf(slot, { f: floatJson(float64Bits(cursor.float)) }, true);
        }
        return undefined;
      }
      case Tag.Bool:
        this.#part(slot, "a bool");
        if (this.#keepScalars) {
          this.#addScalar(slot, "BOOL", Uint8Array.of(cursor.bool ? 1 : 0));
          this.#leaf(slot, { s: "bool" }, true);
        } else {
          this.#skip(slot, `a bool (${cursor.bool ? "True" : "False"})`);
          this.#leaf(slot, cursor.bool, true);
        }
        return undefined;
      case Tag.Nil:
        this.#part(slot, "None");
        this.#skip(slot, "None");
        this.#leaf(slot, null, true);
        return undefined;
      case Tag.Str:
        return this.#stringValue(slot);
      case Tag.Bin:
        return this.#bytesValue(slot);
    }
  }

  #open(slot: Slot, tag: typeof Tag.Map | typeof Tag.Array, roleInParent: "shape" | "chunks" | undefined): void {
    const cursor = this.#cursor;
    const parent = slot.parent;
    if (this.#stack.length + 1 > this.#maxDepth) {
      throw new StConvertError(
        "LimitExceeded",
        `nesting deeper than ${this.#maxDepth} maps and arrays at byte ${cursor.headerAt} (msgpack-python raises StackError past 1024)`,
      );
    }
    if (tag === Tag.Map && cursor.length > this.#maxMapEntries) {
      throw new StConvertError(
        "LimitExceeded",
        `the map at byte ${cursor.headerAt} declares ${cursor.length} entries, more than the ${this.#maxMapEntries} whose keys st-convert keeps to refuse a repeated one`,
      );
    }
    this.#checkNameLength(slot.name);
    const dicts = tag === Tag.Map && (parent === undefined || parent.dicts);
    const role = tag === Tag.Map ? roleInParent : undefined;
    const fullMark = this.#full?.length ?? 0;
    const fullBytesMark = this.#fullBytes;
    this.#text(tag === Tag.Map ? "[" : '{"l":[');
    this.#stack.push({
      kind: tag,
      at: cursor.headerAt,
      remaining: cursor.length,
      count: cursor.length,
      slot,
      dicts,
      role,
      index: 0,
      key: null,
      keys: [],
      otherKeys: undefined,
      lastKey: undefined,
      unsorted: false,
      marker: false,
      shape: undefined,
      chunks: undefined,
      parts: role === undefined ? undefined : { values: new Map(), bad: undefined },
      rec: [],
      essential: tag === Tag.Array,
      written: 0,
      foundMark: this.#found.length,
      warningMark: this.#warnings.length,
      skippedMark: this.#skipped,
      fullMark,
      fullBytesMark,
      recordMark: this.#recordBytes,
      unsortedMark: this.#unsorted,
    });
    this.#part(slot, "a dict or list");
  }

  /** An ndarray (ext 1) or numpy scalar (ext 3) whose payload head is in the window. */
  #array(slot: Slot, type: 1 | 3, length: number): Promise<void> | undefined {
    const cursor = this.#cursor;
    const inChunks = slot.parent?.role === "chunks";
    const end = cursor.position + length;
    const saved = cursor.limit(end, "InvalidArray");
    let ref: ArrayRef;
    try {
      ref = this.#arrayPayload(length, slot.name);
    } catch (error) {
      // A dtype with no safetensors equivalent, in an array the caller leaves out: skipped unread.
      if (!inChunks && isStConvertError(error) && error.code === "UnknownDtype" && this.#include?.(slot.name) === false) {
        cursor.unlimit(saved);
        cursor.skip(end - cursor.position);
        this.#part(slot, "an ndarray");
        this.#leaf(slot, type, type === 3 || slot.sepInKey || slot.parent === undefined);
        return undefined;
      }
      throw withContext(error, { tensor: slot.name });
    } finally {
      cursor.unlimit(saved);
    }
    const { byteLength } = ref;
    let inline: Uint8Array | undefined;
    let changed = false;
    if (type === 3 && ref.shape.length === 0 && ref.dtype === "BOOL") {
      // `ar[()]` makes a numpy bool scalar, which holds 0 or 1 whatever the byte was (0x55 → True).
      const byte = new Uint8Array(1);
      if (!cursor.readIntoSync(byte))
        return cursor.readInto(byte).then(() => this.#arrayDone(slot, type, ref, Uint8Array.of(byte[0] === 0 ? 0 : 1), byte[0]! > 1));
      inline = Uint8Array.of(byte[0] === 0 ? 0 : 1);
      changed = byte[0]! > 1;
    } else if (!inChunks && byteLength > 0 && byteLength <= INLINE_ARRAY_BYTES && byteLength <= this.#inlineLeft) {
      this.#inlineLeft -= byteLength;
      inline = this.#take(byteLength);
      if (!cursor.readIntoSync(inline)) return cursor.readInto(inline).then(() => this.#arrayDone(slot, type, ref, inline, false));
    } else {
      cursor.skip(byteLength);
    }
    this.#arrayDone(slot, type, ref, inline, changed);
    return undefined;
  }

  #arrayDone(slot: Slot, type: 1 | 3, ref: ArrayRef, inline: Uint8Array | undefined, changed: boolean): void {
    const parent = slot.parent;
    this.#part(slot, parent?.role === "chunks" ? ref : "an ndarray");
    this.#add(slot, ref.dtype, ref.shape, changed ? [] : [[ref.offset, ref.byteLength]], inline);
    // An ndarray's place follows from its name, unless a key on its path holds the separator.
    this.#leaf(slot, type, type === 3 || slot.sepInKey || parent === undefined);
  }

  /**
   * Locates an ndarray payload `[shape, dtype name, bytes]` (`_ndarray_to_bytes`) at the cursor,
   * whose head the window holds, and moves to its bytes. A container count or a str/bin length
   * past the payload's end is refused by the cursor itself (`InvalidArray`, under `limit`), so
   * only the int headers of the shape can overrun.
   */
  #arrayPayload(payloadLength: number, name: string): ArrayRef {
    const cursor = this.#cursor;
    const end = cursor.position + payloadLength;
    const at = cursor.headerAt;
    if (payloadLength === 0 || cursor.nextSync() !== Tag.Array || cursor.length !== 3) {
      arrayFault("InvalidArray", "the payload is not the msgpack array [shape, dtype name, bytes]", at, name);
    }
    const shapeTag = cursor.nextSync();
    if (shapeTag !== Tag.Array) {
      // Deliberately stricter than flax, which hands the value to numpy's reshape: a bare int n is
      // the shape (n,), nil leaves the shape to the byte count, a str or bin is read as a sequence
      // of byte values. flax writes `list(shape)`; a file with one meaning states its dimensions.
      arrayFault("InvalidArray", `the shape is ${describeTag(shapeTag)}, not a list of dimensions as flax writes it`, at, name);
    }
    const rank = cursor.length;
    if (rank > MAX_RANK) arrayFault("InvalidArray", `the shape has ${rank} dimensions; numpy allows at most ${MAX_RANK}`, at, name);
    const shape: number[] = new Array(rank);
    for (let i = 0; i < rank; i++) {
      if (cursor.nextSync() !== Tag.Int) arrayFault("InvalidArray", "the shape is not an array of integers", at, name);
      const dim = cursor.int;
      if (dim < 0) arrayFault("InvalidArray", `the shape has the negative dimension ${dim}`, at, name);
      if (typeof dim === "bigint") arrayFault("Unsupported", `the dimension ${dim} is past 2^53 - 1, the largest integer st-convert handles exactly`, at, name);
      shape[i] = dim as number;
    }
    if (cursor.position > end) arrayFault("InvalidArray", "the payload is shorter than the values it declares", at, name);
    const nameTag = cursor.nextSync();
    // The reference unpacks the payload with raw=True, so the dtype name may be a str or a bin.
    if (nameTag !== Tag.Str && nameTag !== Tag.Bin) arrayFault("InvalidArray", "the dtype name is not a string", at, name);
    if (cursor.length > MAX_DTYPE_NAME_BYTES) arrayFault("UnknownDtype", `a dtype name of ${cursor.length} bytes is no numpy dtype name`, at, name);
    const dtypeName = cursor.stringSync(cursor.length);
    const info = dtypeFromNumpyName(dtypeName);
    if (info === undefined) {
      return arrayFault("UnknownDtype", `the dtype ${JSON.stringify(dtypeName)} has no safetensors equivalent${dtypeHint(dtypeName)}`, at, name);
    }
    const tooBig = arrayTooBig(shape, info.bits / 8);
    if (tooBig !== undefined) arrayFault("InvalidArray", tooBig, at, name);
    if (cursor.nextSync() !== Tag.Bin) arrayFault("InvalidArray", "the array bytes are not a msgpack bin", at, name);
    const offset = cursor.position;
    const byteLength = cursor.length;
    if (offset + byteLength !== end) arrayFault("InvalidArray", `${end - offset - byteLength} bytes follow the array bytes inside the payload`, at, name);
    const expected = tensorByteLength(info.code, shape);
    if (expected !== byteLength) {
      arrayFault("ByteLengthMismatch", `${info.numpyName} shape [${shape.join(", ")}] needs ${expected} bytes, the payload holds ${byteLength}`, at, name);
    }
    return { dtype: info.code, shape, offset, byteLength };
  }

  /** `n` bytes of slab memory for an inline copy. */
  #take(n: number): Uint8Array {
    if (this.#slabAt + n > this.#slab.byteLength) {
      this.#slab = new Uint8Array(Math.max(INLINE_SLAB_BYTES, n));
      this.#slabAt = 0;
    }
    const out = this.#slab.subarray(this.#slabAt, this.#slabAt + n);
    this.#slabAt += n;
    return out;
  }

  /** A string leaf: checked as UTF-8 and recorded (when the record has room for it). */
  async #stringValue(slot: Slot): Promise<void> {
    const cursor = this.#cursor;
    this.#part(slot, "a string");
    const keep = this.#affords(cursor.length);
    const text = await cursor.utf8(cursor.length, keep);
    this.#skip(slot, "a string");
    if (keep) this.#leaf(slot, text, true);
  }

  async #bytesValue(slot: Slot): Promise<void> {
    const cursor = this.#cursor;
    this.#part(slot, "bytes");
    this.#skip(slot, "bytes");
    if (this.#affords(2 * cursor.length)) this.#leaf(slot, { b: toHex(await cursor.bytes(cursor.length)) }, true);
    else cursor.skip(cursor.length);
  }

  /** An ext value other than an array: a complex (ext 2), a timestamp (ext -1), or another type. */
  async #extValue(slot: Slot, type: number, length: number): Promise<void> {
    const cursor = this.#cursor;
    const at = cursor.headerAt;
    if (type === 2) {
      const [real, imag] = await this.#readComplex(length, slot.name);
      this.#part(slot, "a complex");
      this.#skip(slot, "a Python complex (complex128 has no safetensors dtype)");
      this.#leaf(slot, { c: [floatJson(real), floatJson(imag)] }, true);
      return;
    }
    if (type < -1) {
      throw new StConvertError(
        "InvalidExt",
        `the ext value at byte ${at} has the type ${type}; msgpack_restore refuses types below 0 other than -1 (a timestamp)`,
        {
          tensor: slot.name,
        },
      );
    }
    let data: Uint8Array | undefined;
    if (type === -1) {
      // Every length but 4, 8 and 12 is refused before reading; those are small.
      const fault = timestampLengthFault(length) ?? timestampFault((data = await cursor.bytes(length)));
      if (fault !== undefined) throw new StConvertError("InvalidExt", `${fault} at byte ${at}; msgpack_restore refuses it`, { tensor: slot.name });
    } else if (this.#affords(2 * length)) {
      data = await cursor.bytes(length);
    } else {
      cursor.skip(length);
    }
    this.#part(slot, `an ext value of type ${type}`);
    this.#skip(slot, `an ext value of type ${type}, which flax does not write`);
    if (data !== undefined) this.#leaf(slot, { x: [type, toHex(data)] }, true);
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
   * Checks an ext 2 payload as flax's `_msgpack_ext_unpack` decodes it, `complex(t[0], t[1])` of
   * `msgpack.unpackb(payload)` (strict map keys, UTF-8 strings, one value filling the payload),
   * and returns the big-endian float64 bits of both parts.
   */
  async #readComplex(length: number, name: string): Promise<[Uint8Array, Uint8Array]> {
    const cursor = this.#cursor;
    const at = cursor.headerAt;
    const end = cursor.position + length;
    const fail = (rule: string): never => {
      throw new StConvertError("InvalidExt", `the complex (ext 2) at byte ${at}: ${rule}; msgpack_restore refuses it`, { tensor: name });
    };
    if (length === 0) fail("an empty payload is not msgpack");
    const saved = cursor.limit(end, "InvalidExt");
    try {
      const tag = await cursor.next();
      let parts: [number, number];
      if (tag === Tag.Bin) {
        if (cursor.length < 2) fail(`the payload holds ${cursor.length} bytes, complex() takes two numbers`);
        const bytes = await cursor.bytes(cursor.length);
        parts = [bytes[0]!, bytes[1]!];
      } else if (tag === Tag.Array) {
        const count = cursor.length;
        if (count < 2) fail(`the payload is a list of ${count} items, complex() takes two numbers`);
        const numbers: number[] = [];
        for (let i = 0; i < 2; i++) {
          const item = await cursor.next();
          if (item === Tag.Int) numbers.push(Number(cursor.int));
          else if (item === Tag.Float) numbers.push(cursor.float);
          else if (item === Tag.Bool) numbers.push(cursor.bool ? 1 : 0);
          else fail(`item ${i} is not a number`);
        }
        await this.#skipValues(count - 2, fail);
        parts = numbers as [number, number];
      } else {
        return fail("the payload is not a list of two numbers");
      }
      if (cursor.position !== end) fail(`${end - cursor.position} bytes follow its value (msgpack-python: ExtraData)`);
      return [float64Bits(parts[0]), float64Bits(parts[1])];
    } catch (error) {
      // The payload's own msgpack faults (a reserved byte, bad UTF-8, too deep) are the complex's.
      if (isStConvertError(error) && error.code !== "InvalidExt") fail(error.rule);
      throw error;
    } finally {
      cursor.unlimit(saved);
    }
  }

  /**
   * Checks `count` values at the cursor as msgpack-python's `unpackb` defaults read them (keys
   * str or bytes, strings UTF-8, timestamps valid, ext types 0–127) and moves past them.
   */
  async #skipValues(count: number, fail: (rule: string) => never): Promise<void> {
    const cursor = this.#cursor;
    // Values still to read per open container; a map counts keys and values, keys at even places.
    const stack: { left: number; map: boolean }[] = [{ left: count, map: false }];
    while (stack.length > 0) {
      const top = stack[stack.length - 1]!;
      if (top.left === 0) {
        stack.pop();
        continue;
      }
      const isKey = top.map && top.left % 2 === 0;
      top.left--;
      const tag = await cursor.next();
      if (isKey && tag !== Tag.Str && tag !== Tag.Bin) fail("a map key inside is not a str or bytes (strict_map_key)");
      if (tag === Tag.Map || tag === Tag.Array) {
        // The list itself is the first level of the nested unpack.
        if (stack.length + 1 > MAX_COMPLEX_DEPTH) fail(`it nests deeper than ${MAX_COMPLEX_DEPTH} levels`);
        stack.push({ left: tag === Tag.Map ? 2 * cursor.length : cursor.length, map: tag === Tag.Map });
      } else if (tag === Tag.Str) {
        await cursor.utf8(cursor.length, false);
      } else if (tag === Tag.Bin) {
        cursor.skip(cursor.length);
      } else if (tag === Tag.Ext) {
        if (cursor.extType < -1) fail(`it holds an ext value of type ${cursor.extType}`);
        if (cursor.extType === -1) {
          const fault = timestampLengthFault(cursor.length) ?? timestampFault(await cursor.bytes(cursor.length));
          if (fault !== undefined) fail(`it holds ${fault}`);
        } else {
          cursor.skip(cursor.length);
        }
      }
    }
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

  #add(slot: Slot, dtype: Dtype, shape: number[], ranges: readonly (readonly [number, number])[], inline?: Uint8Array): void {
    this.#checkNameLength(slot.name);
    this.#found.push({ tensor: sourceTensor(this.#source, slot.name, dtype, shape, ranges, inline), bad: slot.bad, sepInKey: slot.sepInKey });
  }

  #addScalar(slot: Slot, dtype: Dtype, bytes: Uint8Array): void {
    this.#checkNameLength(slot.name);
    this.#countArray(slot.name);
    this.#found.push({ tensor: memoryTensor(slot.name, dtype, [], bytes), bad: slot.bad, sepInKey: slot.sepInKey });
  }

  #skip(slot: Slot, what: string): void {
    this.#skipped++;
    if (this.#warnings.length < this.#maxWarnings) this.#warnings.push(`skipped ${quoteName(slot.name)}: ${what} is not an array`);
  }

  /** Starts a value in the complete record: the comma and key before it. */
  #begin(slot: Slot): void {
    const parent = slot.parent;
    if (this.#full === null || parent === undefined) return;
    const comma = parent.written++ > 0 ? "," : "";
    this.#text(parent.kind === Tag.Map ? `${comma}${JSON.stringify(slot.keyJson)},` : comma);
  }

  #text(text: string): void {
    if (this.#full === null) return;
    this.#full.push(text);
    this.#fullBytes += text.length;
    if (this.#fullBytes > this.#maxOrderedTreeBytes) this.#full = null;
  }

  /** Whether `n` more bytes of values still fit the record (else the record stops). */
  #affords(n: number): boolean {
    if (this.#recording && this.#recordBytes + n > this.#maxTreeBytes) {
      this.#stopRecording(`the values that are not arrays need more than ${this.#maxTreeBytes} bytes`);
    }
    return this.#recording;
  }

  #stopRecording(why: string): void {
    this.#recording = false;
    this.#full = null;
    this.#recordNotice = why;
  }

  /**
   * Records a finished value: in the complete record, and where the names cannot place it
   * (`essential`) in the record of what they cannot say. A list keeps every item, so that the
   * items keep their places.
   */
  #leaf(slot: Slot, json: unknown, essential: boolean): void {
    const parent = slot.parent;
    // Neither record wants it: a plain array of a big file, past the complete record's bound.
    if (this.#full === null && !(this.#recording && (essential || parent === undefined || parent.kind === Tag.Array))) return;
    const text = typeof json === "number" ? String(json) : JSON.stringify(json);
    this.#text(text);
    this.#keep(slot, json, essential, text.length);
  }

  #keep(slot: Slot, json: unknown, essential: boolean, size: number): void {
    if (!this.#recording) return;
    const parent = slot.parent;
    if (parent === undefined) {
      this.#root = { json, essential };
      return;
    }
    if (parent.kind === Tag.Array) {
      parent.rec.push(json);
    } else if (essential) {
      parent.rec.push(slot.keyJson, json);
      parent.essential = true;
      size += typeof slot.keyJson === "string" ? slot.keyJson.length : 16;
    } else {
      return;
    }
    this.#recordBytes += size + 2;
    if (this.#recordBytes > this.#maxTreeBytes) this.#stopRecording(`the record of the tree passes ${this.#maxTreeBytes} bytes`);
  }

  #close(frame: Frame): void {
    this.#stack.pop();
    const slot = frame.slot;
    const parent = slot.parent;
    if (frame.role !== undefined && parent !== undefined) parent[frame.role] = frame.parts;
    if (!frame.marker) {
      if (frame.unsorted) this.#unsorted++;
      this.#text(frame.kind === Tag.Map ? "]" : "]}");
      // An empty dict or list has no name to come back by: it is recorded, like a list.
      this.#keep(slot, frame.kind === Tag.Map ? frame.rec : { l: frame.rec }, frame.essential || (frame.count === 0 && parent !== undefined), 2);
      return;
    }
    // flax's `_unchunk_array_leaves_in_place`: the dict stands for one array. What its values
    // produced while it was read (the chunks as 1-d tensors, the marker and dims as leaves) goes.
    this.#found.length = frame.foundMark;
    this.#warnings.length = frame.warningMark;
    this.#skipped = frame.skippedMark;
    this.#recordBytes = frame.recordMark;
    // flax writes a chunk dict's keys in its own order, and the writer does the same.
    this.#unsorted = frame.unsortedMark;
    if (this.#full !== null) {
      this.#full.length = frame.fullMark;
      this.#fullBytes = frame.fullBytesMark;
    }
    const { dtype, shape, ranges, run } = this.#unchunk(frame);
    this.#add(slot, dtype, shape, ranges);
    // What the writer does by itself: chunks of flax's size, for arrays past flax's MAX_CHUNK_SIZE.
    const itemSize = dtypeInfo(dtype).bits / 8;
    const byteLength = ranges.reduce((n, [, length]) => n + length, 0);
    const derived = byteLength > MAX_CHUNK_SIZE && run === Math.max(1, Math.floor(MAX_CHUNK_SIZE / itemSize));
    this.#leaf(slot, derived ? 1 : { k: run }, !derived || slot.sepInKey || parent === undefined);
  }

  #unchunk(frame: Frame): { dtype: Dtype; shape: number[]; ranges: [number, number][]; run: number } {
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
    if (shape.length > MAX_RANK) fail(`the shape has ${shape.length} dimensions; numpy allows at most ${MAX_RANK}`);
    const tooBig = arrayTooBig(shape, dtypeInfo(dtype!).bits / 8);
    if (tooBig !== undefined) fail(tooBig);
    let needed = 1n;
    for (const dim of shape) needed *= BigInt(dim);
    if (BigInt(elements) !== needed) fail(`the chunks hold ${elements} elements, shape [${shape.join(", ")}] needs ${needed}`);
    const first = parts[0] as ArrayRef;
    return { dtype: dtype!, shape, ranges, run: Math.max(1, first.shape[0]!) };
  }

  #finish(): FlaxFile {
    const names = new Set<string>();
    let sepWarned: string | undefined;
    const tensors: FlaxTensor[] = [];
    for (const { tensor, bad, sepInKey } of this.#found) {
      if (bad !== undefined) {
        throw new StConvertError("InvalidName", `the path to this array holds ${bad}; tensor names need string keys`, { tensor: tensor.name });
      }
      if (names.has(tensor.name)) {
        throw new StConvertError(
          "DuplicateKey",
          `two arrays have this name (a key that holds the separator ${JSON.stringify(this.#sep)} beside the same path nested: choose another separator)`,
          { tensor: tensor.name },
        );
      }
      names.add(tensor.name);
      if (sepInKey && sepWarned === undefined) sepWarned = tensor.name;
      tensors.push(tensor);
    }
    const root = this.#root;
    let record: string | undefined;
    if (this.#recording && root !== undefined && (root.essential || this.#unsorted > 0)) {
      const tree = this.#full !== null ? this.#full.join("") : root.essential ? JSON.stringify(root.json) : undefined;
      if (tree !== undefined) record = `{"version":${FLAX_TREE_VERSION},"sep":${JSON.stringify(this.#sep)},"tree":${tree}}`;
    }
    if (!this.#recording) {
      // Without the record, what is not an array is lost on the way: say what.
      this.#warn(`the tree is not recorded in the metadata (${FLAX_TREE_KEY}): ${this.#recordNotice}; its values that are not arrays are skipped`);
      for (const message of this.#warnings) this.#warn(message);
      if (this.#skipped > this.#warnings.length) {
        this.#warn(`skipped ${this.#skipped - this.#warnings.length} more leaves that are not arrays (${this.#skipped} in all)`);
      }
      if (sepWarned !== undefined) {
        this.#warn(
          `${quoteName(sepWarned)} has a key that holds the separator ${JSON.stringify(this.#sep)}; written back as flax, such names split into a different tree (choose another separator)`,
        );
      }
    }
    const metadata = record === undefined ? null : createMetadata([[FLAX_TREE_KEY, record]]);
    return { format: "flax", metadata, tensors, skipped: this.#skipped };
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

/** A msgpack value's kind, for messages. */
function describeTag(tag: Tag): string {
  switch (tag) {
    case Tag.Int:
      return "a bare integer (which numpy's reshape would take as one dimension)";
    case Tag.Nil:
      return "nil (which numpy's reshape would leave to the byte count)";
    case Tag.Str:
    case Tag.Bin:
      return "a string (whose bytes numpy's reshape would take as dimensions)";
    case Tag.Map:
      return "a map";
    case Tag.Float:
      return "a float";
    case Tag.Bool:
      return "a bool";
    default:
      return "an ext value";
  }
}

/** Refuses an ndarray payload, naming the rule, where it starts and the tensor. */
function arrayFault(code: string, rule: string, at: number, name: string): never {
  throw new StConvertError(code, `${rule} (the ndarray at byte ${at})`, { tensor: name });
}

/**
 * numpy's "array is too big" (`PyArray_NewFromDescr`): the non-zero dimensions times the itemsize
 * pass `NPY_MAX_INTP`, even when a zero dimension leaves the array empty.
 */
export function arrayTooBig(shape: readonly number[], itemSize: number): string | undefined {
  let approx = itemSize;
  for (const dim of shape) if (dim !== 0) approx *= dim;
  // Exact below 2^53; only products near 2^63 need the exact count.
  if (approx < 2 ** 53) return undefined;
  let bytes = BigInt(itemSize);
  for (const dim of shape) if (dim !== 0) bytes *= BigInt(dim);
  if (bytes <= NPY_MAX_INTP) return undefined;
  return `array is too big: shape [${shape.join(", ")}] of ${itemSize}-byte items; numpy refuses one whose non-zero dimensions hold more than 2^63 - 1 bytes`;
}

function dtypeHint(name: string): string {
  if (/^(float4|float6|int4|uint4|int2|uint2)/.test(name)) return " (ml_dtypes keeps one value per byte, safetensors packs them)";
  if (name === "complex128" || name === "float128" || name === "complex256") return " (safetensors has no 128-bit complex or extended float)";
  return "";
}

function float64Bits(value: number): Uint8Array {
  const bits = new Uint8Array(8);
  new DataView(bits.buffer).setFloat64(0, value);
  return bits;
}

function sourceTensor(
  source: ByteSource,
  name: string,
  dtype: Dtype,
  shape: number[],
  ranges: readonly (readonly [number, number])[],
  inline: Uint8Array | undefined,
): FlaxTensor {
  const byteLength = inline?.byteLength ?? ranges.reduce((sum, [, length]) => sum + length, 0);
  return new FlaxArray(name, dtype, shape, byteLength, ranges, inline === undefined ? source : inline);
}

/** A tensor whose bytes are in memory (yielded as views: consumers do not write to chunks). */
function memoryTensor(name: string, dtype: Dtype, shape: number[], bytes: Uint8Array): FlaxTensor {
  return new FlaxArray(name, dtype, shape, bytes.byteLength, [], bytes);
}

/**
 * One tensor of a flax file. A class, not a closure per tensor: files of a million small arrays
 * list a million of these.
 */
class FlaxArray implements FlaxTensor {
  constructor(
    readonly name: string,
    readonly dtype: Dtype,
    readonly shape: number[],
    readonly byteLength: number,
    readonly ranges: readonly (readonly [number, number])[],
    /** Where the bytes are: the file (read by `ranges`), or memory. */
    readonly from: ByteSource | Uint8Array,
  ) {}

  chunks(options: ChunkOptions = {}): AsyncIterable<Uint8Array> {
    const from = this.from;
    const chunkSize = options.chunkSize ?? DEFAULT_CHUNK_SIZE;
    if (from instanceof Uint8Array) {
      // In memory and usually tiny: a plain iterator, which costs far less than an async generator.
      return {
        [Symbol.asyncIterator]() {
          let at = 0;
          return {
            next: () => {
              if (at >= from.byteLength) return Promise.resolve({ done: true, value: undefined });
              const value = from.subarray(at, at + chunkSize);
              at += chunkSize;
              return Promise.resolve({ done: false, value });
            },
            return: () => {
              at = from.byteLength;
              return Promise.resolve({ done: true, value: undefined });
            },
          };
        },
      };
    }
    return readRanges(from, this.ranges, chunkSize, options.reuse ?? false);
  }

  /** Where the bytes lie in the file, when they are one range of it (not a chunked array, not in memory). */
  extent(): TensorExtent | undefined {
    const range = this.ranges.length === 1 ? this.ranges[0]! : undefined;
    return this.from instanceof Uint8Array || range === undefined ? undefined : { source: this.from, offset: range[0] };
  }
}

async function* readRanges(source: ByteSource, ranges: readonly (readonly [number, number])[], chunkSize: number, reuse: boolean): AsyncGenerator<Uint8Array> {
  // Each range has its own buffers, so reuse holds across the switch from one range to the next.
  for (const [offset, length] of ranges) yield* readRange(source, offset, length, { chunkSize, reuse });
}
