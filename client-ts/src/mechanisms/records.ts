/**
 * Records of d categorical attributes (docs/protocol.md, "Records"; MECHANISMS-2.md §2): the
 * whole record is the privacy unit. Each inner oracle is k-RR or OUE, whichever has the smaller
 * exact variance at its ε and size (the choice the config's `derived.oracles` names).
 */
import { ConfigError } from "../config.js";
import type { Json } from "../json.js";
import { cryptoRandom, uniformInt, type RandomSource } from "../random.js";
import {
  byAttribute, Categories, checkInt, intParam, isObject, keysAre, PayloadError, ValueDomainError, type JsonObject, type Mechanism,
} from "./common.js";
import { KRR, leastVarianceOracle, UnaryEncoding } from "./frequency.js";

type Oracle = KRR | UnaryEncoding;

/** A record domain: 2 to 16 named attributes, each a categories list (with its own `other`). */
export class RecordDomain {
  readonly names: string[];
  readonly attributes: Categories[];
  constructor(domain: JsonObject) {
    const attributes = domain.attributes;
    if (domain.kind !== "record" || !Array.isArray(attributes) || attributes.length < 2 || attributes.length > 16) {
      throw new ConfigError("this mechanism takes a record domain of 2 to 16 attributes");
    }
    this.names = attributes.map((a) => (isObject(a) && typeof a.name === "string" ? a.name : ""));
    if (this.names.includes("") || new Set(this.names).size !== this.names.length) throw new ConfigError("attribute names must be distinct strings");
    this.attributes = attributes.map((a) => new Categories(a as JsonObject));
    if (this.attributes.some((a) => a.size < 2 || a.size > 4096)) throw new ConfigError("each attribute has 2 to 4096 categories");
  }
  get sizes(): number[] {
    return this.attributes.map((a) => a.size);
  }
  /** One category index per attribute. */
  encode(value: unknown): number[] {
    return byAttribute(value, this.names, "record").map((item, j) => {
      try {
        return (this.attributes[j] as Categories).encode(item);
      } catch (error) {
        if (!(error instanceof ValueDomainError)) throw error;
        throw new ValueDomainError(`attribute ${JSON.stringify(this.names[j])}: ${error.message}`);
      }
    });
  }
  randomValue(rng: RandomSource): { [name: string]: string } {
    return Object.fromEntries(this.names.map((n, j) => [n, (this.attributes[j] as Categories).randomValue(rng)]));
  }
}

abstract class RecordMechanism implements Mechanism {
  abstract readonly name: string;
  readonly record: RecordDomain;
  constructor(domain: JsonObject, readonly epsilon: number) {
    this.record = new RecordDomain(domain);
  }
  get d(): number {
    return this.record.names.length;
  }
  encode(value: unknown): number[] {
    return this.record.encode(value);
  }
  randomValue(rng: RandomSource = cryptoRandom): { [name: string]: string } {
    return this.record.randomValue(rng);
  }
  /** The oracles' names in attribute or set order, as `derived.oracles` lists them. */
  abstract oracleNames(): string[];
  abstract randomize(x: number[], rng?: RandomSource): Json;
  abstract checkPayload(payload: Json): Json;
  payloadBounds(): null {
    return null;
  }
}

/** SMP: one attribute uniformly, through its oracle at the full ε. `{"a": j, "y": inner}`. */
export class SampledAttribute extends RecordMechanism {
  readonly name = "smp";
  readonly oracles: Oracle[];
  constructor(domain: JsonObject, epsilon: number) {
    super(domain, epsilon);
    this.oracles = this.record.attributes.map((a) => leastVarianceOracle(epsilon, a));
  }
  oracleNames(): string[] {
    return this.oracles.map((o) => o.name);
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): JsonObject {
    const a = uniformInt(rng, this.d);
    return { a, y: (this.oracles[a] as Oracle).randomize(x[a] as number, rng) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["a", "y"])) throw new PayloadError('an smp payload is {"a": attribute index, "y": report}');
    const a = checkInt(payload.a, 0, this.d - 1, "a (the attribute index)");
    return { a, y: (this.oracles[a] as Oracle).checkPayload(payload.y as Json) };
  }
}

/** SPL: every attribute, each through its oracle at ε/d. `{"y": [d inner payloads]}`. */
export class SplitBudget extends RecordMechanism {
  readonly name = "spl";
  readonly oracles: Oracle[];
  constructor(domain: JsonObject, epsilon: number) {
    super(domain, epsilon);
    this.oracles = this.record.attributes.map((a) => leastVarianceOracle(epsilon / this.d, a));
  }
  oracleNames(): string[] {
    return this.oracles.map((o) => o.name);
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): JsonObject {
    return { y: this.oracles.map((o, j) => o.randomize(x[j] as number, rng)) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["y"]) || !Array.isArray(payload.y) || payload.y.length !== this.d) {
      throw new PayloadError(`an spl payload is {"y": [${this.d} reports, one per attribute]}`);
    }
    const reports = payload.y;
    return { y: this.oracles.map((o, j) => o.checkPayload(reports[j] as Json)) };
  }
}

/** RS+FD[GRR] at the campaign's ε: one attribute (not sent) by k-RR, a uniform fake elsewhere. */
export class RandomSamplingFakeData extends RecordMechanism {
  readonly name = "rsfd";
  readonly oracles: KRR[];
  constructor(domain: JsonObject, epsilon: number) {
    super(domain, epsilon);
    this.oracles = this.record.attributes.map((a) => new KRR("krr", a, epsilon));
  }
  oracleNames(): string[] {
    return this.oracles.map(() => "krr");
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): JsonObject {
    const sampled = uniformInt(rng, this.d);
    return {
      y: this.oracles.map((o, i) => (i === sampled ? o.randomize(x[i] as number, rng) : uniformInt(rng, o.d))),
    };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["y"]) || !Array.isArray(payload.y) || payload.y.length !== this.d) {
      throw new PayloadError(`an rsfd payload is {"y": [${this.d} category indices]}`);
    }
    const reports = payload.y;
    return { y: this.oracles.map((o, i) => checkInt(reports[i], 0, o.d - 1, `y[${i}]`)) };
  }
}

/** The `order`-subsets of [0, d) in lexicographic order. */
function combinations(d: number, order: number): number[][] {
  const out: number[][] = [];
  const walk = (start: number, prefix: number[]) => {
    if (prefix.length === order) {
      out.push(prefix);
      return;
    }
    for (let a = start; a < d; a++) walk(a + 1, [...prefix, a]);
  };
  walk(0, []);
  return out;
}

/** CALM's collection: one `order`-set of attributes uniformly; the record's cell in its joint
 * domain (row-major, the first attribute slowest) through that set's oracle. `{"s": s, "y": inner}`. */
export class Marginals extends RecordMechanism {
  readonly name = "marginals";
  readonly order: number;
  readonly sets: number[][];
  readonly oracles: Oracle[];
  constructor(domain: JsonObject, epsilon: number, params: JsonObject) {
    super(domain, epsilon);
    this.order = intParam(params, "order", 2, Math.min(3, this.d));
    this.sets = combinations(this.d, this.order);
    const sizes = this.record.sizes;
    const cells = this.sets.map((s) => s.reduce((n, a) => n * (sizes[a] as number), 1));
    if (Math.max(...cells) > 4096) throw new ConfigError("a marginal has more than 4096 cells");
    this.oracles = cells.map((k) => leastVarianceOracle(epsilon, Categories.numbered(k)));
  }
  oracleNames(): string[] {
    return this.oracles.map((o) => o.name);
  }
  cell(set: number[], x: number[]): number {
    const sizes = this.record.sizes;
    return set.reduce((index, a) => index * (sizes[a] as number) + (x[a] as number), 0);
  }
  randomize(x: number[], rng: RandomSource = cryptoRandom): JsonObject {
    const s = uniformInt(rng, this.sets.length);
    return { s, y: (this.oracles[s] as Oracle).randomize(this.cell(this.sets[s] as number[], x), rng) };
  }
  checkPayload(payload: Json): JsonObject {
    if (!keysAre(payload, ["s", "y"])) throw new PayloadError('a marginals payload is {"s": marginal index, "y": report}');
    const s = checkInt(payload.s, 0, this.sets.length - 1, "s (the marginal index)");
    return { s, y: (this.oracles[s] as Oracle).checkPayload(payload.y as Json) };
  }
}
