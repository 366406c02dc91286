/**
 * The RAPPOR family (MECHANISMS.md §5, §6): Bloom-filter RAPPOR and O-RAPPOR over open
 * strings, basic and boolean RAPPOR over categories. Every report draws a fresh cohort and
 * each bit once, at r1 where the Bloom filter holds a 1 and r0 elsewhere: the permanent and
 * instantaneous responses marginalised (no memoized PRR, docs/rappor.md).
 */
import { ConfigError } from "../config.js";
import { bloomBits, googleBloomBits } from "../hashing.js";
import type { Json } from "../json.js";
import { bernoulli, cryptoRandom, uniformInt, type RandomSource } from "../random.js";
import {
  Categories, categoriesOf, checkHex, checkInt, intParam, keysAre, num, OpenStrings, PayloadError, toHex,
  type JsonObject, type Mechanism,
} from "./common.js";

/** The RAPPOR probabilities from f, p, q (google/rappor's names: q = P(1 | PRR bit 1)). */
function rates(params: JsonObject): { r1: number; r0: number } {
  const f = params.f === undefined ? 0 : num(params.f);
  const p = num(params.p);
  const q = num(params.q);
  if (![f, p, q].every(Number.isFinite) || !(f >= 0 && f < 1 && p >= 0 && p < q && q <= 1)) {
    throw new ConfigError("rappor needs 0 <= f < 1 and 0 <= p < q <= 1");
  }
  return { r1: (f * (p + q)) / 2 + (1 - f) * q, r0: (f * (p + q)) / 2 + (1 - f) * p };
}

/** What every RAPPOR payload is: `{"cohort": c, "bits": hex of k bits}`. */
abstract class BloomReport implements Mechanism {
  abstract readonly name: string;
  readonly r1: number;
  readonly r0: number;
  constructor(readonly k: number, readonly m: number, params: JsonObject) {
    ({ r1: this.r1, r0: this.r0 } = rates(params));
  }
  abstract encode(value: unknown): unknown;
  abstract randomValue(rng?: RandomSource): unknown;
  /** The Bloom filter of an encoded value in a cohort, one byte per bit. */
  abstract bloom(x: unknown, cohort: number): Uint8Array;

  randomize(x: unknown, rng: RandomSource = cryptoRandom): JsonObject {
    const cohort = this.m === 1 ? 0 : uniformInt(rng, this.m);
    const bloom = this.bloom(x, cohort);
    const bits = new Uint8Array(this.k);
    for (let i = 0; i < this.k; i++) bits[i] = bernoulli(rng, bloom[i] === 1 ? this.r1 : this.r0) ? 1 : 0;
    return { cohort, bits: toHex(bits) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["cohort", "bits"])) throw new PayloadError('a rappor payload is {"cohort": int, "bits": hex string}');
    return { cohort: checkInt(payload.cohort, 0, this.m - 1, "cohort"), bits: checkHex(payload.bits, this.k) };
  }
  payloadBounds(): null {
    return null;
  }
}

/** Bloom-filter RAPPOR (`rappor`) and O-RAPPOR (`o_rappor`: h = 1, no PRR) over open strings. */
export class Rappor extends BloomReport {
  readonly h: number;
  readonly hash: "mmh3" | "google-md5";
  readonly strings: OpenStrings;
  constructor(readonly name: "rappor" | "o_rappor", domain: JsonObject, params: JsonObject) {
    const google = params.hash === "google-md5";
    if (params.hash !== undefined && params.hash !== "mmh3" && !google) throw new ConfigError("rappor params.hash must be mmh3 or google-md5");
    const k = intParam(params, "k", 1, google ? 256 : 4096);
    super(k, intParam(params, "m", 1, 2 ** 20), params);
    this.h = name === "o_rappor" ? 1 : intParam(params, "h", 1, Math.min(k, google ? 16 : 64));
    if (name === "o_rappor" && (params.f !== undefined || params.h !== undefined)) throw new ConfigError("o_rappor has no f or h");
    this.hash = google ? "google-md5" : "mmh3";
    this.strings = new OpenStrings(domain);
  }
  encode(value: unknown): string {
    return this.strings.encode(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): string {
    return this.strings.randomValue(rng);
  }
  bloom(x: unknown, cohort: number): Uint8Array {
    const hasher = this.hash === "google-md5" ? googleBloomBits : bloomBits;
    const out = new Uint8Array(this.k);
    for (const i of hasher(x as string, cohort, this.k, this.h)) out[i] = 1;
    return out;
  }
}

/** Basic RAPPOR: one bit per category (k = d, one cohort); boolean RAPPOR: one bit for two. */
export class CategoryRappor extends BloomReport {
  readonly categories: Categories;
  constructor(readonly name: "basic_rappor" | "boolean_rappor", domain: JsonObject, params: JsonObject) {
    const categories = categoriesOf(domain);
    if (name === "boolean_rappor" ? categories.size !== 2 : categories.size < 2 || categories.size > 4096) {
      throw new ConfigError(name === "boolean_rappor" ? "boolean_rappor needs exactly 2 categories" : "basic_rappor takes 2 to 4096 categories");
    }
    super(name === "boolean_rappor" ? 1 : categories.size, 1, params);
    this.categories = categories;
  }
  encode(value: unknown): number {
    if (this.name === "boolean_rappor" && typeof value === "boolean") return value ? 1 : 0;
    return this.categories.encode(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): string {
    return this.categories.randomValue(rng);
  }
  bloom(x: unknown, _cohort: number): Uint8Array {
    const out = new Uint8Array(this.k);
    if (this.name === "boolean_rappor") out[0] = x as number; // 1 = the second category
    else out[x as number] = 1;
    return out;
  }
}

