/**
 * Mean mechanisms for one bounded number (docs/protocol.md, "Numbers"; MECHANISMS.md §9):
 * the value is clipped to [lo, hi] and mapped to t ∈ [−1, 1]; no float is ever sent.
 */
import { ConfigError } from "../config.js";
import type { Json } from "../json.js";
import { bernoulli, cryptoRandom, uniform01, type RandomSource } from "../random.js";
import { discreteLaplace, exactRational, rational, type Rational } from "./exact.js";
import { checkInt, intParam, NumericRange, PayloadError, plainZero, type JsonObject, type Mechanism } from "./common.js";

abstract class NumberMechanism implements Mechanism {
  abstract readonly name: string;
  constructor(readonly range: NumericRange, readonly epsilon: number) {}
  /** Clip to [lo, hi] and map to t ∈ [−1, 1]. */
  encode(value: unknown): number {
    return this.range.toUnit(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): number {
    return this.range.randomValue(rng);
  }
  protected checkUnit(t: number): void {
    if (!(t >= -1 && t <= 1)) throw new RangeError("the encoded value must lie in [-1, 1]");
  }
  abstract randomize(t: number, rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  abstract payloadBounds(): [number, number] | null;
}

/** Duchi et al.'s one bit (and 1BitMean, the same bit): 1 with ½ + t(e^ε − 1)/(2(e^ε + 1)). */
export class DuchiBit extends NumberMechanism {
  constructor(readonly name: "duchi" | "one_bit_mean", range: NumericRange, epsilon: number) {
    super(range, epsilon);
  }
  probabilityOfOne(t: number): number {
    const e = Math.exp(this.epsilon);
    return 0.5 + (t * (e - 1)) / (2 * (e + 1));
  }
  randomize(t: number, rng: RandomSource = cryptoRandom): number {
    this.checkUnit(t);
    return bernoulli(rng, this.probabilityOfOne(t)) ? 1 : 0;
  }
  checkPayload(payload: Json): number {
    if (payload !== 0 && payload !== 1) throw new PayloadError(`a ${this.name} payload is the bit 0 or 1`);
    return payload;
  }
  payloadBounds(): [number, number] {
    return [0, 1];
  }
}

/** The Piecewise Mechanism (§9.4): a point of [−C, C], randomly rounded to the grid k·C/R. */
export class Piecewise extends NumberMechanism {
  readonly name = "pm";
  readonly resolution: number;
  readonly z: number;
  readonly c: number;
  readonly step: number;
  constructor(range: NumericRange, epsilon: number, params: JsonObject) {
    super(range, epsilon);
    this.resolution = intParam(params, "resolution", 4, 1 << 16);
    this.z = Math.exp(epsilon / 2);
    this.c = (this.z + 1) / (this.z - 1);
    this.step = this.c / this.resolution;
  }
  randomize(t: number, rng: RandomSource = cryptoRandom): number {
    this.checkUnit(t);
    const c = this.c;
    const left = ((c + 1) * t) / 2 - (c - 1) / 2;
    const right = left + c - 1;
    let s: number;
    if (bernoulli(rng, this.z / (this.z + 1))) {
      s = left + (right - left) * uniform01(rng); // the high-density band [l(t), r(t)]
    } else {
      const u = (c + 1) * uniform01(rng); // uniform on [−C, l) ∪ (r, C], total length C + 1
      const below = left + c;
      s = u < below ? -c + u : right + (u - below);
    }
    // Randomized rounding to the grid (up with probability equal to the fraction): E[k·Λ] = s.
    const position = Math.min(Math.max(s / this.step, -this.resolution), this.resolution);
    const low = Math.floor(position);
    return plainZero(uniform01(rng) < position - low ? low + 1 : low);
  }
  checkPayload(payload: Json): number {
    return checkInt(payload, -this.resolution, this.resolution, "a pm payload");
  }
  payloadBounds(): [number, number] {
    return [-this.resolution, this.resolution];
  }
}

/** ε* of the Hybrid Mechanism, Python's expression (** (1/3), not cbrt) for the same double. */
export const EPSILON_STAR = Math.log(
  (-5 + 2 * Math.pow(6353 - 405 * Math.sqrt(241), 1 / 3) + 2 * Math.pow(6353 + 405 * Math.sqrt(241), 1 / 3)) / 27,
);

/** The Hybrid Mechanism (§9.5): `[0, k]` from Piecewise with α = 1 − e^(−ε/2) (0 below ε*),
 * else `[1, bit]` from Duchi. */
export class Hybrid extends NumberMechanism {
  readonly name = "hm";
  readonly pm: Piecewise;
  readonly duchi: DuchiBit;
  readonly alpha: number;
  constructor(range: NumericRange, epsilon: number, params: JsonObject) {
    super(range, epsilon);
    this.pm = new Piecewise(range, epsilon, params);
    this.duchi = new DuchiBit("duchi", range, epsilon);
    this.alpha = epsilon > EPSILON_STAR ? 1 - Math.exp(-epsilon / 2) : 0.0;
  }
  randomize(t: number, rng: RandomSource = cryptoRandom): number[] {
    this.checkUnit(t);
    if (bernoulli(rng, this.alpha)) return [0, this.pm.randomize(t, rng)];
    return [1, this.duchi.randomize(t, rng)];
  }
  checkPayload(payload: Json): number[] {
    if (!Array.isArray(payload) || payload.length !== 2 || (payload[0] !== 0 && payload[0] !== 1)) {
      throw new PayloadError("an hm payload is [0, grid index] or [1, bit]");
    }
    if (payload[0] === 0) return [0, this.pm.checkPayload(payload[1] as Json)];
    if (payload[1] !== 0 && payload[1] !== 1) throw new PayloadError("an hm Duchi report is [1, 0] or [1, 1]");
    return [1, payload[1]];
  }
  payloadBounds(): null {
    return null;
  }
}

const TAIL_SCALES = 40;
const MAX_SPAN = 46_340;

/** Laplace (§9.1): u = (t + 1)·R/2 rounded at random to k, y = k + Z with Z discrete Laplace of
 * scale R/ε drawn exactly, clamped to [−B, R + B], B = ⌈40·R/ε⌉. */
export class Laplace extends NumberMechanism {
  readonly name = "laplace";
  readonly resolution: number;
  readonly tail: number;
  /** 1/τ = ε/R, the exact rational of the double ε divided by R. */
  readonly rate: Rational;
  constructor(range: NumericRange, epsilon: number, params: JsonObject) {
    super(range, epsilon);
    this.resolution = intParam(params, "resolution", 1, 4096);
    this.tail = Math.ceil((TAIL_SCALES * this.resolution) / epsilon);
    if (this.resolution + 2 * this.tail > MAX_SPAN) throw new ConfigError("laplace resolution too fine for this ε");
    const e = exactRational(epsilon);
    this.rate = rational(e.n, e.d * BigInt(this.resolution));
  }
  /** (⌊u⌋, u − ⌊u⌋) for u = (t + 1)·R/2. */
  position(t: number): [number, number] {
    const u = Math.min(Math.max(((t + 1) * this.resolution) / 2, 0.0), this.resolution);
    const low = Math.min(Math.floor(u), this.resolution);
    return [low, u - low];
  }
  randomize(t: number, rng: RandomSource = cryptoRandom): number {
    this.checkUnit(t);
    const [low, fraction] = this.position(t);
    const k = bernoulli(rng, fraction) ? low + 1 : low;
    // |Z| beyond B + R is clamped anyway, so the bigint always fits a double exactly after it.
    const noise = discreteLaplace(rng, this.rate);
    const bound = BigInt(this.resolution + 2 * this.tail);
    const z = Number(noise > bound ? bound : noise < -bound ? -bound : noise);
    return plainZero(Math.min(Math.max(k + z, -this.tail), this.resolution + this.tail));
  }
  checkPayload(payload: Json): number {
    return checkInt(payload, -this.tail, this.resolution + this.tail, "a laplace payload");
  }
  payloadBounds(): [number, number] {
    return [-this.tail, this.resolution + this.tail];
  }
}
