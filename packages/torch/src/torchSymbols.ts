/**
 * The symbols of a torch checkpoint's pickle that have meaning here: the storage classes, the
 * dtypes, the tensor rebuild functions (`torch/_utils.py`: `_rebuild_tensor`, `_rebuild_tensor_v2`,
 * `_rebuild_tensor_v3`, `_rebuild_parameter`, `_rebuild_parameter_with_state`;
 * `torch/_tensor.py`: `_rebuild_from_type_v2`) and `collections.OrderedDict`.
 * Every other symbol stays an opaque value; nothing is ever imported or called.
 */
import type { Dtype } from "@st-convert/core";
import { StConvertError } from "@st-convert/core";
import { isDangerousGlobal, symbolName } from "./pickleGlobals.js";
import {
  type PickleValue,
  type PyDict,
  type PyGlobal,
  type PyNative,
  type PyOpaque,
  type PyTuple,
  type UnpicklerHooks,
  depthOf,
  describeValue,
  dictKey,
  dictUpdateRefusal,
  pyTruth,
  splitState,
} from "./Unpickler.js";

/** A torch dtype: its safetensors code, or the torch name of one that has none. */
export interface TorchDtype {
  /** Undefined when safetensors has no such dtype (complex128, complex32, quantized, bits…). */
  readonly code: Dtype | undefined;
  /** torch's name, e.g. `float8_e4m3fn`. */
  readonly torchName: string;
  /** Bytes per element. */
  readonly size: number;
}

const dtype = (code: Dtype | undefined, torchName: string, size: number): TorchDtype => Object.freeze({ code, torchName, size });

/** torch dtype names (`torch.<name>`, as a dtype pickles) → dtype; aliases included. */
export const TORCH_DTYPES: ReadonlyMap<string, TorchDtype> = new Map(
  (
    [
      [["float64", "double"], "F64", 8],
      [["float32", "float"], "F32", 4],
      [["float16", "half"], "F16", 2],
      [["bfloat16"], "BF16", 2],
      [["int64", "long"], "I64", 8],
      [["int32", "int"], "I32", 4],
      [["int16", "short"], "I16", 2],
      [["int8"], "I8", 1],
      [["uint8"], "U8", 1],
      [["bool"], "BOOL", 1],
      [["float8_e4m3fn"], "F8_E4M3", 1],
      [["float8_e5m2"], "F8_E5M2", 1],
      [["float8_e4m3fnuz"], "F8_E4M3FNUZ", 1],
      [["float8_e5m2fnuz"], "F8_E5M2FNUZ", 1],
      [["float8_e8m0fnu"], "F8_E8M0", 1],
      [["uint16"], "U16", 2],
      [["uint32"], "U32", 4],
      [["uint64"], "U64", 8],
      [["complex64", "cfloat"], "C64", 8],
      [["complex128", "cdouble"], undefined, 16],
      [["complex32", "chalf"], undefined, 4],
      [["qint8"], undefined, 1],
      [["quint8"], undefined, 1],
      [["qint32"], undefined, 4],
      [["quint4x2"], undefined, 1],
      [["quint2x4"], undefined, 1],
      [["float4_e2m1fn_x2"], undefined, 1],
      [["bits8"], undefined, 1],
      [["bits16"], undefined, 2],
      [["bits1x8"], undefined, 1],
      [["bits2x4"], undefined, 1],
      [["bits4x2"], undefined, 1],
    ] as const
  ).flatMap(([names, code, size]) => names.map((name) => [name, dtype(code, names[0], size)] as const)),
);

/** Typed storage classes (`torch.<Name>Storage`) → the dtype of their elements; `UntypedStorage` counts bytes. */
const STORAGE_CLASSES: ReadonlyMap<string, TorchDtype> = new Map([
  ["FloatStorage", TORCH_DTYPES.get("float32")!],
  ["DoubleStorage", TORCH_DTYPES.get("float64")!],
  ["HalfStorage", TORCH_DTYPES.get("float16")!],
  ["BFloat16Storage", TORCH_DTYPES.get("bfloat16")!],
  ["LongStorage", TORCH_DTYPES.get("int64")!],
  ["IntStorage", TORCH_DTYPES.get("int32")!],
  ["ShortStorage", TORCH_DTYPES.get("int16")!],
  ["CharStorage", TORCH_DTYPES.get("int8")!],
  ["ByteStorage", TORCH_DTYPES.get("uint8")!],
  ["BoolStorage", TORCH_DTYPES.get("bool")!],
  ["ComplexFloatStorage", TORCH_DTYPES.get("complex64")!],
  ["ComplexDoubleStorage", TORCH_DTYPES.get("complex128")!],
  ["QInt8Storage", TORCH_DTYPES.get("qint8")!],
  ["QUInt8Storage", TORCH_DTYPES.get("quint8")!],
  ["QInt32Storage", TORCH_DTYPES.get("qint32")!],
  ["QUInt4x2Storage", TORCH_DTYPES.get("quint4x2")!],
  ["QUInt2x4Storage", TORCH_DTYPES.get("quint2x4")!],
]);

/** Bytes, as `UntypedStorage` holds them (and as a v2 tensor over one reads them). */
const BYTES = TORCH_DTYPES.get("uint8")!;

/** Largest rank accepted: numpy's `NPY_MAXDIMS`, far past any checkpoint. */
export const MAX_RANK = 64;

/**
 * The key under which the torch writer keeps a checkpoint's metadata in its state dict's
 * `_metadata` attribute (whose other keys are module prefixes): a name no module has.
 */
export const METADATA_ENTRY = "__metadata__";

/** A storage a persistent id declares: its key and its length. */
export interface StorageRef {
  readonly kind: "storage";
  /** The record key (`data/<key>` in a zip, the key list of a legacy file). */
  readonly key: string;
  /** The storage class's element type (bytes for `UntypedStorage`). */
  readonly dtype: TorchDtype;
  /** Elements of `dtype` (bytes for `UntypedStorage`), as declared. */
  readonly numel: number;
  /** The symbol that named the class, for messages. */
  readonly className: string;
  /** Legacy views of a root storage: the first element of the view in the root, in `dtype` elements. */
  readonly viewOffset: number;
}

/** A tensor a rebuild call makes: a view of a storage. Nothing is read yet. */
export interface TensorRef {
  readonly kind: "tensor";
  readonly storage: StorageRef;
  readonly dtype: TorchDtype;
  /** First element, in elements of `dtype`, from the start of the root storage's bytes. */
  readonly offset: number;
  readonly shape: readonly number[];
  readonly strides: readonly number[];
  /** The rebuild function, for messages. */
  readonly rebuiltBy: string;
  /**
   * The Python type torch.load gives it, where `BUILD` tells them apart: a plain `torch.Tensor`
   * (undefined), an `nn.Parameter`, or another subclass (`nn.Buffer`, which torch cannot `BUILD`).
   */
  readonly pythonType?: "Parameter" | "subclass";
  /** Why the view does not lie within its storage (torch refuses it as it builds it). */
  readonly viewError?: string;
}

export type TorchNative = StorageRef | TensorRef;

export function native(value: TorchNative): PyNative<TorchNative> {
  return { kind: "native", value };
}

/** The storage or tensor a value holds, if any. */
export function asTorch(value: PickleValue): TorchNative | undefined {
  return value !== null && typeof value === "object" && value.kind === "native" ? (value.value as TorchNative) : undefined;
}

/**
 * Python's truth of a value, where it is known without running anything: a storage is true when it
 * holds elements; a tensor's truth is its one element's (torch raises for any other count), which
 * is not read here, so it is undefined, as is an opaque call's result.
 */
function isTruthy(value: PickleValue): boolean | undefined {
  const held = asTorch(value);
  if (held?.kind === "storage") return held.numel > 0;
  return pyTruth(value);
}

function isDict(value: PickleValue): boolean {
  return value !== null && typeof value === "object" && value.kind === "dict";
}

function isGlobal(value: PickleValue, module: string, name?: string): value is PyGlobal {
  return value !== null && typeof value === "object" && value.kind === "global" && value.module === module && (name === undefined || value.name === name);
}

function invalid(rule: string): never {
  throw new StConvertError("InvalidTensor", rule);
}

/** torch's sizes, strides and offsets are C++ `int64_t`s; `INT64_MIN` is its "not a concrete integer" sentinel. */
const INT64_MAX = 2n ** 63n - 1n;

/**
 * An integer argument as torch's argument parser takes it: an int in (-2^63, 2^63), never a bool
 * (`set_()` refuses a bool where it wants an int).
 */
function int64(value: PickleValue, what: string): bigint {
  if (typeof value === "boolean") return invalid(`${what} is a bool, which torch's set_() refuses where an int is wanted`);
  if (typeof value !== "number" && typeof value !== "bigint") return invalid(`${what} is ${describeValue(value)}, not an integer`);
  const n = BigInt(value);
  if (n > INT64_MAX || n <= -INT64_MAX - 1n) return invalid(`${what} is ${n}, outside the 64-bit integers torch takes`);
  return n;
}

/**
 * A tuple of ints as torch's parser takes an int list: it checks the type of the first item only,
 * so a bool after the first counts as 0 or 1 (Python's bool is an int), and one first is refused.
 */
/** C-order strides of `size` (a dimension of 0 counts as 1, as torch computes them). */
function contiguousStrides(size: readonly bigint[]): bigint[] {
  const strides = new Array<bigint>(size.length);
  let step = 1n;
  for (let i = size.length - 1; i >= 0; i--) {
    strides[i] = step;
    const d = size[i]!;
    step *= d > 1n ? d : 1n;
  }
  return strides;
}

function intTuple(value: PickleValue, what: string): bigint[] {
  // torch.Size pickles as REDUCE(torch.Size, (tuple,)): accepted where a tuple is.
  if (value !== null && typeof value === "object" && value.kind === "opaque" && value.callee === "torch.Size") {
    const args = value.given[0];
    if (args !== null && typeof args === "object" && args.kind === "tuple" && args.items.length === 1) value = args.items[0]!;
  }
  if (value === null || typeof value !== "object" || (value.kind !== "tuple" && value.kind !== "list"))
    invalid(`${what} is ${describeValue(value)}, not a tuple`);
  const items = (value as { items: readonly PickleValue[] }).items;
  if (items.length > MAX_RANK) invalid(`${what} has ${items.length} dimensions, more than ${MAX_RANK}`);
  return items.map((item, i) => (i > 0 && typeof item === "boolean" ? (item ? 1n : 0n) : int64(item, `${what}[${i}]`)));
}

/** `requires_grad` as torch checks it: a bool, and True only for floating-point and complex dtypes. */
function checkRequiresGrad(value: PickleValue | undefined, tensorDtype: TorchDtype, where: string): void {
  if (typeof value !== "boolean")
    invalid(`${where}: requires_grad is ${value === undefined ? "missing" : describeValue(value)}, not a bool (torch: "requires_grad must be a bool")`);
  if (value && !/^(float|bfloat|complex)/.test(tensorDtype.torchName)) {
    invalid(
      `${where}: requires_grad is True on a ${tensorDtype.torchName} tensor; torch: "only Tensors of floating point and complex dtype can require gradients"`,
    );
  }
}

/**
 * The storage a persistent id declares: `('storage', StorageClass, key, location, numel)` (zip),
 * or with a sixth item, `view_metadata` (legacy: `None` or `(view_key, offset, size)`).
 * @throws StConvertError `InvalidStorage`.
 */
export function storageFromPersistentId(pid: PickleValue, format: "zip" | "legacy" = "zip"): PickleValue {
  const invalidStorage = (rule: string): never => {
    throw new StConvertError("InvalidStorage", rule);
  };
  if (pid === null || typeof pid !== "object" || pid.kind !== "tuple") return invalidStorage(`a persistent id is ${describeValue(pid)}, not a storage tuple`);
  const [tag, cls, key, , declaredNumel, view] = pid.items;
  // torch multiplies the count by the element size: a bool counts as 0 or 1, as Python's bool is an int.
  const numel = typeof declaredNumel === "boolean" ? Number(declaredNumel) : declaredNumel;
  if (tag !== "storage") {
    const what = typeof tag === "string" ? JSON.stringify(tag) : describeValue((tag ?? null) as PickleValue);
    return invalidStorage(`a persistent id of type ${what} is not a storage (torch writes only 'storage')`);
  }
  // torch unpacks the items after the tag into exactly four (zip) or five (legacy) names.
  const items = format === "zip" ? 5 : 6;
  if (pid.items.length !== items) return invalidStorage(`a storage persistent id has ${pid.items.length} items, not the ${items} of a ${format} checkpoint`);
  if (cls === null || typeof cls !== "object" || cls.kind !== "global")
    return invalidStorage(`the storage class is ${describeValue(cls as PickleValue)}, not a symbol`);
  const className = `${cls.module}.${cls.name}`;
  const storageDtype =
    (cls.module === "torch" || cls.module === "torch.storage") && cls.name === "UntypedStorage"
      ? BYTES
      : cls.module === "torch" || cls.module === "torch.cuda"
        ? STORAGE_CLASSES.get(cls.name)
        : undefined;
  if (storageDtype === undefined) return invalidStorage(`unknown storage class ${className}`);
  // A legacy file predates untyped storages: torch's legacy loader asks the class for its dtype.
  if (format === "legacy" && storageDtype === BYTES && cls.name === "UntypedStorage") {
    return invalidStorage(`a legacy checkpoint's storage class is ${className}, which has no dtype; torch: "has no attribute 'dtype'"`);
  }
  if (typeof key !== "string") return invalidStorage(`the storage key is ${describeValue(key as PickleValue)}, not a str`);
  if (typeof numel !== "number" || !Number.isSafeInteger(numel) || numel < 0) {
    return invalidStorage(`storage ${JSON.stringify(key)} declares ${describeValue(numel as PickleValue)} elements, not a non-negative integer below 2^53`);
  }
  let viewOffset = 0;
  if (view !== undefined && view !== null) {
    // Legacy storage views (torch < 1.6): (view_key, offset, size) of the root storage `key`.
    if (typeof view !== "object" || view.kind !== "tuple" || view.items.length !== 3) {
      return invalidStorage(`storage ${JSON.stringify(key)} has view metadata ${describeValue(view)}, not (view_key, offset, size)`);
    }
    const [, offset, size] = view.items;
    if (typeof offset !== "number" || typeof size !== "number" || !Number.isSafeInteger(offset) || !Number.isSafeInteger(size) || offset < 0 || size < 0) {
      return invalidStorage(`storage view of ${JSON.stringify(key)} has an offset or size that is not a non-negative integer`);
    }
    if (offset + size > numel)
      return invalidStorage(`storage view of ${JSON.stringify(key)} (elements ${offset}..${offset + size}) reaches past its ${numel} elements`);
    viewOffset = offset;
  }
  return native({ kind: "storage", key, dtype: storageDtype, numel, className, viewOffset });
}

const REBUILD_TENSOR = new Set(["_rebuild_tensor", "_rebuild_tensor_v2", "_rebuild_tensor_v3"]);
const REBUILD_PARAMETER = new Set(["_rebuild_parameter", "_rebuild_parameter_with_state"]);
/** Types `_rebuild_from_type_v2` may turn a tensor into: they hold the same bytes. */
const TENSOR_TYPES = new Set(["torch.Tensor", "torch.nn.parameter.Parameter", "torch.nn.parameter.Buffer", "torch._tensor.Tensor"]);

function rebuildTensor(name: string, args: PyTuple): PickleValue {
  const a = args.items;
  const where = `torch._utils.${name}`;
  const expected = name === "_rebuild_tensor" ? [4] : name === "_rebuild_tensor_v2" ? [6, 7] : [7, 8];
  if (!expected.includes(a.length)) invalid(`${where} takes ${expected.join(" or ")} arguments, not ${a.length}`);
  const storage = asTorch(a[0]!);
  if (storage?.kind !== "storage") invalid(`${where} is given ${describeValue(a[0]!)}, not a storage`);
  const offset = int64(a[1]!, "storage_offset");
  if (offset < 0n) invalid(`storage_offset is ${offset}; torch: "invalid storage offset"`);
  const size = intTuple(a[2]!, "size");
  // torch's set_ takes stride=None, or an empty stride, for the contiguous strides of the size.
  const givenStride = a[3] === null ? undefined : intTuple(a[3]!, "stride");
  const stride = givenStride === undefined || givenStride.length === 0 ? contiguousStrides(size) : givenStride;
  if (size.length !== stride.length) invalid(`size has ${size.length} dimensions but stride has ${stride.length}`);
  let tensorDtype = storage.dtype;
  let requiresGrad = a[4];
  if (name === "_rebuild_tensor_v3") {
    // v3 passes both to torch.empty((0,), dtype=…, requires_grad=…), whose argument parser takes
    // None as the default: torch's default dtype (float32 unless a program changed it; torch.save
    // never writes None here) and False. v2 assigns requires_grad, which takes a bool only.
    const d = a[6]!;
    if (d === null) tensorDtype = TORCH_DTYPES.get("float32")!;
    else {
      if (!isGlobal(d, "torch")) invalid(`the dtype of ${where} is ${describeValue(d)}, not a torch dtype`);
      const found = TORCH_DTYPES.get((d as PyGlobal).name);
      if (found === undefined) {
        throw new StConvertError("UnsupportedDtype", `torch.${(d as PyGlobal).name} is not a dtype st-convert knows`);
      }
      tensorDtype = found;
    }
    if (requiresGrad === null) requiresGrad = false;
  }
  if (name !== "_rebuild_tensor") checkRequiresGrad(requiresGrad, tensorDtype, where);
  // The optional last argument, tensor metadata: torch sets it when it is true in Python's sense,
  // and asserts that it is a dict.
  const metadata = name === "_rebuild_tensor_v2" ? a[6] : name === "_rebuild_tensor_v3" ? a[7] : undefined;
  if (metadata !== undefined && makesTensor(metadata)) {
    invalid(
      `the metadata argument of ${where} is a tensor; torch tests its truth ("Boolean value of Tensor … is ambiguous" unless it has one element) and then wants a dict`,
    );
  }
  if (metadata !== undefined && isTruthy(metadata) === true && !isDict(metadata)) {
    invalid(`the metadata argument of ${where} is ${describeValue(metadata)}, not a dict; torch: "expected dict"`);
  }
  // torch multiplies the sizes left to right in int64 ("numel: integer multiplication overflow"),
  // so [2^32, 2^32, 0] overflows before the 0 and [0, 2^32, 2^32] does not.
  let numel = 1n;
  for (const d of size) {
    if (d < 0n) invalid(`size holds ${d}; torch: "numel: integer multiplication overflow"`);
    numel *= d;
    if (numel > INT64_MAX) invalid(`the sizes [${size.join(", ")}] multiply past 2^63 - 1; torch: "numel: integer multiplication overflow"`);
  }
  const shape = size.map((d) => {
    if (d > BigInt(Number.MAX_SAFE_INTEGER)) throw new StConvertError("Unsupported", `a dimension of ${d} is past 2^53 - 1`);
    return Number(d);
  });
  // A stride only matters along a dimension of more than one element of a non-empty tensor; there
  // torch refuses a negative one, elsewhere it takes any (given here as 0, which also cannot matter).
  const strides = stride.map((s, i) => {
    if (numel === 0n || shape[i] === 1) return s >= 0n && s <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(s) : 0;
    if (s < 0n) invalid(`stride[${i}] is ${s} along a dimension of ${shape[i]}; torch: "Storage size calculation overflowed"`);
    if (s > BigInt(Number.MAX_SAFE_INTEGER)) invalid(`stride[${i}] is ${s}, past 2^53 - 1: the view reaches past any storage`);
    return Number(s);
  });
  // An empty tensor reads nothing: its offset cannot matter either.
  const first = numel === 0n && offset > BigInt(Number.MAX_SAFE_INTEGER) ? 0 : Number(offset);
  if (first > Number.MAX_SAFE_INTEGER) invalid(`storage_offset is ${offset}, past 2^53 - 1: the view starts past any storage`);
  // storage_offset counts elements of the tensor's dtype; a legacy view's offset, of the storage's.
  const viewBytes = storage.viewOffset * storage.dtype.size;
  if (viewBytes % tensorDtype.size !== 0) invalid(`a storage view starts at byte ${viewBytes}, inside an element of ${tensorDtype.torchName}`);
  const offsetInRoot = first + viewBytes / tensorDtype.size;
  // torch's set_ grows the storage to the view's last byte, and a zip checkpoint's storage, loaded
  // whole, cannot grow ("Trying to resize storage that is not resizable"), whether or not the
  // tensor ends up in the result. The error is kept on the tensor, to be reported under its name
  // (readTorch's `checkViews`; a legacy checkpoint's storages grow, and judge their views later).
  let viewError: string | undefined;
  if (numel > 0n) {
    let last = BigInt(offsetInRoot);
    for (let i = 0; i < shape.length; i++) last += BigInt(Math.max(shape[i]! - 1, 0)) * BigInt(strides[i]!);
    const declared = BigInt(storage.numel) * BigInt(storage.dtype.size);
    const end = (last + 1n) * BigInt(tensorDtype.size);
    if (end > declared) {
      viewError = `the ${tensorDtype.torchName} view at element offset ${offsetInRoot}, size [${shape.join(", ")}], stride [${strides.join(", ")}] reaches byte ${end} of storage ${JSON.stringify(storage.key)}, which holds ${declared} bytes`;
    }
  }
  return native({ kind: "tensor", storage, dtype: tensorDtype, offset: offsetInRoot, shape, strides, rebuiltBy: where, viewError });
}

/** Attributes whose assignment rewrites a tensor's elements or data. */
const REWRITING_ATTRIBUTES = new Set(["data", "real", "imag"]);

/**
 * The state `_rebuild_from_type_v2` sets on the tensor it made (torch's `_set_obj_state`): a
 * `(dict_state, slots_state)` pair or a dict state alone, each, when true, a dict whose keys are
 * attribute names. An attribute that rewrites the tensor (data, real, imag) is refused: torch.save
 * never writes one there.
 * @throws StConvertError `UnpicklingError`.
 */
function checkObjectState(state: PickleValue, charge: (n: number) => void): void {
  const where = "the state of torch._tensor._rebuild_from_type_v2";
  let parts: PickleValue[] = [state];
  if (state !== null && typeof state === "object" && state.kind === "tuple") {
    if (state.items.length !== 2) unpicklingError(`${where} is a tuple of ${state.items.length} items; torch: "Invalid serialized state"`);
    parts = [...state.items];
  }
  for (const part of parts) {
    if (isTruthy(part) === false) continue;
    if (part !== null && typeof part === "object" && part.kind === "opaque" && part.callee === "collections.OrderedDict") continue;
    if (part === null || typeof part !== "object" || part.kind !== "dict") unpicklingError(`${where} holds ${describeValue(part)}, not a dict of attributes`);
    // A shared state dict given to one rebuild after another is walked each time: charged.
    charge(part.entries.size);
    for (const { key } of part.entries.values()) {
      if (typeof key !== "string") unpicklingError(`${where} names an attribute by ${describeValue(key)}; torch: "attribute name must be string"`);
      if (REWRITING_ATTRIBUTES.has(key))
        unpicklingError(`BUILD on a tensor with a state that sets its ${key}: torch would rewrite the tensor; torch.save never writes this`);
    }
  }
}

/** Allowed calls whose result is a tensor (a Parameter, or a tensor from a legacy constructor such as torch.FloatTensor). */
const TENSOR_CALL = /^torch\.((nn\.parameter\.Parameter)|Tensor|(cuda\.)?(sparse\.)?[A-Z][A-Za-z0-9]*Tensor)$/;

/** Whether torch.load would hold a tensor here: a rebuilt one, or the result of a tensor-making call. */
function makesTensor(value: PickleValue): boolean {
  if (asTorch(value)?.kind === "tensor") return true;
  return value !== null && typeof value === "object" && value.kind === "opaque" && TENSOR_CALL.test(value.callee);
}

/** Hooks that give the torch symbols their meaning, and the storages the pickle declared. */
export interface TorchHooks extends UnpicklerHooks {
  /** Every storage a persistent id declared, by key, in first-declaration order. */
  readonly storages: ReadonlyMap<string, StorageRef>;
  /** Tensors built over views that leave their storage, in the order built. */
  readonly badViews: readonly TensorRef[];
  /** Symbols named outside torch's weights-only allow-list (`module.name`), in first-named order. */
  readonly globals: ReadonlySet<string>;
}

/**
 * The hooks for {@link unpickle}. A storage key declared twice must be declared the same way
 * (torch.save refuses to save one storage as two types).
 * @throws StConvertError `InvalidStorage` for a key declared two ways.
 */
export function torchHooks(format: "zip" | "legacy" = "zip"): TorchHooks {
  const storages = new Map<string, StorageRef>();
  const badViews: TensorRef[] = [];
  const globals = new Set<string>();
  return {
    storages,
    badViews,
    globals,
    symbol({ module, name }) {
      if (isDangerousGlobal(module, name)) {
        throw new StConvertError(
          "DangerousGlobal",
          `the pickle names ${symbolName(module, name)}, which runs code or reaches the system when Python unpickles the file (st-convert ran nothing): refused`,
        );
      }
      if (!isAllowedGlobal(module, name)) globals.add(symbolName(module, name));
    },
    persistentLoad(pid) {
      const made = storageFromPersistentId(pid, format);
      const ref = asTorch(made) as StorageRef;
      const first = storages.get(ref.key);
      if (first === undefined) storages.set(ref.key, ref);
      else if (first.numel !== ref.numel || first.className !== ref.className) {
        throw new StConvertError(
          "InvalidStorage",
          `storage ${JSON.stringify(ref.key)} is declared as ${ref.numel} × ${ref.className} and, before, as ${first.numel} × ${first.className}`,
        );
      }
      return made;
    },
    reduce(callee, args, charge) {
      const made = reduceSymbol(callee, args, charge);
      const tensor = made === undefined ? undefined : asTorch(made);
      if (tensor?.kind === "tensor" && tensor.viewError !== undefined) badViews.push(tensor);
      return made;
    },
    build: buildNative,
    newObject,
  };
}

function reduceSymbol(callee: PyGlobal, args: PyTuple, charge: (n: number) => void): PickleValue | undefined {
  {
    const symbol = `${callee.module}.${callee.name}`;
    if (callee.module === "torch._utils" && REBUILD_TENSOR.has(callee.name)) return rebuildTensor(callee.name, args);
    if (callee.module === "torch._utils" && REBUILD_PARAMETER.has(callee.name)) {
      const arity = callee.name === "_rebuild_parameter" ? 3 : 4;
      if (args.items.length !== arity) invalid(`${symbol} takes ${arity} arguments, not ${args.items.length}`);
      const data = args.items[0]!;
      const tensor = asTorch(data);
      if (tensor?.kind !== "tensor") invalid(`${symbol} is given ${describeValue(data)}, not a tensor`);
      checkRequiresGrad(args.items[1], tensor.dtype, symbol);
      return typed(data, "Parameter");
    }
    if (symbol === "torch.nn.parameter.Parameter") return callParameter(args);
    if (callee.module === "torch" && (STORAGE_CLASSES.has(callee.name) || TORCH_DTYPES.has(callee.name))) {
      // torch.load gives these as a StorageType or a torch.dtype, neither callable ("is not callable").
      throw new StConvertError(
        "UnpicklingError",
        `${symbol} is called, but torch.load cannot call it (a ${STORAGE_CLASSES.has(callee.name) ? "storage class" : "dtype"} is not callable)`,
      );
    }
    if (STORAGE_TYPES.has(symbol) && args.items.length > 0) refuseStorageCall(symbol);
    if (symbol === "torch._tensor._rebuild_from_type_v2") {
      if (args.items.length !== 4) invalid(`${symbol} takes 4 arguments (func, new_type, args, state), not ${args.items.length}`);
      const [func, type, funcArgs] = args.items;
      if (func === undefined || !isGlobal(func, "torch._utils") || !REBUILD_TENSOR.has(func.name)) {
        throw new StConvertError(
          "UnsupportedGlobal",
          `${symbol} rebuilds with ${func === undefined ? "nothing" : describeValue(func)}, which st-convert does not interpret`,
        );
      }
      if (funcArgs === undefined || funcArgs === null || typeof funcArgs !== "object" || funcArgs.kind !== "tuple") invalid(`${symbol} has no argument tuple`);
      const tensor = rebuildTensor(func.name, funcArgs as PyTuple);
      const typeName = type !== undefined && type !== null && typeof type === "object" && type.kind === "global" ? `${type.module}.${type.name}` : undefined;
      if (typeName === undefined || !TENSOR_TYPES.has(typeName)) {
        throw new StConvertError(
          "UnsupportedGlobal",
          `a tensor is rebuilt as ${typeName ?? describeValue(type ?? null)}, a type st-convert does not interpret (Unsupported global)`,
        );
      }
      checkObjectState(args.items[3]!, charge);
      if (typeName === "torch.nn.parameter.Parameter") return typed(tensor, "Parameter");
      if (typeName === "torch.nn.parameter.Buffer") return typed(tensor, "subclass");
      return tensor;
    }
    if (symbol === "collections.OrderedDict") {
      if (args.items.length === 0) return { kind: "dict", entries: new Map(), depth: 1 };
      // OrderedDict(x) takes one mapping or iterable of pairs; what it refuses, torch.load refuses.
      if (args.items.length > 1) unpicklingError(`collections.OrderedDict is called with ${args.items.length} arguments; torch: "expected at most 1 argument"`);
      // Each call walks its argument, and may make a dict of it: a shared list given again and again pays each time.
      const given = args.items[0]!;
      if (given !== null && typeof given === "object" && (given.kind === "list" || given.kind === "tuple" || given.kind === "set")) charge(given.items.length);
      const why = dictUpdateRefusal(args.items[0]!);
      if (why !== undefined) unpicklingError(`collections.OrderedDict is called with ${describeValue(args.items[0]!)}, which it refuses (${why})`);
      return orderedDictOfPairs(given, charge);
    }
    return undefined;
  }
}

/**
 * `OrderedDict(pairs)` as Python 2's pickle wrote every `OrderedDict` (torch ≤ 1.4 under Python 2:
 * `REDUCE(collections.OrderedDict, ([[key, value], …],))`), which torch's weights-only unpickler
 * calls: a dict of the pairs, a later key replacing the value of an earlier one in its place.
 * Only a list or tuple of two-item lists or tuples is read; any other argument (a generator, a
 * mapping) stays an opaque value, its tensors refused by name.
 */
function orderedDictOfPairs(pairs: PickleValue, charge: (n: number) => void): PyDict | undefined {
  if (pairs === null || typeof pairs !== "object" || (pairs.kind !== "list" && pairs.kind !== "tuple")) return undefined;
  const items = pairs.items;
  for (const item of items) {
    if (item === null || typeof item !== "object" || (item.kind !== "list" && item.kind !== "tuple") || item.items.length !== 2) return undefined;
  }
  const dict: PyDict = { kind: "dict", entries: new Map(), depth: 1 };
  let identities = 0;
  for (const item of items) {
    const [key, value] = (item as PyTuple).items as [PickleValue, PickleValue];
    dict.entries.set(
      dictKey(key, () => `#pair${identities++}`, charge),
      { key, value },
    );
    dict.depth = Math.max(dict.depth, depthOf(key) + 1, depthOf(value) + 1);
  }
  return dict;
}

/**
 * `Parameter(data=None, requires_grad=True)` called by `REDUCE`, as `Parameter.__new__` takes it:
 * at most two arguments, a tensor as `data` (its bytes, now a Parameter) and a bool, True by
 * default, which only a floating or complex tensor may be. Without data torch makes an empty
 * tensor of no storage, which stays an opaque value here (skipped with a warning).
 */
function callParameter(args: PyTuple): PickleValue | undefined {
  const symbol = "torch.nn.parameter.Parameter";
  const n = args.items.length;
  if (n > 2)
    unpicklingError(`${symbol} is called with ${n} arguments; torch: "Parameter.__new__() takes from 1 to 3 positional arguments but ${n + 1} were given"`);
  const data = args.items[0] ?? null;
  if (data === null) return undefined;
  const tensor = asTorch(data);
  if (tensor?.kind !== "tensor") unpicklingError(`${symbol} is given ${describeValue(data)}, not a tensor; torch: "object has no attribute 'detach'"`);
  checkRequiresGrad(n === 2 ? args.items[1] : true, tensor.dtype, symbol);
  return typed(data, tensor.pythonType === "subclass" ? "subclass" : "Parameter");
}

/** The same tensor as torch.load would give it, as a Parameter or another subclass. */
function typed(tensor: PickleValue, pythonType: TensorRef["pythonType"]): PickleValue {
  return native({ ...(asTorch(tensor) as TensorRef), pythonType });
}

function unpicklingError(rule: string): never {
  throw new StConvertError("UnpicklingError", rule);
}

/**
 * `BUILD` on a tensor or a storage, by torch's weights-only rules. A `Tensor` takes
 * `set_(*state)` and a `Parameter` `__setstate__(state)`: a state of four (or five) items replaces
 * the tensor (its storage, offset, shape and strides, or its data), which no `torch.save` writes,
 * so it is refused, as are the states torch fails on; a parameter's three-item state
 * `(requires_grad, _, backward_hooks)` changes no byte. A storage's true state would update its
 * attributes (its dtype, its bytes): refused; a false one changes nothing.
 */
function buildNative(target: PyNative | PyOpaque, state: PickleValue): PickleValue | undefined {
  if (target.kind === "opaque") {
    // What torch.load would hold: a Parameter() (float32, empty), or a Tensor from a legacy constructor.
    if (target.callee === "torch.nn.parameter.Parameter") return buildParameter(target, state, TORCH_DTYPES.get("float32")!);
    if (makesTensor(target))
      unpicklingError(`BUILD on ${describeValue(target)}: torch calls set_(*state) on the tensor it makes; torch.save never writes this`);
    return undefined;
  }
  const value = target.value as TorchNative;
  if (value.kind === "storage") {
    const [dictState, slotState] = splitState(state);
    if (isTruthy(dictState) !== false || isTruthy(slotState) !== false) {
      unpicklingError(`BUILD on a storage with ${describeValue(state)} as its state: torch would set the storage's attributes from it`);
    }
    return target;
  }
  if (value.pythonType === "subclass") unpicklingError(`BUILD on a tensor subclass (${value.rebuiltBy}): torch builds only Tensor, Parameter and OrderedDict`);
  if (value.pythonType !== "Parameter") {
    unpicklingError(
      `BUILD on a tensor with ${describeValue(state)} as its state: torch calls set_(*state) on it, which rebuilds or refuses it; torch.save never writes this`,
    );
  }
  return buildParameter(target, state, value.dtype);
}

/** A parameter's `__setstate__`: a state `(requires_grad, _, backward_hooks)` changes no byte; four or five items would replace its data. */
function buildParameter(target: PyNative | PyOpaque, state: PickleValue, dtype: TorchDtype): PickleValue {
  const items = state !== null && typeof state === "object" && (state.kind === "tuple" || state.kind === "list") ? state.items : undefined;
  if (items === undefined || (items.length !== 3 && items.length !== 4 && items.length !== 5)) {
    unpicklingError(`BUILD on a parameter with ${describeValue(state)} as its state; torch: "not enough values to unpack (expected 3)"`);
  }
  if (items.length !== 3) {
    unpicklingError(
      `BUILD on a parameter with a state of ${items.length} items: torch would replace the parameter's data from it; torch.save never writes this`,
    );
  }
  checkRequiresGrad(items[0], dtype, "a parameter's BUILD state");
  return target;
}

/** Symbols torch's weights-only unpickler allows that are not types: NEWOBJ of one fails (`X is not a type object`). */
function isAllowedNonType(cls: PyGlobal): boolean {
  const symbol = `${cls.module}.${cls.name}`;
  if (cls.module === "torch._utils" && cls.name.startsWith("_rebuild_")) return true;
  if (symbol === "torch._tensor._rebuild_from_type_v2" || symbol === "torch.serialization._get_layout" || symbol === "_codecs.encode") return true;
  if (cls.module === "torch" && (TORCH_DTYPES.has(cls.name) || /^u?int[1-7]$/.test(cls.name) || cls.name.startsWith("per_"))) return true;
  return (cls.module === "torch" || cls.module === "torch.cuda") && STORAGE_CLASSES.has(cls.name);
}

/** The storage classes torch's weights-only unpickler lets a pickle call. */
const STORAGE_TYPES = new Set(["torch.storage.UntypedStorage", "torch.storage.TypedStorage"]);

/** A storage made by calling its class: refused, whatever torch would make of the arguments. */
function refuseStorageCall(symbol: string): never {
  unpicklingError(
    `${symbol} is called with arguments: st-convert builds storages only from persistent ids (torch would make one of uninitialised or copied bytes, or refuse the arguments)`,
  );
}

/** `NEWOBJ` (`cls.__new__(cls, *args)`) of a symbol, where it differs from calling it. */
function newObject(cls: PyGlobal, args: PickleValue): PickleValue | undefined {
  const symbol = `${cls.module}.${cls.name}`;
  if (STORAGE_TYPES.has(symbol) && pyTruth(args) !== false) refuseStorageCall(symbol);
  if (isAllowedNonType(cls)) {
    unpicklingError(`NEWOBJ of ${symbol}, which is not a class; torch: "__new__(X): X is not a type object"`);
  }
  // dict.__new__ ignores its arguments: an OrderedDict made this way starts empty.
  if (symbol === "collections.OrderedDict") return { kind: "dict", entries: new Map(), depth: 1 };
  return undefined;
}

/** Symbols torch's weights-only unpickler allows outside the patterns below. */
const ALLOWED_SYMBOLS: ReadonlySet<string> = new Set([
  "_codecs.encode",
  "builtins.bytearray",
  "builtins.bytes",
  "builtins.complex",
  "builtins.set",
  "collections.Counter",
  "collections.OrderedDict",
  "torch.Size",
  "torch.Tensor",
  "torch.device",
  "torch._tensor._rebuild_from_type_v2",
  "torch.nn.parameter.Parameter",
  "torch.nn.parameter.Buffer",
  "torch.serialization._get_layout",
  "torch.storage.UntypedStorage",
  "torch.storage.TypedStorage",
]);

/**
 * Whether a symbol is on torch's weights-only allow-list (torch 2.13 `_get_allowed_globals`): the
 * rebuild functions, storage and legacy tensor classes, dtypes, quantization schemes, and the few
 * containers above. Everything else a pickle names is listed by the reader (`TorchFile.globals`).
 */
export function isAllowedGlobal(module: string, name: string): boolean {
  const full = symbolName(module, name);
  if (ALLOWED_SYMBOLS.has(full)) return true;
  if (module === "torch._utils" && name.startsWith("_rebuild_")) return true;
  if (/^torch(\.cuda)?(\.sparse)?$/.test(module) && /^[A-Z][A-Za-z0-9]*(Tensor|Storage)$/.test(name)) return true;
  return module === "torch" && (TORCH_DTYPES.has(name) || /^u?int[1-7]$/.test(name) || name.startsWith("per_"));
}
