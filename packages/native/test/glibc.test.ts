/**
 * The built module loads on glibc 2.28 and later (Debian 10, Ubuntu 20.04, RHEL 8): no symbol it
 * takes from a system library may need a newer symbol version. Read from the ELF file's own
 * version-needed section (.gnu.version_r), so no binutils are needed to check it.
 */
import { existsSync, readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";

const built = new URL("../dist/fastio.node", import.meta.url);

const SHT_GNU_VERNEED = 0x6ffffffe;

/** Each library the ELF file needs symbol versions from, with those versions (`libc.so.6` → `GLIBC_2.14`, …). */
function neededVersions(elf: Buffer): Map<string, string[]> {
  expect(elf.subarray(0, 4).toString("latin1")).toBe("\x7fELF");
  expect(elf[4], "a 64-bit ELF file").toBe(2);
  expect(elf[5], "little-endian").toBe(1);
  const sectionOffset = Number(elf.readBigUInt64LE(0x28));
  const sectionSize = elf.readUInt16LE(0x3a);
  const sectionCount = elf.readUInt16LE(0x3c);
  const section = (i: number) => {
    const at = sectionOffset + i * sectionSize;
    return {
      type: elf.readUInt32LE(at + 4),
      offset: Number(elf.readBigUInt64LE(at + 0x18)),
      link: elf.readUInt32LE(at + 0x28),
      info: elf.readUInt32LE(at + 0x2c),
    };
  };
  const needed = new Map<string, string[]>();
  for (let i = 0; i < sectionCount; i++) {
    const verneed = section(i);
    if (verneed.type !== SHT_GNU_VERNEED) continue;
    const strings = section(verneed.link).offset;
    const name = (at: number) => elf.toString("latin1", strings + at, elf.indexOf(0, strings + at));
    // Elf64_Verneed: vn_version, vn_cnt (u16), vn_file, vn_aux, vn_next (u32); Elf64_Vernaux: vna_hash (u32), vna_flags, vna_other (u16), vna_name, vna_next (u32).
    let entry = verneed.offset;
    for (let n = 0; n < verneed.info; n++) {
      const versions: string[] = [];
      let aux = entry + elf.readUInt32LE(entry + 8);
      for (let k = 0; k < elf.readUInt16LE(entry + 2); k++) {
        versions.push(name(elf.readUInt32LE(aux + 8)));
        aux += elf.readUInt32LE(aux + 12);
      }
      needed.set(name(elf.readUInt32LE(entry + 4)), versions);
      entry += elf.readUInt32LE(entry + 12);
    }
  }
  return needed;
}

/** `GLIBC_2.3.2` → [2, 3, 2]. */
function versionNumbers(version: string): number[] {
  return version.slice("GLIBC_".length).split(".").map(Number);
}

function newerThan(a: number[], b: number[]): boolean {
  for (let i = 0; i < Math.max(a.length, b.length); i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) > (b[i] ?? 0);
  return false;
}

describe.skipIf(!existsSync(built))("the built module's glibc symbol versions", () => {
  it("needs no glibc newer than 2.28 (the pthread functions glibc 2.34 versioned anew are pinned to their first versions)", () => {
    const needed = neededVersions(readFileSync(built));
    const glibc = [...needed.values()].flat().filter((v) => v.startsWith("GLIBC_") && /^GLIBC_[\d.]+$/.test(v));
    // The reader sees the versions: the kernel copy alone needs GLIBC_2.27 (copy_file_range).
    expect(glibc).toContain("GLIBC_2.27");
    expect(glibc.filter((v) => newerThan(versionNumbers(v), [2, 28]))).toEqual([]);
  });
});
