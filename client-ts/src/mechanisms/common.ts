/**
 * What every mechanism's client half shares: the {@link Mechanism} contract, the errors, the
 * value domains (encode a value, draw a substitute) and the payload-shape helpers
 * (docs/protocol.md, "Payloads").
 */
import { ConfigError } from "../config.js";
import { JsonFloat, type Json } from "../json.js";
import { bernoulli, uniform01, uniformInt, type RandomSource } from "../random.js";

/** The value cannot be reported by this campaign. The message never includes the value. */
export class ValueDomainError extends Error {
  override name = "ValueDomainError";
}

/** A payload that does not have its mechanism's shape. */
export class PayloadError extends Error {
  override name = "PayloadError";
}

export type JsonObject = { [key: string]: Json };

/** A public choice made independently of any value: a discovery campaign's group. */
export interface Assignment {
  group?: number;
}

export interface Mechanism {
  readonly name: string;
  /** The randomizer's input for an app value; {@link ValueDomainError} if there is none. */
  encode(value: unknown): unknown;
  /** An app value drawn uniformly from the domain: what a value outside it is replaced by
   * (docs/threat-model.md, rule 3). Never depends on any reported value. */
  randomValue(rng?: RandomSource): unknown;
  /** One randomized payload for an encoded input (public choices drawn afresh unless given). */
  randomize(x: unknown, rng?: RandomSource, assignment?: Assignment): Json;
  /** The payload, if it has this mechanism's shape; {@link PayloadError} otherwise. */
  checkPayload(payload: Json): Json;
  /** [low, high], inclusive, when a payload is one integer in that range; null otherwise. */
  payloadBounds(): [number, number] | null;
  /** A discovery mechanism's group shares (installs split between prefix lengths). */
  readonly groupWeights?: number[];
  /** A discovery mechanism's group for an install: from its secret key, the campaign, its
   * config version and the privacy period, never a value (docs/protocol.md). */
  assignGroup?(key: Uint8Array<ArrayBuffer>, campaign: string, digest: string, period: string): Promise<number>;
}

export const isInt = (v: Json | undefined): v is number => typeof v === "number" && Number.isSafeInteger(v);

export function isObject(v: Json | undefined): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof JsonFloat);
}

export function keysAre(v: Json, keys: string[]): v is JsonObject {
  if (!isObject(v)) return false;
  const own = Object.keys(v).sort();
  return own.length === keys.length && [...keys].sort().every((k, i) => own[i] === k);
}

/** A config number (a float may be a {@link JsonFloat}). */
export function num(v: Json | undefined): number {
  return v instanceof JsonFloat ? v.value : (v as number);
}

/** An integer config parameter, or a {@link ConfigError}. */
export function intParam(params: JsonObject, key: string, lo: number, hi = Number.MAX_SAFE_INTEGER): number {
  const v = params[key];
  if (!isInt(v) || v < lo || v > hi) throw new ConfigError(`params.${key} must be an integer in [${lo}, ${hi}]`);
  return v;
}

/** An integer in [lo, hi], or a {@link PayloadError} naming it. */
export function checkInt(v: Json | undefined, lo: number, hi: number, what: string): number {
  if (!isInt(v) || v < lo || v > hi) throw new PayloadError(`${what} must be an integer in [${lo}, ${hi}]`);
  return v;
}

/** Sorted, distinct integers in [0, n), exactly `count` of them. */
export function checkIndexList(v: Json | undefined, count: number, n: number, what: string): number[] {
  const ok = Array.isArray(v) && v.length === count &&
    v.every((j, i) => isInt(j) && j >= 0 && j < n && (i === 0 || j > (v[i - 1] as number)));
  if (!ok) throw new PayloadError(`${what} must be ${count} distinct sorted indices below ${n}`);
  return [...(v as number[])];
}

/** The bit length of a non-negative integer (Python's int.bit_length). */
export function bitLength(n: number): number {
  return n === 0 ? 0 : n.toString(2).length;
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

/** A hex string of n bits, or a {@link PayloadError}. */
export function checkHex(v: Json | undefined, n: number): string {
  const width = Math.ceil(n / 4);
  const ok =
    typeof v === "string" &&
    v.length === width &&
    /^[0-9a-f]*$/.test(v) &&
    (n % 4 === 0 || width === 0 || parseInt(v[0] as string, 16) >> n % 4 === 0);
  if (!ok) throw new PayloadError(`bits must be ${width} lowercase hex digits below 2**${n}`);
  return v as string;
}

/** k-RR over d outputs: keep x with probability p, else one of the other d − 1 uniformly. */
export function krrDraw(rng: RandomSource, x: number, d: number, p: number): number {
  if (bernoulli(rng, p)) return x;
  const lie = uniformInt(rng, d - 1);
  return lie >= x ? lie + 1 : lie;
}

/** -0 as 0: an integer payload never carries a sign on zero. */
export const plainZero = (x: number): number => x + 0;

/** A closed list of categories: the index of a value, or of `other`. */
export class Categories {
  readonly values: string[];
  readonly other: string | undefined;
  private readonly index: Map<string, number>;

  constructor(domain: JsonObject) {
    if (!Array.isArray(domain.values) || domain.values.length === 0 || !domain.values.every((v) => typeof v === "string")) {
      throw new ConfigError("a categories domain lists its values as strings");
    }
    this.values = domain.values as string[];
    this.other = typeof domain.other === "string" ? domain.other : undefined;
    this.index = new Map(this.values.map((v, i) => [v, i]));
    if (this.index.size !== this.values.length) throw new ConfigError("categories must be distinct");
    if (this.other !== undefined && !this.index.has(this.other)) throw new ConfigError("domain.other must be one of the values");
  }

  /** Numbered categories "0", "1", …: an oracle over nodes or cells. */
  static numbered(size: number): Categories {
    return new Categories({ values: Array.from({ length: size }, (_, i) => String(i)) });
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

  randomValue(rng: RandomSource): string {
    return this.values[uniformInt(rng, this.size)] as string;
  }
}

/** The categories of a categories domain (its kind checked). */
export function categoriesOf(domain: JsonObject): Categories {
  if (domain.kind !== "categories") throw new ConfigError("this mechanism takes a categories domain");
  return new Categories(domain);
}

/** A bounded interval [lo, hi]; numbers outside it are clipped on the device. */
export class NumericRange {
  constructor(readonly lo: number, readonly hi: number) {
    if (!(Number.isFinite(lo) && Number.isFinite(hi) && lo < hi && Number.isFinite(hi - lo))) {
      throw new ConfigError("a numeric range needs finite lo < hi");
    }
  }

  static of(domain: JsonObject): NumericRange {
    if (domain.kind !== "numeric") throw new ConfigError("this mechanism takes a numeric domain");
    return new NumericRange(num(domain.lo), num(domain.hi));
  }

  /** The number clipped to [lo, hi]. Not a number, or not finite (NaN, ±∞): refused, as the
   * Python client does (the report then carries a substitute). */
  clipped(value: unknown): number {
    const x = typeof value === "bigint" ? Number(value) : value;
    if (typeof x !== "number") throw new ValueDomainError("a numeric campaign takes a number");
    if (!Number.isFinite(x)) throw new ValueDomainError("cannot report a non-finite number");
    return Math.min(this.hi, Math.max(this.lo, x));
  }

  /** Clip and map to t ∈ [−1, 1]. */
  toUnit(value: unknown): number {
    return (2.0 * (this.clipped(value) - this.lo)) / (this.hi - this.lo) - 1.0;
  }

  randomValue(rng: RandomSource): number {
    return this.lo + uniform01(rng) * (this.hi - this.lo);
  }
}

/** A several-attribute value, {name: item} or a list in attribute order, as its items in order. */
export function byAttribute(value: unknown, names: string[], kind: string): unknown[] {
  if (Array.isArray(value)) {
    if (value.length !== names.length) throw new ValueDomainError(`a ${kind} value has ${names.length} items, got ${value.length}`);
    return value;
  }
  if (typeof value === "object" && value !== null) {
    const keys = Object.keys(value);
    const missing = names.filter((n) => !Object.hasOwn(value, n));
    const extra = keys.filter((k) => !names.includes(k)).length;
    if (missing.length > 0 || extra > 0) {
      // The campaign's names are public; the value's other keys are counted, never quoted.
      throw new ValueDomainError(`a ${kind} value needs exactly the attributes ${JSON.stringify(names)}; ` +
        `missing ${JSON.stringify(missing)}, and ${extra} other keys`);
    }
    return names.map((n) => (value as { [k: string]: unknown })[n]);
  }
  throw new ValueDomainError(`a ${kind} campaign takes a mapping of ${JSON.stringify(names)}`);
}

const LONE_SURROGATE = /[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/;
const utf8 = new TextEncoder();

/** Any string up to a byte limit, optionally over a declared alphabet. */
export class OpenStrings {
  readonly maxBytes: number;
  /** The alphabet's characters (code points), in the order that numbers them. */
  readonly alphabet: string[] | undefined;

  constructor(domain: JsonObject) {
    if (domain.kind !== "strings") throw new ConfigError("this mechanism takes a strings domain");
    const maxBytes = domain.max_bytes ?? 1024;
    if (!isInt(maxBytes) || maxBytes < 1 || maxBytes > 65536) throw new ConfigError("domain.max_bytes must be in [1, 65536]");
    this.maxBytes = maxBytes;
    if (domain.alphabet !== undefined) {
      if (typeof domain.alphabet !== "string" || domain.alphabet.length === 0) throw new ConfigError("domain.alphabet must be a string");
      this.alphabet = Array.from(domain.alphabet);
    }
  }

  /** The value's UTF-8 bytes, once checked (a string, valid Unicode, within the limit and alphabet). */
  encode(value: unknown): string {
    if (typeof value !== "string") throw new ValueDomainError("a strings campaign takes a string");
    if (LONE_SURROGATE.test(value)) throw new ValueDomainError("the value is not valid Unicode text");
    if (utf8.encode(value).length > this.maxBytes) throw new ValueDomainError(`value is longer than ${this.maxBytes} UTF-8 bytes`);
    if (this.alphabet !== undefined) {
      const allowed = new Set(this.alphabet);
      for (const c of value) {
        if (!allowed.has(c)) throw new ValueDomainError("the value has characters outside the domain's alphabet");
      }
    }
    return value;
  }

  /** A random string nobody holds: 16 hex digits (cut to max_bytes), or random characters of the alphabet. */
  randomValue(rng: RandomSource): string {
    if (this.alphabet === undefined) {
      let hex = "";
      for (let i = 0; i < 16; i++) hex += uniformInt(rng, 16).toString(16);
      return hex.slice(0, this.maxBytes);
    }
    const widest = Math.max(...this.alphabet.map((c) => utf8.encode(c).length));
    const length = Math.max(1, Math.min(16, Math.floor(this.maxBytes / widest)));
    let out = "";
    for (let i = 0; i < length; i++) out += this.alphabet[uniformInt(rng, this.alphabet.length)];
    return out;
  }
}
