/**
 * Error codes of the PyTorch checkpoint formats. Each names the rule a file broke; where Python
 * or torch has a word for it, the code is that word (`UnpicklingError`, torch's weights-only
 * "Unsupported global"). Refusals are `StConvertError`s from `@st-convert/core` carrying one of
 * these codes, a zip code of the npz reader this package reuses (`BadZipFile`, `BadCrc`,
 * `OverlappingMembers`, `MemberSizeMismatch`), or a shared core code (`UnexpectedEof`,
 * `LimitExceeded`, `Unsupported`, `DuplicateKey`, `InvalidName`, `InvalidArgument`,
 * `InvalidIndex`, `TensorNotFound`).
 */
export type TorchErrorCode =
  /**
   * The pickle is malformed, or fails when torch loads it: an unknown or refused opcode, a stack or
   * mark underflow, a missing memo entry, an operand of the wrong type, an unhashable dict key, a
   * storage class or dtype called.
   */
  | "UnpicklingError"
  /** A tensor or storage flows into a callable st-convert does not interpret (it runs none): the symbol is named. */
  | "UnsupportedGlobal"
  /**
   * The pickle names a callable that runs code or reaches the system when Python unpickles it
   * (`os.system`, `builtins.eval`, `subprocess.Popen`, …): st-convert never calls it, and refuses
   * the file so that it is not taken for a good checkpoint.
   */
  | "DangerousGlobal"
  /** A persistent id that is not a storage, an unknown storage class, one storage key declared two ways. */
  | "InvalidStorage"
  /** A storage a tensor needs is not in the file (no zip member, not in the legacy key list). */
  | "MissingStorage"
  /** A storage's bytes are not the length its element count and class say (a member or a legacy record too short or too long). */
  | "StorageSizeMismatch"
  /** A rebuild call with malformed arguments, or a view (offset, size, strides) that reaches past its storage. */
  | "InvalidTensor"
  /** A torch dtype without a safetensors equivalent (complex128, complex32, quantized, bits, sub-byte types). */
  | "UnsupportedDtype"
  /** The file is something else: a safetensors file or a Git LFS pointer saved as `.bin`, an `.npz`, any other file (the message says which). */
  | "NotACheckpoint"
  /**
   * The container is not a checkpoint torch reads: a record outside the root folder, no `version`
   * record or one torch cannot parse, a `byteorder` other than exactly `little`/`big`, a
   * `.storage_alignment` that is not an int, no `data.pkl` in the root, a legacy file with a wrong
   * magic number or protocol or an unordered key list.
   */
  | "InvalidCheckpoint"
  /** A distributed checkpoint's `.metadata` is not DCP's structure (a field missing or of the wrong type, a chunk with no storage entry). */
  | "InvalidDcpMetadata"
  /** A tensor's chunks do not tile it exactly: a hole no rank saved, two chunks sharing elements, a chunk past the tensor's edge. */
  | "ChunksDoNotTile"
  /** A chunk's record holds another dtype or shape than the metadata says, or not exactly one tensor. */
  | "ChunkMismatch"
  /** A storage entry's range (offset, length) passes the end of its file. */
  | "StoragePastEnd"
  /** A storage entry's `relative_path` leaves the checkpoint's folder (absolute, `..`) or names something that is not a regular file. */
  | "InvalidRelativePath"
  /** A storage entry's bytes pass through transforms (`transform_descriptors`: compression…) st-convert does not implement. */
  | "UnsupportedTransform";
