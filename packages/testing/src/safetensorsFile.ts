const encoder = new TextEncoder();

/**
 * A safetensors file from header text and data, laid out by hand: u64 LE length, the header
 * bytes as given (no padding added), the data. `length` overrides the declared header length.
 */
export function safetensorsFile(header: string | Uint8Array, data: Uint8Array | number = 0, length?: bigint): Uint8Array {
  const headerBytes = typeof header === "string" ? encoder.encode(header) : header;
  const dataBytes = typeof data === "number" ? new Uint8Array(data) : data;
  const out = new Uint8Array(8 + headerBytes.byteLength + dataBytes.byteLength);
  new DataView(out.buffer).setBigUint64(0, length ?? BigInt(headerBytes.byteLength), true);
  out.set(headerBytes, 8);
  out.set(dataBytes, 8 + headerBytes.byteLength);
  return out;
}
