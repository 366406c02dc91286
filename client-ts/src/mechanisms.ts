/**
 * The common mechanisms' client halves: encode an app value, randomize it with exact samplers
 * drawing from a {@link RandomSource} (the CSPRNG unless a test passes another), and check a
 * payload's shape (docs/protocol.md, "Payloads"; probabilities from docs/MECHANISMS.md).
 */
import { localHash } from "./hashing.js";
import { ConfigError } from "./config.js";
import { JsonFloat, type Json } from "./json.js";
import { bernoulli, cryptoRandom, uniformInt, type RandomSource } from "./random.js";

/** The value cannot be reported by this campaign. The message never includes the value. */
export class ValueDomainError extends Error {
  override name = "ValueDomainError";
}

/** A payload that does not have its mechanism's shape. */
export class PayloadError extends Error {
  override name = "PayloadError";
}

export interface Mechanism {
  readonly name: string;
  /** The randomizer's input for an app value; {@link ValueDomainError} if there is none. */
  encode(value: unknown): number;
  /** One randomized payload for an encoded input. */
  randomize(x: number, rng?: RandomSource): Json;
  /** The payload, if it has this mechanism's shape; {@link PayloadError} otherwise. */
  checkPayload(payload: Json): Json;
}

type JsonObject = { [key: string]: Json };

const isInt = (v: Json | undefined): v is number => typeof v === "number" && Number.isSafeInteger(v);

function keysAre(v: Json, keys: string[]): v is JsonObject {
  if (typeof v !== "object" || v === null || Array.isArray(v) || v instanceof JsonFloat) return false;
  const own = Object.keys(v).sort();
  return own.length === keys.length && [...keys].sort().every((k, i) => own[i] === k);
}

function num(v: Json | undefined): number {
  return v instanceof JsonFloat ? v.value : (v as number);
}

/** A closed list of categories: the index of a value, or of `other`. */
class Categories {
  readonly values: string[];
  readonly other: string | undefined;
  private readonly index: Map<string, number>;

  constructor(domain: JsonObject) {
    if (domain.kind !== "categories" || !Array.isArray(domain.values)) {
      throw new ConfigError("this mechanism takes a categories domain");
    }
    this.values = domain.values.map(String);
    this.other = typeof domain.other === "string" ? domain.other : undefined;
    this.index = new Map(this.values.map((v, i) => [v, i]));
  }

  get size(): number {
    return this.values.length;
  }

  encode(value: unknown): number {
    if (typeof value === "string") {
      const i = this.index.get(value);
      if (i !== undefined) return i;
    }
    if (this.other !== undefined) return this.index.get(this.other) as number;
    throw new ValueDomainError(
      `the value is not one of this campaign's ${this.size} categories, and the campaign has no 'other' category`,
    );
  }
}

/** k-RR (and Warner's RR for d = 2): keep x with p = e^ε/(e^ε + d − 1), else one of the other d − 1. */
class KRR implements Mechanism {
  readonly p: number;
  constructor(readonly name: string, readonly categories: Categories, readonly epsilon: number) {
    const e = Math.exp(epsilon);
    this.p = e / (e + categories.size - 1);
  }
  encode(value: unknown): number {
    if (this.name === "rr" && typeof value === "boolean") return value ? 1 : 0;
    return this.categories.encode(value);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): number {
    if (bernoulli(rng, this.p)) return x;
    const lie = uniformInt(rng, this.categories.size - 1); // uniform over the other d − 1
    return lie >= x ? lie + 1 : lie;
  }
  checkPayload(payload: Json): number {
    if (!isInt(payload)) throw new PayloadError(`a ${this.name} payload is a category index (integer)`);
    if (payload < 0 || payload >= this.categories.size) throw new PayloadError("category index out of range");
    return payload;
  }
}

/** Unary encoding (SUE, OUE): every bit at q, the true bit at p; `{"bits": hex}`, bit i = 2^i. */
class UnaryEncoding implements Mechanism {
  readonly p: number;
  readonly q: number;
  constructor(readonly name: "sue" | "oue", readonly categories: Categories, readonly epsilon: number) {
    if (name === "sue") {
      const z = Math.exp(epsilon / 2);
      this.p = z / (z + 1);
      this.q = 1 / (z + 1);
    } else {
      this.p = 0.5;
      this.q = 1 / (Math.exp(epsilon) + 1);
    }
  }
  encode(value: unknown): number {
    return this.categories.encode(value);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const d = this.categories.size;
    const bits = new Uint8Array(d);
    for (let i = 0; i < d; i++) bits[i] = bernoulli(rng, i === x ? this.p : this.q) ? 1 : 0;
    return { bits: toHex(bits) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["bits"])) throw new PayloadError(`a ${this.name} payload is {"bits": hex string}`);
    checkHex(payload.bits, this.categories.size);
    return { bits: payload.bits as string };
  }
}

/** Bits (index i = value 2^i) as lowercase hex of width ⌈n/4⌉. */
export function toHex(bits: Uint8Array): string {
  const width = Math.ceil(bits.length / 4);
  let out = "";
  for (let digit = width - 1; digit >= 0; digit--) {
    let v = 0;
    for (let j = 3; j >= 0; j--) v = v * 2 + (bits[digit * 4 + j] ?? 0);
    out += v.toString(16);
  }
  return out;
}

function checkHex(v: Json | undefined, n: number): void {
  const width = Math.ceil(n / 4);
  const ok =
    typeof v === "string" &&
    v.length === width &&
    /^[0-9a-f]*$/.test(v) &&
    (n % 4 === 0 || width === 0 || parseInt(v[0] as string, 16) >> n % 4 === 0);
  if (!ok) throw new PayloadError(`bits must be ${width} lowercase hex digits below 2**${n}`);
}

/** Local hashing (OLH, BLH): a, b uniform; k-RR over the g buckets of ((a·x + b) mod P) mod g. */
class LocalHashing implements Mechanism {
  readonly prime: number;
  readonly g: number;
  readonly p: number;
  constructor(readonly name: "olh" | "blh", readonly categories: Categories, readonly epsilon: number, params: JsonObject) {
    if (!isInt(params.prime) || !isInt(params.g) || params.g < 2 || params.prime <= categories.size) {
      throw new ConfigError(`${name} needs integer params prime > d and g ≥ 2`);
    }
    this.prime = params.prime;
    this.g = params.g;
    const e = Math.exp(epsilon);
    this.p = e / (e + this.g - 1);
  }
  encode(value: unknown): number {
    return this.categories.encode(value);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const a = 1 + uniformInt(rng, this.prime - 1);
    const b = uniformInt(rng, this.prime);
    const bucket = localHash(a, b, x, this.prime, this.g);
    let y = bucket;
    if (!bernoulli(rng, this.p)) {
      const other = uniformInt(rng, this.g - 1);
      y = other >= bucket ? other + 1 : other;
    }
    return { a, b, y };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["a", "b", "y"]) || !isInt(payload.a) || !isInt(payload.b) || !isInt(payload.y)) {
      throw new PayloadError(`a ${this.name} payload is {"a": int, "b": int, "y": int}`);
    }
    const { a, b, y } = payload as { a: number; b: number; y: number };
    if (!(a >= 1 && a < this.prime && b >= 0 && b < this.prime && y >= 0 && y < this.g)) {
      throw new PayloadError(`need 1 <= a < ${this.prime}, 0 <= b < ${this.prime}, 0 <= y < ${this.g}`);
    }
    return { a, b, y };
  }
}

/** Duchi et al.'s one bit (and 1BitMean, the same bit): 1 with ½ + t(e^ε − 1)/(2(e^ε + 1)). */
class DuchiBit implements Mechanism {
  readonly lo: number;
  readonly hi: number;
  constructor(readonly name: "duchi" | "one_bit_mean", domain: JsonObject, readonly epsilon: number) {
    this.lo = num(domain.lo);
    this.hi = num(domain.hi);
    if (domain.kind !== "numeric" || !(this.lo < this.hi)) throw new ConfigError("this mechanism takes a numeric domain");
  }
  /** Clip to [lo, hi] and map to t ∈ [−1, 1]. */
  encode(value: unknown): number {
    if (typeof value !== "number" || Number.isNaN(value)) throw new ValueDomainError("a numeric campaign takes a number");
    const clipped = Math.min(this.hi, Math.max(this.lo, value));
    return (2.0 * (clipped - this.lo)) / (this.hi - this.lo) - 1.0;
  }
  probabilityOfOne(t: number): number {
    const e = Math.exp(this.epsilon);
    return 0.5 + (t * (e - 1)) / (2 * (e + 1));
  }
  randomize(t: number, rng: RandomSource = cryptoRandom): number {
    if (!(t >= -1 && t <= 1)) throw new RangeError("the encoded value must lie in [-1, 1]");
    return bernoulli(rng, this.probabilityOfOne(t)) ? 1 : 0;
  }
  checkPayload(payload: Json): number {
    if (payload !== 0 && payload !== 1) throw new PayloadError(`a ${this.name} payload is the bit 0 or 1`);
    return payload;
  }
}

/** The mechanisms this package implements so far. */
export const SUPPORTED_MECHANISMS = ["rr", "krr", "sue", "oue", "olh", "blh", "duchi", "one_bit_mean"] as const;

/** The client half of a verified config's mechanism ({@link verifyConfig} first). */
export function mechanismFor(config: JsonObject, epsilon: number): Mechanism {
  const domain = config.domain as JsonObject;
  const params = (config.params ?? {}) as JsonObject;
  switch (config.mechanism) {
    case "rr":
    case "krr": {
      const categories = new Categories(domain);
      if (categories.size < 2 || (config.mechanism === "rr" && categories.size !== 2)) {
        throw new ConfigError("rr needs exactly 2 categories, krr at least 2");
      }
      return new KRR(config.mechanism, categories, epsilon);
    }
    case "sue":
    case "oue":
      return new UnaryEncoding(config.mechanism, new Categories(domain), epsilon);
    case "olh":
    case "blh":
      return new LocalHashing(config.mechanism, new Categories(domain), epsilon, params);
    case "duchi":
    case "one_bit_mean":
      return new DuchiBit(config.mechanism, domain, epsilon);
    default:
      throw new ConfigError(`mechanism ${JSON.stringify(config.mechanism)} is not implemented by this client yet`);
  }
}
