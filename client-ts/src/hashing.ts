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

/* MD5 (RFC 1321), written here: WebCrypto has no MD5, and google/rappor's Bloom hashing
 * needs it. Never used for security, only to reproduce that public hash bit for bit. */
const MD5_SHIFTS = [7, 12, 17, 22, 5, 9, 14, 20, 4, 11, 16, 23, 6, 10, 15, 21];
const MD5_K = Array.from({ length: 64 }, (_, i) => Math.floor(Math.abs(Math.sin(i + 1)) * 2 ** 32) >>> 0);

/** The 16-byte MD5 digest of the bytes. */
export function md5(data: Uint8Array): Uint8Array {
  const padded = new Uint8Array(Math.ceil((data.length + 9) / 64) * 64);
  padded.set(data);
  padded[data.length] = 0x80;
  const view = new DataView(padded.buffer);
  const bitLength = data.length * 8;
  view.setUint32(padded.length - 8, bitLength >>> 0, true);
  view.setUint32(padded.length - 4, Math.floor(bitLength / 2 ** 32), true);
  let a0 = 0x67452301;
  let b0 = 0xefcdab89;
  let c0 = 0x98badcfe;
  let d0 = 0x10325476;
  for (let block = 0; block < padded.length; block += 64) {
    let a = a0;
    let b = b0;
    let c = c0;
    let d = d0;
    for (let i = 0; i < 64; i++) {
      let f: number;
      let g: number;
      if (i < 16) {
        f = (b & c) | (~b & d);
        g = i;
      } else if (i < 32) {
        f = (d & b) | (~d & c);
        g = (5 * i + 1) % 16;
      } else if (i < 48) {
        f = b ^ c ^ d;
        g = (3 * i + 5) % 16;
      } else {
        f = c ^ (b | ~d);
        g = (7 * i) % 16;
      }
      const sum = (a + f + (MD5_K[i] as number) + view.getUint32(block + 4 * g, true)) | 0;
      const s = MD5_SHIFTS[(i >> 4) * 4 + (i % 4)] as number;
      a = d;
      d = c;
      c = b;
      b = (b + ((sum << s) | (sum >>> (32 - s)))) | 0;
    }
    a0 = (a0 + a) | 0;
    b0 = (b0 + b) | 0;
    c0 = (c0 + c) | 0;
    d0 = (d0 + d) | 0;
  }
  const out = new Uint8Array(16);
  const outView = new DataView(out.buffer);
  [a0, b0, c0, d0].forEach((word, i) => outView.setUint32(4 * i, word >>> 0, true));
  return out;
}

/** google/rappor's Bloom bits: D = MD5(cohort as 4 big-endian bytes ‖ utf8(v)), bit i = D[i] mod k. */
export function googleBloomBits(value: string, cohort: number, k: number, h: number): number[] {
  if (!Number.isInteger(cohort) || cohort < 0 || cohort >= 2 ** 32) throw new RangeError("cohort must fit 32 bits");
  if (!Number.isInteger(h) || h < 1 || h > 16) throw new RangeError("h must be in [1, 16]");
  const bytes = utf8.encode(value);
  const input = new Uint8Array(4 + bytes.length);
  new DataView(input.buffer).setUint32(0, cohort, false);
  input.set(bytes, 4);
  const digest = md5(input);
  return Array.from(digest.subarray(0, h), (byte) => byte % k);
}

/* Prefix hashing of the discovery mechanisms (pem, treehist): unsigned 64-bit arithmetic. */
const U64 = (x: bigint) => BigInt.asUintN(64, x);
const GOLDEN = 0x9e3779b97f4a7c15n;
const GROUP_STEP = 0xaef17502108ef2d9n;
const COHORT_STEP = 0xd1b54a32d192ed03n;

/** SplitMix64's finaliser. */
export function mix64(z: bigint): bigint {
  z = U64((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n);
  z = U64((z ^ (z >> 27n)) * 0x94d049bb133111ebn);
  return z ^ (z >> 31n);
}

/** A value's m-bit string from its UTF-8 bytes zero-padded to `maxBytes` (big-endian). */
export function valueBits(bytes: Uint8Array, maxBytes: number): bigint {
  if (bytes.length > maxBytes) throw new RangeError("longer than max_bytes");
  let x = 0n;
  for (let i = 0; i < maxBytes; i++) x = (x << 8n) | BigInt(bytes[i] ?? 0);
  return x;
}

/** A value over an alphabet: each character's code (1…|A|) in `width` bits, then zero codes up to `count`. */
export function symbolsValue(codes: number[], width: number, count: number): bigint {
  let x = 0n;
  for (let i = 0; i < count; i++) x = (x << BigInt(width)) | BigInt(codes[i] ?? 0);
  return x;
}

/** The s-bit prefix of an m-bit string, left-aligned, as big-endian 64-bit words. */
export function prefixWords(bits: bigint, s: number, m: number): bigint[] {
  const width = 64 * Math.ceil(m / 64);
  const aligned = s === 0 ? 0n : (bits >> BigInt(m - s)) << BigInt(width - s);
  return Array.from({ length: width / 64 }, (_, i) => U64(aligned >> BigInt(width - 64 * (i + 1))));
}

/** The chain's start for a group and prefix length. */
export function prefixSeed(salt: number, group: number, s: number): bigint {
  return mix64(U64(BigInt(salt) * GOLDEN + BigInt(group + 1) * GROUP_STEP + BigInt(s)));
}

/** mix64 chained over the words from `start`. */
export function prefixChain(start: bigint, words: bigint[]): bigint {
  let z = start;
  for (const w of words) z = mix64(z ^ w);
  return z;
}

/** The bucket of a chained prefix in a cohort, among `bins` (Lemire's multiply-shift). */
export function prefixBucket(chained: bigint, cohort: number, bins: number): number {
  const z = mix64(chained ^ U64(BigInt(cohort + 1) * COHORT_STEP));
  return Number(((z >> 32n) * BigInt(bins)) >> 32n);
}
