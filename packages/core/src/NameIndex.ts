/**
 * A set of names that knows each one's position: the duplicate check of a header and the lookup
 * by name of its tensors.
 *
 * Not a `Map`: filling one with 600,000 fresh strings costs 0.3–0.6 µs per name on Node 20 (its
 * growth and chains) and about 40 bytes each; this open-addressing table over a seeded hash costs
 * under 0.2 µs and 12–20 bytes. A probe longer than {@link MAX_PROBE} (names crafted to collide)
 * turns it into a `Map`, whose hash V8 seeds per process, so no input makes it quadratic.
 */

/** Longest probe sequence before the table hands over to a `Map`. */
const MAX_PROBE = 64;

export class NameIndex {
  /** The names, by position. */
  readonly names: string[] = [];
  #hashes = new Uint32Array(64);
  /** Position + 1 of the name in each slot, 0 for an empty slot; load kept at most 1/2. */
  #slots = new Int32Array(128);
  #map: Map<string, number> | undefined;
  readonly #seed = (Math.random() * 2 ** 32) >>> 0;

  get size(): number {
    return this.names.length;
  }

  /** Adds `name` at the next position; false (and nothing added) if it is there already. */
  add(name: string): boolean {
    if (this.#map !== undefined) return this.#addToMap(name);
    const hash = this.#hash(name);
    const slots = this.#slots;
    const mask = slots.length - 1;
    let slot = hash & mask;
    for (let probe = 0; ; probe++) {
      const at = slots[slot]!;
      if (at === 0) break;
      if (this.#hashes[at - 1] === hash && this.names[at - 1] === name) return false;
      if (probe === MAX_PROBE) {
        this.#map = new Map(this.names.map((n, i) => [n, i]));
        this.#slots = new Int32Array(0);
        this.#hashes = new Uint32Array(0);
        return this.#addToMap(name);
      }
      slot = (slot + 1) & mask;
    }
    const index = this.names.length;
    this.names.push(name);
    if (index === this.#hashes.length) {
      const hashes = new Uint32Array(index * 2);
      hashes.set(this.#hashes);
      this.#hashes = hashes;
    }
    this.#hashes[index] = hash;
    slots[slot] = index + 1;
    if ((index + 1) * 2 > slots.length) this.#rehash();
    return true;
  }

  /** The position of `name`, or -1. */
  get(name: string): number {
    if (this.#map !== undefined) return this.#map.get(name) ?? -1;
    const hash = this.#hash(name);
    const slots = this.#slots;
    const mask = slots.length - 1;
    for (let slot = hash & mask; ; slot = (slot + 1) & mask) {
      const at = slots[slot]!;
      if (at === 0) return -1;
      if (this.#hashes[at - 1] === hash && this.names[at - 1] === name) return at - 1;
    }
  }

  #addToMap(name: string): boolean {
    const map = this.#map!;
    if (map.has(name)) return false;
    map.set(name, this.names.length);
    this.names.push(name);
    return true;
  }

  #rehash(): void {
    const slots = new Int32Array(this.#slots.length * 2);
    const mask = slots.length - 1;
    for (let i = 0; i < this.names.length; i++) {
      let slot = this.#hashes[i]! & mask;
      while (slots[slot] !== 0) slot = (slot + 1) & mask;
      slots[slot] = i + 1;
    }
    this.#slots = slots;
  }

  /** FNV-1a over the UTF-16 units from a random basis, then a final mix for the low bits. */
  #hash(name: string): number {
    let h = this.#seed ^ 0x811c9dc5;
    for (let k = 0; k < name.length; k++) h = Math.imul(h ^ name.charCodeAt(k), 0x01000193);
    h ^= h >>> 15;
    h = Math.imul(h, 0x2c1b3c6d);
    h ^= h >>> 12;
    return h >>> 0;
  }
}
