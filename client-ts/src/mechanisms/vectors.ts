/**
 * Means of a vector of D bounded numbers (docs/protocol.md, "Vectors"; MECHANISMS.md §9.3,
 * §9.6, §9.7): each attribute clipped to its own [lo, hi] and mapped to [−1, 1].
 */
import { ConfigError } from "../config.js";
import type { Json } from "../json.js";
import { bernoulli, cryptoRandom, sampleDistinct, uniformBigInt, type RandomSource } from "../random.js";
import {
  byAttribute, checkIndexList, isInt, isObject, keysAre, num, NumericRange, PayloadError, type JsonObject, type Mechanism,
} from "./common.js";
import { DuchiBit, Hybrid, Piecewise } from "./numbers.js";

/** A vector domain: D named attributes, each a range. */
export class NumericVector {
  readonly names: string[];
  readonly ranges: NumericRange[];
  constructor(domain: JsonObject) {
    const attributes = domain.attributes;
    if (domain.kind !== "vector" || !Array.isArray(attributes) || attributes.length < 1 || attributes.length > 64) {
      throw new ConfigError("this mechanism takes a vector domain of 1 to 64 attributes");
    }
    this.names = attributes.map((a) => (isObject(a) && typeof a.name === "string" ? a.name : ""));
    if (this.names.includes("") || new Set(this.names).size !== this.names.length) throw new ConfigError("attribute names must be distinct strings");
    this.ranges = attributes.map((a) => new NumericRange(num((a as JsonObject).lo), num((a as JsonObject).hi)));
  }
  get size(): number {
    return this.names.length;
  }
  /** Every attribute clipped to its range and mapped to [−1, 1]. */
  toUnit(value: unknown): number[] {
    return byAttribute(value, this.names, "vector").map((x, j) => (this.ranges[j] as NumericRange).toUnit(x));
  }
  randomValue(rng: RandomSource): { [name: string]: number } {
    return Object.fromEntries(this.names.map((n, j) => [n, (this.ranges[j] as NumericRange).randomValue(rng)]));
  }
}

abstract class VectorMechanism implements Mechanism {
  abstract readonly name: string;
  readonly vector: NumericVector;
  constructor(domain: JsonObject, readonly epsilon: number) {
    this.vector = new NumericVector(domain);
  }
  get d(): number {
    return this.vector.size;
  }
  encode(value: unknown): number[] {
    return this.vector.toUnit(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): { [name: string]: number } {
    return this.vector.randomValue(rng);
  }
  abstract randomize(x: number[], rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  abstract payloadBounds(): [number, number] | null;
}

function popcount(x: bigint): number {
  let n = 0;
  for (let y = x; y !== 0n; y &= y - 1n) n++;
  return n;
}

/** Duchi et al.'s multidimensional mechanism (§9.3, ties at half weight for even D): v with
 * P(v_j = 1) = (1 + t_j)/2; s uniform, negated when s·v < 0; then negated with 1/(e^ε + 1).
 * The payload is s's mask, bit j set for +1 (a bigint beyond 2^53, D ≤ 63). */
export class DuchiMultidim extends VectorMechanism {
  readonly name = "duchi_md";
  readonly keep: number;
  constructor(domain: JsonObject, epsilon: number) {
    super(domain, epsilon);
    if (this.d > 63) throw new ConfigError("duchi_md takes at most 63 attributes");
    const e = Math.exp(epsilon);
    this.keep = e / (e + 1);
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): number | bigint {
    if (x.length !== this.d || !x.every((t) => t >= -1 && t <= 1)) throw new RangeError("need D values in [-1, 1]");
    let v = 0n;
    x.forEach((t, j) => {
      if (bernoulli(rng, (1 + t) / 2)) v |= 1n << BigInt(j);
    });
    const full = (1n << BigInt(this.d)) - 1n;
    let s = uniformBigInt(rng, full + 1n);
    if (this.d - 2 * popcount(s ^ v) < 0) s ^= full; // now s·v ≥ 0
    if (!bernoulli(rng, this.keep)) s ^= full;
    return s <= BigInt(Number.MAX_SAFE_INTEGER) ? Number(s) : s;
  }
  checkPayload(payload: Json): number | bigint {
    const limit = 1n << BigInt(this.d);
    if (!(isInt(payload) || typeof payload === "bigint") || BigInt(payload) < 0n || BigInt(payload) >= limit) {
      throw new PayloadError(`a duchi_md payload is a ${this.d}-bit sign mask`);
    }
    return payload;
  }
  payloadBounds(): [number, number] | null {
    return this.d <= 52 ? [0, 2 ** this.d - 1] : null; // beyond 2^53 the bounds are not doubles
  }
}

type Inner = DuchiBit | Piecewise | Hybrid;
const UNIT = new NumericRange(-1.0, 1.0);

/** Attribute sampling (§9.6, §9.7): k of D attributes uniformly, each by a one-dimensional
 * mechanism on [−1, 1] at ε/k. `{"j": [sorted indices], "y": [inner payloads]}`. */
export class SampledAttributes extends VectorMechanism {
  readonly k: number;
  readonly inner: Inner;
  constructor(readonly name: "harmony" | "pm_md" | "hm_md", domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon);
    const k = params.k ?? 1;
    if (!isInt(k) || k < 1 || k > this.d || (name === "harmony" && k !== 1)) throw new ConfigError(`${name} params.k must be in [1, D]`);
    this.k = k;
    const inner = epsilon / k;
    this.inner = name === "harmony" ? new DuchiBit("duchi", UNIT, inner)
      : name === "pm_md" ? new Piecewise(UNIT, inner, params) : new Hybrid(UNIT, inner, params);
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): JsonObject {
    if (x.length !== this.d) throw new RangeError("need D values");
    const chosen = sampleDistinct(rng, this.d, this.k);
    return { j: chosen, y: chosen.map((j) => this.inner.randomize(x[j] as number, rng)) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["j", "y"])) throw new PayloadError(`a ${this.name} payload is {"j": [...], "y": [...]}`);
    const j = checkIndexList(payload.j, this.k, this.d, "j");
    const y = payload.y;
    if (!Array.isArray(y) || y.length !== this.k) throw new PayloadError(`y must hold ${this.k} reports`);
    return { j, y: y.map((inner) => this.inner.checkPayload(inner)) };
  }
  payloadBounds(): null {
    return null;
  }
}
