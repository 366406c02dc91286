/**
 * Discovery of frequent strings (docs/protocol.md, "Discovery" and "Prefix hashing";
 * MECHANISMS.md §13, MECHANISMS-2.md §3): PEM and TreeHist. A report is k-RR over the buckets
 * of a public hash of the value's prefix at the install's group (level).
 *
 * The group is a public assignment that must stay the same for one install, campaign, config
 * version and privacy period: pass it as `assignment.group` (derive it with {@link
 * PrefixDiscovery.groupOf} from a uniform unit below {@link PrefixDiscovery.totalWeight}, drawn
 * once per period from the install's key). Without it, `randomize` draws one afresh, which only
 * suits tests: a new group every report lets the collector intersect them.
 */
import { ConfigError } from "../config.js";
import { prefixBucket, prefixChain, prefixSeed, prefixWords, symbolsValue, valueBits } from "../hashing.js";
import type { Json } from "../json.js";
import { cryptoRandom, uniformInt, type RandomSource } from "../random.js";
import {
  bitLength, checkInt, intParam, isInt, keysAre, krrDraw, OpenStrings, PayloadError, ValueDomainError,
  type Assignment, type JsonObject, type Mechanism,
} from "./common.js";

const utf8 = new TextEncoder();

/** The walk's prefix lengths in bits (chorus_shared/mechanisms/discovery.py, prefix_lengths). */
export function prefixLengths(m: number, keep: number, stepBits: number, firstBits: number, unit: number): number[] {
  const least = bitLength(keep); // ⌊log₂ keep⌋ + 1
  const lengths = [Math.min(m, Math.max(firstBits, Math.ceil(least / unit) * unit))];
  while ((lengths.at(-1) as number) < m) lengths.push(Math.min(m, (lengths.at(-1) as number) + stepBits));
  return lengths;
}

function krrProbability(bins: number, epsilon: number): number {
  const e = Math.exp(epsilon);
  return e / (e + bins - 1);
}

export abstract class PrefixDiscovery implements Mechanism {
  abstract readonly name: string;
  readonly strings: OpenStrings;
  /** Bits per symbol: a byte, or a character code of the alphabet (0 pads). */
  readonly symbolBits: number;
  /** Symbols in the encoding, and m = their bits. */
  readonly symbols: number;
  readonly m: number;
  readonly keep: number;
  readonly firstBits: number;
  readonly stepBits: number;
  readonly bins: number;
  readonly cohorts: number;
  readonly salt: number;

  constructor(domain: JsonObject, readonly epsilon: number, params: JsonObject) {
    this.strings = new OpenStrings(domain);
    if (this.strings.maxBytes > 64) throw new ConfigError("discovery takes strings of at most 64 bytes");
    const alphabet = this.strings.alphabet;
    this.symbolBits = alphabet === undefined ? 8 : bitLength(alphabet.length);
    this.symbols = alphabet === undefined ? this.strings.maxBytes
      : Math.floor(this.strings.maxBytes / Math.min(...alphabet.map((c) => utf8.encode(c).length)));
    this.m = this.symbols * this.symbolBits;
    const top = intParam(params, "top", 1, 256);
    this.keep = intParam(params, "keep", top, 1024);
    this.firstBits = intParam(params, "first_bits", 1, 16);
    this.stepBits = intParam(params, "step_bits", 1, 16);
    this.bins = intParam(params, "bins", 2, 1024);
    this.cohorts = intParam(params, "cohorts", 1, 4096);
    this.salt = intParam(params, "salt", 0, 2 ** 31 - 1);
    if (alphabet !== undefined && (this.firstBits % this.symbolBits !== 0 || this.stepBits % this.symbolBits !== 0)) {
      throw new ConfigError("over an alphabet, first_bits and step_bits are whole characters");
    }
  }

  /** The walk's prefix lengths (whole characters over an alphabet). */
  walkLengths(): number[] {
    const unit = this.strings.alphabet === undefined ? 1 : this.symbolBits;
    return prefixLengths(this.m, this.keep, this.stepBits, this.firstBits, unit);
  }
  /** The prefix length each group reports (`derived.prefix_bits`). */
  abstract readonly lengths: number[];
  /** Each group's share of the installs, in whole units. */
  abstract readonly groupWeights: number[];

  get groups(): number {
    return this.lengths.length;
  }
  get totalWeight(): number {
    return this.groupWeights.reduce((a, b) => a + b, 0);
  }
  /** The install's group for one campaign, version and period ({@link keyedGroup}). */
  assignGroup(key: Uint8Array<ArrayBuffer>, campaign: string, digest: string, period: string): Promise<number> {
    return keyedGroup(this, key, campaign, digest, period);
  }
  /** The group a unit drawn uniformly from [0, totalWeight) falls in. */
  groupOf(unit: number): number {
    let rest = unit;
    for (const [group, weight] of this.groupWeights.entries()) {
      if (rest < weight) return group;
      rest -= weight;
    }
    throw new RangeError("unit out of range");
  }
  protected group(assignment: Assignment | undefined, rng: RandomSource): number {
    const group = assignment?.group;
    if (group === undefined) return this.groupOf(uniformInt(rng, this.totalWeight));
    if (!Number.isInteger(group) || group < 0 || group >= this.groups) throw new RangeError("group out of range");
    return group;
  }

  /** The value's m-bit string (bigint): UTF-8 bytes zero-padded, or alphabet codes. */
  encode(value: unknown): bigint {
    const text = this.strings.encode(value);
    const alphabet = this.strings.alphabet;
    if (alphabet !== undefined) {
      return symbolsValue(Array.from(text, (c) => alphabet.indexOf(c) + 1), this.symbolBits, this.symbols);
    }
    const bytes = utf8.encode(text);
    // The padding: a value with NUL could not be told from a shorter one.
    if (bytes.includes(0)) throw new ValueDomainError("a discovery campaign's values cannot contain NUL");
    return valueBits(bytes, this.strings.maxBytes);
  }
  randomValue(rng: RandomSource = cryptoRandom): string {
    return this.strings.randomValue(rng);
  }

  /** The bucket of x's s-bit prefix under hash (group, cohort), among `bins`. */
  bucket(group: number, s: number, cohort: number, bins: number, x: bigint): number {
    return prefixBucket(prefixChain(prefixSeed(this.salt, group, s), prefixWords(x, s, this.m)), cohort, bins);
  }
  protected checkInts(payload: Json, fields: string[]): { [k: string]: number } {
    if (!keysAre(payload, fields) || !fields.every((k) => isInt(payload[k]))) {
      throw new PayloadError(`a ${this.name} payload is {${fields.map((k) => `"${k}": int`).join(", ")}}`);
    }
    return Object.fromEntries(fields.map((k) => [k, payload[k] as number]));
  }
  abstract randomize(x: bigint, rng?: RandomSource, assignment?: Assignment): JsonObject;
  abstract checkPayload(payload: Json): JsonObject;
  payloadBounds(): null {
    return null;
  }
}

/** PEM: `{"g", "c", "y"}`; group G − 1 is the estimation group, which reports the whole string
 * and holds `final_share` percent of the installs. */
export class PEM extends PrefixDiscovery {
  readonly name = "pem";
  readonly finalShare: number;
  readonly lengths: number[];
  readonly groupWeights: number[];
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon, params);
    this.finalShare = intParam(params, "final_share", 5, 50);
    this.lengths = [...this.walkLengths(), this.m];
    const walk = this.lengths.length - 1;
    this.groupWeights = [...Array<number>(walk).fill(100 - this.finalShare), this.finalShare * walk];
  }
  randomize(x: bigint, rng: RandomSource = cryptoRandom, assignment?: Assignment): JsonObject {
    const g = this.group(assignment, rng);
    const c = uniformInt(rng, this.cohorts);
    const bucket = this.bucket(g, this.lengths[g] as number, c, this.bins, x);
    return { g, c, y: krrDraw(rng, bucket, this.bins, krrProbability(this.bins, this.epsilon)) };
  }
  checkPayload(payload: Json): JsonObject {
    const p = this.checkInts(payload, ["g", "c", "y"]);
    checkInt(p.g, 0, this.groups - 1, "g");
    checkInt(p.c, 0, this.cohorts - 1, "c");
    checkInt(p.y, 0, this.bins - 1, "y");
    return p;
  }
}

/** TreeHist: `{"g", "c", "y", "wc", "wy"}`: the prefix at the install's level at ε₁ =
 * ε·prefix_share/100, and the whole string (hashed with group index G) at ε − ε₁. */
export class TreeHist extends PrefixDiscovery {
  readonly name = "treehist";
  readonly prefixShare: number;
  readonly wordBins: number;
  readonly lengths: number[];
  readonly groupWeights: number[];
  readonly epsilonPrefix: number;
  readonly epsilonWord: number;
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon, params);
    this.prefixShare = intParam(params, "prefix_share", 1, 99);
    this.wordBins = intParam(params, "word_bins", 2, 1024);
    this.lengths = this.walkLengths();
    this.groupWeights = this.lengths.map(() => 1);
    this.epsilonPrefix = (epsilon * this.prefixShare) / 100;
    this.epsilonWord = epsilon - this.epsilonPrefix;
  }
  randomize(x: bigint, rng: RandomSource = cryptoRandom, assignment?: Assignment): JsonObject {
    const g = this.group(assignment, rng);
    const c = uniformInt(rng, this.cohorts);
    const bucket = this.bucket(g, this.lengths[g] as number, c, this.bins, x);
    const y = krrDraw(rng, bucket, this.bins, krrProbability(this.bins, this.epsilonPrefix));
    const wc = uniformInt(rng, this.cohorts);
    const word = this.bucket(this.groups, this.m, wc, this.wordBins, x);
    const wy = krrDraw(rng, word, this.wordBins, krrProbability(this.wordBins, this.epsilonWord));
    return { g, c, y, wc, wy };
  }
  checkPayload(payload: Json): JsonObject {
    const p = this.checkInts(payload, ["g", "c", "y", "wc", "wy"]);
    checkInt(p.g, 0, this.groups - 1, "g");
    checkInt(p.c, 0, this.cohorts - 1, "c");
    checkInt(p.y, 0, this.bins - 1, "y");
    checkInt(p.wc, 0, this.cohorts - 1, "wc");
    checkInt(p.wy, 0, this.wordBins - 1, "wy");
    return p;
  }
}

/**
 * The install's group for one campaign, config version and privacy period, from its secret
 * key (docs/protocol.md, "The discovery group"): u = HMAC-SHA256(key, "chorus-assignment-v1\0"
 * ‖ name ‖ "\0" ‖ digest ‖ "\0" ‖ period), read as a 256-bit integer, modulo the total weight
 * (a bias below 2⁻²⁴⁰), then the group whose cumulative weight first exceeds u. The same
 * label always gives the same group, no value moves it, and each config version and period
 * draws independently. The Python client seeds a Mersenne Twister with the same HMAC instead;
 * the spec lets a port derive it any way with these properties and shares.
 */
export async function keyedGroup(mechanism: PrefixDiscovery, key: Uint8Array<ArrayBuffer>, campaign: string,
  digest: string, period: string): Promise<number> {
  if (key.length < 16) throw new RangeError("the assignment key needs at least 16 bytes");
  const hmacKey = await globalThis.crypto.subtle.importKey("raw", key, { name: "HMAC", hash: "SHA-256" }, false, ["sign"]);
  const label = utf8.encode(`chorus-assignment-v1\0${campaign}\0${digest}\0${period}`);
  const mac = new Uint8Array(await globalThis.crypto.subtle.sign("HMAC", hmacKey, label));
  let u = 0n;
  for (const byte of mac) u = (u << 8n) | BigInt(byte);
  return mechanism.groupOf(Number(u % BigInt(mechanism.totalWeight)));
}
