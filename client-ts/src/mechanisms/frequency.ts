/**
 * Frequency oracles over a closed list of categories (docs/protocol.md, "Payloads", first
 * table; probabilities from docs/MECHANISMS.md §1–4, §7, §8, §10.2).
 */
import { ConfigError } from "../config.js";
import { hadamardSign, hrInBlock, localHash } from "../hashing.js";
import type { Json } from "../json.js";
import { bernoulli, cryptoRandom, sampleDistinct, uniformInt, type RandomSource } from "../random.js";
import {
  bitLength, Categories, checkHex, checkIndexList, checkInt, intParam, isInt, keysAre, krrDraw, PayloadError,
  toHex, type JsonObject, type Mechanism,
} from "./common.js";

/** What the oracles over categories share: the categories, ε, encoding and substitutes. */
abstract class CategoricalOracle implements Mechanism {
  abstract readonly name: string;
  constructor(readonly categories: Categories, readonly epsilon: number) {
    if (categories.size < 2) throw new ConfigError("this mechanism needs at least 2 categories");
  }
  get d(): number {
    return this.categories.size;
  }
  encode(value: unknown): number {
    return this.categories.encode(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): string {
    return this.categories.randomValue(rng);
  }
  abstract randomize(x: number, rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  payloadBounds(): [number, number] | null {
    return null;
  }
}

/** k-RR (and Warner's RR for d = 2): keep x with p = e^ε/(e^ε + d − 1), else one of the other d − 1. */
export class KRR extends CategoricalOracle {
  readonly p: number;
  readonly q: number;
  constructor(readonly name: string, categories: Categories, epsilon: number) {
    super(categories, epsilon);
    if (name === "rr" && categories.size !== 2) throw new ConfigError("rr needs exactly 2 categories");
    const e = Math.exp(epsilon);
    this.p = e / (e + this.d - 1);
    this.q = 1.0 / (e + this.d - 1);
  }
  override encode(value: unknown): number {
    if (this.name === "rr" && typeof value === "boolean") return value ? 1 : 0;
    return super.encode(value);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): number {
    return krrDraw(rng, x, this.d, this.p);
  }
  checkPayload(payload: Json): number {
    if (!isInt(payload)) throw new PayloadError(`a ${this.name} payload is a category index (integer)`);
    return checkInt(payload, 0, this.d - 1, "the category index");
  }
  override payloadBounds(): [number, number] {
    return [0, this.d - 1];
  }
  /** Var* = q(1 − q)/(p − q)², to choose between k-RR and OUE (MECHANISMS.md §12). */
  approximateVariance(): number {
    return (this.q * (1 - this.q)) / (this.p - this.q) ** 2;
  }
}

/** Unary encoding (SUE, OUE): every bit at q, the true bit at p; `{"bits": hex}`, bit i = 2^i. */
export class UnaryEncoding extends CategoricalOracle {
  readonly p: number;
  readonly q: number;
  constructor(readonly name: "sue" | "oue", categories: Categories, epsilon: number) {
    super(categories, epsilon);
    if (name === "sue") {
      const z = Math.exp(epsilon / 2);
      this.p = z / (z + 1);
      this.q = 1 / (Math.exp(epsilon / 2) + 1);
    } else {
      this.p = 0.5;
      this.q = 1 / (Math.exp(epsilon) + 1);
    }
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const bits = new Uint8Array(this.d);
    for (let i = 0; i < this.d; i++) bits[i] = bernoulli(rng, i === x ? this.p : this.q) ? 1 : 0;
    return { bits: toHex(bits) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["bits"])) throw new PayloadError(`a ${this.name} payload is {"bits": hex string}`);
    return { bits: checkHex(payload.bits, this.d) };
  }
  approximateVariance(): number {
    return (this.q * (1 - this.q)) / (this.p - this.q) ** 2;
  }
}

/** Local hashing (OLH, BLH): a, b uniform; k-RR over the g buckets of ((a·x + b) mod P) mod g. */
export class LocalHashing extends CategoricalOracle {
  readonly prime: number;
  readonly g: number;
  readonly p: number;
  constructor(readonly name: "olh" | "blh", categories: Categories, epsilon: number, params: JsonObject) {
    super(categories, epsilon);
    if (!isInt(params.prime) || !isInt(params.g) || params.g < 2 || params.prime <= categories.size) {
      throw new ConfigError(`${name} needs integer params prime > d and g ≥ 2`);
    }
    this.prime = params.prime;
    this.g = params.g;
    const e = Math.exp(epsilon);
    this.p = e / (e + this.g - 1);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const a = 1 + uniformInt(rng, this.prime - 1);
    const b = uniformInt(rng, this.prime);
    return { a, b, y: krrDraw(rng, localHash(a, b, x, this.prime, this.g), this.g, this.p) };
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

/** Subset Selection (§8): x is in the ω-subset with ωe^ε/(ωe^ε + d − ω); the rest uniformly. */
export class SubsetSelection extends CategoricalOracle {
  readonly name = "ss";
  readonly omega: number;
  constructor(categories: Categories, epsilon: number, params: JsonObject) {
    super(categories, epsilon);
    this.omega = intParam(params, "omega", 1, categories.size - 1);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): number[] {
    const e = Math.exp(this.epsilon);
    const include = bernoulli(rng, (this.omega * e) / (this.omega * e + this.d - this.omega));
    const others = sampleDistinct(rng, this.d - 1, include ? this.omega - 1 : this.omega);
    const chosen = others.map((o) => (o >= x ? o + 1 : o)); // skip x
    if (include) chosen.push(x);
    return chosen.sort((a, b) => a - b);
  }
  checkPayload(payload: Json): number[] {
    return checkIndexList(payload, this.omega, this.d, "an ss payload");
  }
}

/** K = 2^(bit length of d), the least power of two above d. */
const hadamardOrder = (d: number) => 2 ** bitLength(d);

/** Hadamard Response (§7.2): y uniform in C_x with e^ε/(1 + e^ε), else uniform outside it. */
export class HadamardResponse extends CategoricalOracle {
  readonly name = "hr";
  readonly size: number;
  constructor(categories: Categories, epsilon: number) {
    super(categories, epsilon);
    this.size = hadamardOrder(this.d);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): number {
    // Exactly one of y and y XOR (the highest bit of x + 1) lies in C_x: a uniform y and its
    // partner give a uniform point inside and a uniform point outside at once.
    const y = uniformInt(rng, this.size);
    const partner = y ^ (2 ** (bitLength(x + 1) - 1));
    const [inside, outside] = hrInBlock(x, y) ? [y, partner] : [partner, y];
    const e = Math.exp(this.epsilon);
    return bernoulli(rng, e / (1 + e)) ? inside : outside;
  }
  checkPayload(payload: Json): number {
    return checkInt(payload, 0, this.size - 1, "an hr payload");
  }
  override payloadBounds(): [number, number] {
    return [0, this.size - 1];
  }
}

/** S-Hist (§7.1): row j uniformly; the sign H_K[j][x+1], kept with e^ε/(e^ε + 1). */
export class SuccinctHistogram extends CategoricalOracle {
  readonly name = "shist";
  readonly size: number;
  readonly keep: number;
  constructor(categories: Categories, epsilon: number) {
    super(categories, epsilon);
    this.size = hadamardOrder(this.d);
    const e = Math.exp(epsilon);
    this.keep = e / (1 + e);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const j = uniformInt(rng, this.size);
    const sign = hadamardSign(j, x + 1);
    return { j, b: bernoulli(rng, this.keep) ? sign : 1 - sign };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["j", "b"])) throw new PayloadError('an shist payload is {"j": row, "b": bit}');
    return { j: checkInt(payload.j, 0, this.size - 1, "shist row j"), b: checkInt(payload.b, 0, 1, "shist bit b") };
  }
}

/** dBitFlip (§10.2): b buckets uniformly; each bit 1 with z/(z + 1) at x, 1/(z + 1) elsewhere,
 * z = e^(ε/2) (e^ε when b = 1: no report then holds two buckets). */
export class DBitFlip extends CategoricalOracle {
  readonly name = "dbitflip";
  readonly b: number;
  readonly pBit: number;
  constructor(categories: Categories, epsilon: number, params: JsonObject) {
    super(categories, epsilon);
    this.b = intParam(params, "b", 1, categories.size);
    const z = Math.exp(epsilon / Math.min(this.b, 2));
    this.pBit = z / (z + 1);
  }
  randomize(x: number, rng: RandomSource = cryptoRandom): JsonObject {
    const buckets = sampleDistinct(rng, this.d, this.b);
    const bits = buckets.map((j) => (bernoulli(rng, j === x ? this.pBit : 1 - this.pBit) ? 1 : 0));
    return { buckets, bits };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["buckets", "bits"])) throw new PayloadError('a dbitflip payload is {"buckets": [...], "bits": [...]}');
    const buckets = checkIndexList(payload.buckets, this.b, this.d, "buckets");
    const bits = payload.bits;
    if (!Array.isArray(bits) || bits.length !== this.b || !bits.every((v) => v === 0 || v === 1)) {
      throw new PayloadError(`bits must be ${this.b} values of 0 or 1`);
    }
    return { buckets, bits: [...bits] };
  }
}

/** k-RR or OUE at ε over `categories`, whichever has the smaller Var* (ties: k-RR), as the
 * Python side chooses for records and hierarchical levels (MECHANISMS.md §12). */
export function leastVarianceOracle(epsilon: number, categories: Categories): KRR | UnaryEncoding {
  const krr = new KRR("krr", categories, epsilon);
  const oue = new UnaryEncoding("oue", categories, epsilon);
  return krr.approximateVariance() <= oue.approximateVariance() ? krr : oue;
}
