/**
 * Error codes of the npy and npz formats. Each names the rule a file broke; where numpy or
 * Python's `zipfile` has a word for it, the code is that word (`BadZipFile`, `BadCrc`).
 * Refusals are `StConvertError`s from `@st-convert/core` carrying one of these codes, or a
 * shared core code (`UnexpectedEof`, `LimitExceeded`, `Unsupported`, `DuplicateKey`,
 * `InvalidMetadata`, `InvalidArgument`, `InvalidName`).
 */
export type NpyErrorCode =
  /** The file does not start with `\x93NUMPY` (numpy: "the magic string is not correct"). */
  | "BadMagic"
  /** Format version other than 1.0, 2.0 or 3.0. */
  | "UnsupportedVersion"
  /** The header is longer than the read-side limit (numpy: "Header info length (N) is large"). */
  | "HeaderTooLarge"
  /** The header is not a Python literal, holds code, is not a dict, or is not valid text. */
  | "InvalidHeader"
  /** The header dict's keys are not exactly `descr`, `fortran_order`, `shape`. */
  | "InvalidHeaderKeys"
  /** `shape` is not a tuple of non-negative integers that fit in int64. */
  | "InvalidShape"
  /** `fortran_order` is not `True` or `False`. */
  | "InvalidFortranOrder"
  /** `descr` is not a dtype numpy knows (numpy: "descr is not a valid dtype descriptor"). */
  | "InvalidDescr"
  /** A valid numpy dtype with no safetensors equivalent (complex128, strings, objects, structured, datetime…). */
  | "UnsupportedDtype"
  /** A raw void dtype (`<V2`, `<V1`: how numpy saves ml_dtypes arrays) that nobody declared. */
  | "UndeclaredVoidDtype"
  /** A zip structure is broken: no end record, bad signatures, entries outside the file, corrupt extra fields. */
  | "BadZipFile"
  /** A member's CRC-32 differs from the one the archive records (zipfile: "Bad CRC-32"). */
  | "BadCrc"
  /** Two members share bytes, or a member overlaps the central directory. */
  | "OverlappingMembers"
  /** A member inflates to more or fewer bytes than it declares, or a stored member's sizes differ. */
  | "MemberSizeMismatch"
  /** The file is valid as two formats (an `.npy` followed by a zip archive): np.load and zipfile would read different things. */
  | "AmbiguousFormat"
  /** An archive has members but none is an npy array (a PyTorch checkpoint, a plain zip): nothing to convert. */
  | "NoArrays";
