/**
 * Faster versions of hot loops that a runtime may install, for the browser-safe code to use when
 * they are there: under Node, `@st-convert/core/node` installs the native module's CRC-32 when it
 * loads (`@st-convert/native`). Everything has a portable path; these only change its speed.
 */
export interface Kernels {
  /** CRC-32 (ISO-HDLC, as zip uses it) of `bytes`, continuing from `previous` (default 0). */
  crc32?: (bytes: Uint8Array, previous?: number) => number;
}

/** The kernels installed in this runtime (a module-wide registry: one per process or worker). */
export const kernels: Kernels = {};
