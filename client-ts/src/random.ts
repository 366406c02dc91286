/**
 * Randomness. Reports use the platform CSPRNG (`crypto.getRandomValues`) only; a seeded
 * source exists for tests that must reproduce a draw, and is never the default.
 */

/** Fills a byte array with random bytes. */
export interface RandomSource {
  fill(bytes: Uint8Array<ArrayBuffer>): void;
}

/** The platform CSPRNG: WebCrypto's getRandomValues (browsers, Node ≥ 19, Deno, workers). */
export const cryptoRandom: RandomSource = {
  fill(bytes: Uint8Array<ArrayBuffer>): void {
    // getRandomValues refuses more than 65536 bytes at once.
    for (let o = 0; o < bytes.length; o += 65536) {
      globalThis.crypto.getRandomValues(bytes.subarray(o, Math.min(bytes.length, o + 65536)));
    }
  },
};

/**
 * A seeded xoshiro128** generator (seeded through SplitMix32). FOR TESTS ONLY: its output is
 * predictable, and a predictable coin undoes the privacy of every report drawn with it.
 */
export function seededRandomForTests(seed: number): RandomSource {
  let z = seed >>> 0;
  const split = () => {
    z = (z + 0x9e3779b9) | 0;
    let t = z ^ (z >>> 16);
    t = Math.imul(t, 0x21f0aaad);
    t ^= t >>> 15;
    t = Math.imul(t, 0x735a2d97);
    return (t ^ (t >>> 15)) >>> 0;
  };
  const s = [split(), split(), split(), split()] as [number, number, number, number];
  const next = (): number => {
    const r = Math.imul(rotl(Math.imul(s[1], 5), 7), 9) >>> 0;
    const t = s[1] << 9;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 11);
    return r;
  };
  return {
    fill(bytes: Uint8Array<ArrayBuffer>): void {
      for (let i = 0; i < bytes.length; i += 4) {
        const r = next();
        for (let j = 0; j < 4 && i + j < bytes.length; j++) bytes[i + j] = (r >>> (8 * j)) & 0xff;
      }
    },
  };
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

/** An unsigned integer of `bits` random bits (bits ≤ 53). */
export function randomBits(rng: RandomSource, bits: number): number {
  if (!Number.isInteger(bits) || bits < 0 || bits > 53) throw new RangeError("bits must be in [0, 53]");
  const bytes = new Uint8Array(Math.ceil(bits / 8));
  rng.fill(bytes);
  // Keep only `bits` bits: mask the first (most significant) byte, so that x stays below
  // 2^53 and every step is exact in a double.
  if (bytes.length > 0) bytes[0] = (bytes[0] as number) & (0xff >>> (bytes.length * 8 - bits));
  let x = 0;
  for (const b of bytes) x = x * 256 + b;
  return x;
}

/** A uniform integer in [0, n), by rejection: no modulo bias, for any n up to 2^53. */
export function uniformInt(rng: RandomSource, n: number): number {
  if (!Number.isSafeInteger(n) || n < 1) throw new RangeError("n must be a positive safe integer");
  if (n === 1) return 0;
  let bits = 0;
  while (2 ** bits < n) bits++; // the least bits with 2^bits ≥ n
  for (;;) {
    const x = randomBits(rng, bits);
    if (x < n) return x; // accepted with probability n / 2^bits > 1/2
  }
}

/** True with probability p: a 53-bit uniform u ∈ [0, 1) compared with p (error below 2^-53,
 * as the Python client's `bernoulli`). */
export function bernoulli(rng: RandomSource, p: number): boolean {
  return randomBits(rng, 53) * 2 ** -53 < p;
}

/** `count` random bytes as lowercase hex. */
export function randomHex(rng: RandomSource, count: number): string {
  const bytes = new Uint8Array(count);
  rng.fill(bytes);
  return Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** A uniform double in [0, 1) with 53 random bits (Python's `random()`). */
export function uniform01(rng: RandomSource): number {
  return randomBits(rng, 53) * 2 ** -53;
}

/** A uniform bigint in [0, n), by rejection (no modulo bias), for any positive n. */
export function uniformBigInt(rng: RandomSource, n: bigint): bigint {
  if (n < 1n) throw new RangeError("n must be a positive integer");
  if (n === 1n) return 0n;
  const bits = (n - 1n).toString(2).length; // the least bits with 2^bits ≥ n
  const bytes = new Uint8Array(Math.ceil(bits / 8));
  const excess = bytes.length * 8 - bits;
  for (;;) {
    rng.fill(bytes);
    bytes[0] = (bytes[0] as number) & (0xff >>> excess);
    let x = 0n;
    for (const b of bytes) x = (x << 8n) | BigInt(b);
    if (x < n) return x; // accepted with probability n / 2^bits > 1/2
  }
}

/** A uniformly random k-subset of [0, n), sorted (Floyd's algorithm: k draws, no bias). */
export function sampleDistinct(rng: RandomSource, n: number, k: number): number[] {
  if (!Number.isSafeInteger(k) || k < 0 || k > n) throw new RangeError("need 0 <= k <= n");
  const chosen = new Set<number>();
  for (let j = n - k; j < n; j++) {
    const t = uniformInt(rng, j + 1);
    chosen.add(chosen.has(t) ? j : t);
  }
  return [...chosen].sort((a, b) => a - b);
}
