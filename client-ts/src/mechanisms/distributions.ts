/**
 * Distribution mechanisms (MECHANISMS-2.md §1): one number per report, mapped to v ∈ [0, 1]
 * on the campaign's linear or log scale; the collector estimates its whole distribution.
 */
import { ConfigError } from "../config.js";
import type { Json } from "../json.js";
import { cryptoRandom, uniform01, uniformInt, type RandomSource } from "../random.js";
import { Categories, checkInt, intParam, isInt, isObject, NumericRange, PayloadError, type JsonObject, type Mechanism } from "./common.js";
import { KRR, UnaryEncoding } from "./frequency.js";

abstract class DistributionMechanism implements Mechanism {
  abstract readonly name: string;
  readonly range: NumericRange;
  readonly scale: "linear" | "log";
  constructor(domain: JsonObject, readonly epsilon: number, params: JsonObject) {
    this.range = NumericRange.of(domain);
    const scale = params.scale ?? "linear";
    if (scale !== "linear" && scale !== "log") throw new ConfigError("params.scale must be linear or log");
    if (scale === "log" && !(this.range.lo > 0)) throw new ConfigError("a log scale needs lo > 0");
    this.scale = scale;
  }
  /** Clip to [lo, hi] and map to v ∈ [0, 1] on the campaign's scale. */
  encode(value: unknown): number {
    const x = this.range.clipped(value);
    const { lo, hi } = this.range;
    const unit = this.scale === "log" ? Math.log(x / lo) / Math.log(hi / lo) : (x - lo) / (hi - lo);
    return Math.min(Math.max(unit, 0.0), 1.0);
  }
  randomValue(rng: RandomSource = cryptoRandom): number {
    return this.range.randomValue(rng);
  }
  protected checkUnit(v: number): void {
    if (!(v >= 0 && v <= 1)) throw new RangeError("the encoded value must lie in [0, 1]");
  }
  abstract randomize(v: number, rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  abstract payloadBounds(): [number, number] | null;
}

/** The wave's half-width b(ε) of Square Wave, with expm1 as the Python side writes it. */
export function squareWaveB(epsilon: number): number {
  const growth = Math.exp(epsilon);
  const numerator = epsilon * growth - Math.expm1(epsilon);
  const denominator = 2 * growth * (Math.expm1(epsilon) - epsilon);
  return Math.min(0.5, numerator / denominator);
}

/** Square Wave (§1.1): y on [−b, 1 + b] with density p on [v − b, v + b], q elsewhere; the
 * payload is the index of y's bucket among `output_buckets`. */
export class SquareWave extends DistributionMechanism {
  readonly name = "sw";
  readonly buckets: number;
  readonly outputBuckets: number;
  readonly b: number;
  readonly p: number;
  readonly width: number;
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon, params);
    this.buckets = intParam(params, "buckets", 2, 512);
    this.outputBuckets = intParam(params, "output_buckets", 2, 512);
    this.b = squareWaveB(epsilon);
    this.p = Math.exp(epsilon) / (2 * this.b * Math.exp(epsilon) + 1);
    this.width = (1 + 2 * this.b) / this.outputBuckets;
  }
  randomize(v: number, rng: RandomSource = cryptoRandom): number {
    this.checkUnit(v);
    const b = this.b;
    let y: number;
    if (uniform01(rng) < 2 * b * this.p) {
      y = v - b + 2 * b * uniform01(rng); // on the wave, uniformly
    } else {
      const u = uniform01(rng); // uniformly on [−b, v − b) ∪ (v + b, 1 + b], of length exactly 1
      y = u < v ? u - b : u + b;
    }
    return Math.min(Math.max(Math.floor((y + b) / this.width), 0), this.outputBuckets - 1);
  }
  checkPayload(payload: Json): number {
    return checkInt(payload, 0, this.outputBuckets - 1, "an sw payload");
  }
  payloadBounds(): [number, number] {
    return [0, this.outputBuckets - 1];
  }
}

/** k-RR while nodes < 3e^ε + 2, else OUE (MECHANISMS.md §12). */
export const levelOracle = (nodes: number, epsilon: number): "krr" | "oue" => (nodes < 3 * Math.exp(epsilon) + 2 ? "krr" : "oue");

/** Hierarchical histograms (§1.2): a level ℓ uniformly, the node holding v there through that
 * level's oracle at the full ε: `{"level": ℓ, "index": k}` (k-RR) or `{"level": ℓ, "bits": hex}` (OUE). */
export class HierarchicalHistogram extends DistributionMechanism {
  readonly name = "hh";
  readonly branching: number;
  readonly buckets: number;
  readonly height: number;
  readonly oracles: (KRR | UnaryEncoding)[];
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon, params);
    this.branching = intParam(params, "branching", 2, 16);
    this.buckets = intParam(params, "buckets", 2, 1024);
    let height = 0;
    while (this.branching ** height < this.buckets) height++;
    if (this.branching ** height !== this.buckets) throw new ConfigError("hh buckets must be a power of the branching factor");
    this.height = height;
    this.oracles = [];
    for (let level = 1; level <= height; level++) {
      const nodes = this.branching ** level;
      const categories = Categories.numbered(nodes);
      this.oracles.push(levelOracle(nodes, epsilon) === "krr" ? new KRR("krr", categories, epsilon) : new UnaryEncoding("oue", categories, epsilon));
    }
  }
  /** The node holding v at a level: the leaf ⌊v·D⌋, then its ancestor. */
  nodeOf(v: number, level: number): number {
    const leaf = Math.min(Math.trunc(v * this.buckets), this.buckets - 1);
    return Math.floor(leaf / this.branching ** (this.height - level));
  }
  randomize(v: number, rng: RandomSource = cryptoRandom): JsonObject {
    this.checkUnit(v);
    const level = 1 + uniformInt(rng, this.height);
    const oracle = this.oracles[level - 1] as KRR | UnaryEncoding;
    const report = oracle.randomize(this.nodeOf(v, level), rng);
    return typeof report === "number" ? { level, index: report } : { level, ...report };
  }
  checkPayload(payload: Json): JsonObject {
    if (!isObject(payload) || !isInt(payload.level)) throw new PayloadError('an hh payload is {"level": l, "index": k} or {"level": l, "bits": hex}');
    const level = checkInt(payload.level, 1, this.height, "level");
    const oracle = this.oracles[level - 1] as KRR | UnaryEncoding;
    const { level: _, ...rest } = payload;
    if (oracle instanceof KRR) {
      if (Object.keys(rest).length !== 1 || !("index" in rest)) throw new PayloadError(`level ${level} is k-RR: {"level", "index"}`);
      return { level, index: oracle.checkPayload(rest.index as Json) };
    }
    return { level, ...oracle.checkPayload(rest) };
  }
  payloadBounds(): null {
    return null;
  }
}
