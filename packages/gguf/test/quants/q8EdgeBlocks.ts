import type { Random } from "@st-convert/testing";

/** The next float32 above (dir 1) or below (dir −1) x, for x finite and not 0. */
function nextFloat(x: number, dir: 1 | -1): number {
  const f = new Float32Array([x]);
  const u = new Int32Array(f.buffer);
  u[0] = u[0]! + (x > 0 ? dir : -dir);
  return f[0]!;
}

/**
 * Blocks of 32 made for Q8_0's edges: exact ties of x·id at k + ½ (amax 127·2^e makes d = 2^e and
 * id exact) and the floats beside them, both signs; the block's amax at either sign and repeated;
 * zeros, negative zeros, subnormals (values, and a d below f16's normal range), d past f16's range
 * and at its rounding edges, d halfway between two f16s or a float beside that, infinities, NaN first, inside or last (ggml's MAX takes a NaN in and
 * the next number out of it), and random blocks of random scales.
 */
export function q8EdgeBlocks(random: Random, count: number): Float32Array {
  const out = new Float32Array(count * 32);
  for (let b = 0; b < count; b++) {
    const block = out.subarray(b * 32, b * 32 + 32);
    const kind = random.int(13);
    const e = random.range(-30, 30);
    const scale = 2 ** e;
    for (let j = 0; j < 32; j++) block[j] = (random.uint32() / 2 ** 32 - 0.5) * 2 * 127 * scale;
    switch (kind) {
      case 0: // ties and their neighbours
      case 1:
        block[0] = (kind === 0 ? 127 : -127) * scale;
        for (let j = 1; j < 32; j++) {
          const tie = (random.int(127) + 0.5) * (random.chance(0.5) ? 1 : -1) * scale;
          block[j] = random.chance(0.5) ? tie : nextFloat(tie, random.chance(0.5) ? 1 : -1);
        }
        break;
      case 2: // amax at both signs, repeated
        block[random.int(32)] = 127 * scale;
        block[random.int(32)] = -127 * scale;
        break;
      case 3:
        block.fill(random.chance(0.5) ? 0 : -0);
        if (random.chance(0.5)) block[random.int(32)] = random.chance(0.5) ? -0 : 0;
        break;
      case 4: // subnormal values, and a d below f16's normal range
        for (let j = 0; j < 32; j++) block[j] = random.chance(0.5) ? random.range(-1000, 1000) * 1e-45 : (random.uint32() / 2 ** 32 - 0.5) * 1e-3;
        break;
      case 5: // d past f16's range and at its rounding edges (65504 is the largest f16; 65520 rounds to infinity)
        block[0] = [65504, 65519.99, 65520, 1e30, 3.4028234663852886e38][random.int(5)]! * 127 * (random.chance(0.5) ? 1 : -1);
        break;
      case 6: // a scale on the f16 subnormal/normal border
        block[0] = 2 ** -14 * 127 * [1, 0.99999, 1.00001][random.int(3)]!;
        break;
      case 7:
        block[random.int(32)] = random.chance(0.5) ? Number.POSITIVE_INFINITY : Number.NEGATIVE_INFINITY;
        break;
      case 8:
        block[[0, random.int(32), 31][random.int(3)]!] = Number.NaN;
        if (random.chance(0.3)) block[random.int(32)] = Number.POSITIVE_INFINITY;
        break;
      case 9: {
        // d = amax / 127 halfway between two normal f16s (bit 12 of its float32 set, below it none), or beside that
        const h = 0x0400 + random.int(0x7800);
        const bits = new Int32Array([(((h >> 10) - 15 + 127) << 23) | ((h & 0x3ff) << 13) | 0x1000]);
        let d = new Float32Array(bits.buffer)[0]!;
        if (random.chance(0.5)) d = nextFloat(d, random.chance(0.5) ? 1 : -1);
        let amax = Math.fround(d * 127);
        for (let tries = 0; tries < 8 && Math.fround(amax / 127) !== d; tries++) amax = nextFloat(amax, Math.fround(amax / 127) < d ? 1 : -1);
        for (let j = 0; j < 32; j++) block[j] = Math.fround((random.uint32() / 2 ** 32 - 0.5) * 2 * amax);
        block[random.int(32)] = random.chance(0.5) ? amax : -amax;
        break;
      }
      default:
        break;
    }
  }
  return out;
}
