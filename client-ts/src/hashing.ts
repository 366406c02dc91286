/** The hash functions of docs/protocol.md, "Hashing". */

const utf8 = new TextEncoder();

/** MurmurHash3 x86_32 of the bytes, as an unsigned 32-bit integer (Austin Appleby's public-domain
 * algorithm, written from its reference; checked against docs/vectors/hashing.json). */
export function murmur3x86_32(data: Uint8Array, seed: number): number {
  const c1 = 0xcc9e2d51;
  const c2 = 0x1b873593;
  let h = seed >>> 0;
  const blocks = data.length >>> 2;
  for (let b = 0; b < blocks; b++) {
    const o = b * 4;
    let k =
      ((data[o] as number) | ((data[o + 1] as number) << 8) | ((data[o + 2] as number) << 16) |
        ((data[o + 3] as number) << 24)) >>> 0;
    k = Math.imul(k, c1);
    k = (k << 15) | (k >>> 17);
    k = Math.imul(k, c2);
    h ^= k;
    h = (h << 13) | (h >>> 19);
    h = (Math.imul(h, 5) + 0xe6546b64) | 0;
  }
  const tail = blocks * 4;
  let k = 0;
  switch (data.length & 3) {
    case 3:
      k ^= (data[tail + 2] as number) << 16;
    // falls through
    case 2:
      k ^= (data[tail + 1] as number) << 8;
    // falls through
    case 1:
      k ^= data[tail] as number;
      k = Math.imul(k, c1);
      k = (k << 15) | (k >>> 17);
      k = Math.imul(k, c2);
      h ^= k;
  }
  h ^= data.length;
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The h Bloom positions of a string in a cohort: murmur3(utf8(v), c·64 + i) mod k. */
export function bloomBits(value: string, cohort: number, k: number, h: number): number[] {
  if (!Number.isInteger(cohort) || cohort < 0 || cohort >= 2 ** 20) throw new RangeError("cohort must be in [0, 2^20)");
  if (!Number.isInteger(h) || h < 1 || h > 64) throw new RangeError("h must be in [1, 64]");
  const bytes = utf8.encode(value);
  const out: number[] = [];
  for (let i = 0; i < h; i++) out.push(murmur3x86_32(bytes, cohort * 64 + i) % k);
  return out;
}

/** OLH's local hash ((a·v + b) mod P) mod g, in exact integer arithmetic. */
export function localHash(a: number, b: number, v: number, prime: number, g: number): number {
  return Number(((BigInt(a) * BigInt(v) + BigInt(b)) % BigInt(prime)) % BigInt(g));
}

function popcount(x: number): number {
  let n = 0;
  for (let y = x >>> 0; y !== 0; y &= y - 1) n++;
  return n;
}

/** H_K[row][column] as a payload bit: 1 for +1 (popcount of row AND column even), 0 for −1. */
export function hadamardSign(row: number, column: number): 0 | 1 {
  return popcount(row & column) % 2 === 0 ? 1 : 0;
}

/** Whether `hr`'s output y lies in C_x = {y : H_K[x+1][y] = +1}. */
export function hrInBlock(x: number, y: number): boolean {
  return hadamardSign(x + 1, y) === 1;
}
