/**
 * Open-string oracles besides RAPPOR (MECHANISMS.md §6, §7.3): O-RR and Apple's count-mean
 * sketches. The value is hashed with murmur3 Bloom hashing, h = 1 (docs/protocol.md, "Hashing").
 */
import { ConfigError } from "../config.js";
import { bloomBits, hadamardSign } from "../hashing.js";
import type { Json } from "../json.js";
import { bernoulli, cryptoRandom, uniformInt, type RandomSource } from "../random.js";
import {
  checkHex, checkInt, intParam, keysAre, krrDraw, OpenStrings, PayloadError, toHex, type JsonObject, type Mechanism,
} from "./common.js";

abstract class StringOracle implements Mechanism {
  abstract readonly name: string;
  readonly strings: OpenStrings;
  constructor(domain: JsonObject, readonly epsilon: number) {
    this.strings = new OpenStrings(domain);
  }
  encode(value: unknown): string {
    return this.strings.encode(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): string {
    return this.strings.randomValue(rng);
  }
  abstract randomize(x: string, rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  payloadBounds(): null {
    return null;
  }
}

/** O-RR: a cohort uniformly; k-RR over the k bins of the value's bin in that cohort. */
export class OpenRR extends StringOracle {
  readonly name = "o_rr";
  readonly k: number;
  readonly m: number;
  readonly p: number;
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon);
    this.k = intParam(params, "k", 2, 4096);
    this.m = intParam(params, "m", 1, 2 ** 20);
    const e = Math.exp(epsilon);
    this.p = e / (e + this.k - 1);
  }
  randomize(x: string, rng: RandomSource = cryptoRandom): JsonObject {
    const cohort = uniformInt(rng, this.m);
    const bin = bloomBits(x, cohort, this.k, 1)[0] as number;
    return { cohort, y: krrDraw(rng, bin, this.k, this.p) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["cohort", "y"])) throw new PayloadError('an o_rr payload is {"cohort": int, "y": int}');
    return { cohort: checkInt(payload.cohort, 0, this.m - 1, "cohort"), y: checkInt(payload.y, 0, this.k - 1, "y") };
  }
}

/** CMS: j uniformly; the one-hot m-vector of h_j(x), each coordinate flipped with 1/(1 + e^(ε/2)). */
export class CountMeanSketch extends StringOracle {
  readonly name = "cms";
  readonly k: number;
  readonly m: number;
  readonly flip: number;
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon);
    this.k = intParam(params, "k", 1, 4096);
    this.m = intParam(params, "m", 2, 4096);
    this.flip = 1 / (1 + Math.exp(epsilon / 2));
  }
  randomize(x: string, rng: RandomSource = cryptoRandom): JsonObject {
    const j = uniformInt(rng, this.k);
    const hot = bloomBits(x, j, this.m, 1)[0] as number;
    const bits = new Uint8Array(this.m);
    for (let i = 0; i < this.m; i++) bits[i] = (i === hot ? 1 : 0) ^ (bernoulli(rng, this.flip) ? 1 : 0);
    return { j, bits: toHex(bits) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["j", "bits"])) throw new PayloadError('a cms payload is {"j": int, "bits": hex string}');
    return { j: checkInt(payload.j, 0, this.k - 1, "j"), bits: checkHex(payload.bits, this.m) };
  }
}

/** HCMS: j and l uniformly; the sign H_m[l][h_j(x)], kept with e^ε/(e^ε + 1). */
export class HadamardCountMeanSketch extends StringOracle {
  readonly name = "hcms";
  readonly k: number;
  readonly m: number;
  readonly keep: number;
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon);
    this.k = intParam(params, "k", 1, 4096);
    this.m = intParam(params, "m", 2, 4096);
    if ((this.m & (this.m - 1)) !== 0) throw new ConfigError("hcms parameter m must be a power of two");
    const e = Math.exp(epsilon);
    this.keep = e / (e + 1);
  }
  randomize(x: string, rng: RandomSource = cryptoRandom): JsonObject {
    const j = uniformInt(rng, this.k);
    const l = uniformInt(rng, this.m);
    const sign = hadamardSign(l, bloomBits(x, j, this.m, 1)[0] as number);
    return { j, l, b: bernoulli(rng, this.keep) ? sign : 1 - sign };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["j", "l", "b"])) throw new PayloadError('an hcms payload is {"j": int, "l": int, "b": 0 or 1}');
    return {
      j: checkInt(payload.j, 0, this.k - 1, "j"),
      l: checkInt(payload.l, 0, this.m - 1, "l"),
      b: checkInt(payload.b, 0, 1, "b"),
    };
  }
}
