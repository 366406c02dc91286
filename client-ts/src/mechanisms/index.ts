/**
 * The registry: the client half of every mechanism the Chorus registry offers
 * (shared/chorus_shared/mechanisms/__init__.py), by its wire name, and the encoding step of
 * docs/protocol.md with the Python client's substitutes for values outside the domain.
 */
import { ConfigError } from "../config.js";
import { cryptoRandom, type RandomSource } from "../random.js";
import { categoriesOf, NumericRange, ValueDomainError, type JsonObject, type Mechanism } from "./common.js";
import { PEM, TreeHist } from "./discovery.js";
import { HierarchicalHistogram, SquareWave } from "./distributions.js";
import {
  DBitFlip, HadamardResponse, KRR, LocalHashing, SubsetSelection, SuccinctHistogram, UnaryEncoding,
} from "./frequency.js";
import { DuchiBit, Hybrid, Laplace, Piecewise } from "./numbers.js";
import { CategoryRappor, Rappor } from "./rappor.js";
import { Marginals, RandomSamplingFakeData, SampledAttribute, SplitBudget } from "./records.js";
import { CountMeanSketch, HadamardCountMeanSketch, OpenRR } from "./strings.js";
import { DuchiMultidim, SampledAttributes } from "./vectors.js";

export * from "./common.js";
export * from "./discovery.js";
export * from "./distributions.js";
export * from "./exact.js";
export * from "./frequency.js";
export * from "./numbers.js";
export * from "./rappor.js";
export * from "./records.js";
export * from "./strings.js";
export * from "./vectors.js";

type Factory = (domain: JsonObject, epsilon: number, params: JsonObject) => Mechanism;

/** Every mechanism this package implements: all 34 of the Chorus registry. */
export const SUPPORTED_MECHANISMS = [
  "rr", "krr", "sue", "oue", "olh", "blh", "ss", "hr", "shist", "dbitflip", "rappor", "basic_rappor",
  "boolean_rappor", "o_rr", "o_rappor", "cms", "hcms", "duchi", "one_bit_mean", "pm", "hm", "laplace",
  "duchi_md", "harmony", "pm_md", "hm_md", "sw", "hh", "smp", "spl", "rsfd", "marginals", "pem", "treehist",
] as const;
export type MechanismName = (typeof SUPPORTED_MECHANISMS)[number];

/** One factory per name: the compiler checks that the list and the registry agree. */
const REGISTRY: { [name in MechanismName]: Factory } = {
  rr: (d, e) => new KRR("rr", categoriesOf(d), e),
  krr: (d, e) => new KRR("krr", categoriesOf(d), e),
  sue: (d, e) => new UnaryEncoding("sue", categoriesOf(d), e),
  oue: (d, e) => new UnaryEncoding("oue", categoriesOf(d), e),
  olh: (d, e, p) => new LocalHashing("olh", categoriesOf(d), e, p),
  blh: (d, e, p) => new LocalHashing("blh", categoriesOf(d), e, p),
  ss: (d, e, p) => new SubsetSelection(categoriesOf(d), e, p),
  hr: (d, e) => new HadamardResponse(categoriesOf(d), e),
  shist: (d, e) => new SuccinctHistogram(categoriesOf(d), e),
  dbitflip: (d, e, p) => new DBitFlip(categoriesOf(d), e, p),
  rappor: (d, _e, p) => new Rappor("rappor", d, p),
  basic_rappor: (d, _e, p) => new CategoryRappor("basic_rappor", d, p),
  boolean_rappor: (d, _e, p) => new CategoryRappor("boolean_rappor", d, p),
  o_rr: (d, e, p) => new OpenRR(d, e, p),
  o_rappor: (d, _e, p) => new Rappor("o_rappor", d, p),
  cms: (d, e, p) => new CountMeanSketch(d, e, p),
  hcms: (d, e, p) => new HadamardCountMeanSketch(d, e, p),
  duchi: (d, e) => new DuchiBit("duchi", NumericRange.of(d), e),
  one_bit_mean: (d, e) => new DuchiBit("one_bit_mean", NumericRange.of(d), e),
  pm: (d, e, p) => new Piecewise(NumericRange.of(d), e, p),
  hm: (d, e, p) => new Hybrid(NumericRange.of(d), e, p),
  laplace: (d, e, p) => new Laplace(NumericRange.of(d), e, p),
  duchi_md: (d, e) => new DuchiMultidim(d, e),
  harmony: (d, e, p) => new SampledAttributes("harmony", d, e, p),
  pm_md: (d, e, p) => new SampledAttributes("pm_md", d, e, p),
  hm_md: (d, e, p) => new SampledAttributes("hm_md", d, e, p),
  sw: (d, e, p) => new SquareWave(d, e, p),
  hh: (d, e, p) => new HierarchicalHistogram(d, e, p),
  smp: (d, e) => new SampledAttribute(d, e),
  spl: (d, e) => new SplitBudget(d, e),
  rsfd: (d, e) => new RandomSamplingFakeData(d, e),
  marginals: (d, e, p) => new Marginals(d, e, p),
  pem: (d, e, p) => new PEM(d, e, p),
  treehist: (d, e, p) => new TreeHist(d, e, p),
};

/** The client half of a verified config's mechanism ({@link verifyConfig} first; `epsilon` is
 * what {@link recomputeEpsilon} gives). */
export function mechanismFor(config: JsonObject, epsilon: number): Mechanism {
  const domain = config.domain as JsonObject;
  const params = (config.params ?? {}) as JsonObject;
  const name = config.mechanism;
  if (typeof name !== "string" || !Object.hasOwn(REGISTRY, name)) {
    throw new ConfigError(`mechanism ${JSON.stringify(name)} is not implemented by this client`);
  }
  if (typeof domain !== "object" || domain === null) throw new ConfigError("the config has no domain");
  return REGISTRY[name as MechanismName](domain, epsilon, params);
}

/** What a report randomizes: the value's encoding, or a substitute's. */
export interface Encoded {
  input: unknown;
  /** The value was outside the domain: `input` encodes a uniformly drawn value instead. */
  substituted: boolean;
  /** Why it was substituted (never quoting the value). */
  reason?: ValueDomainError;
}

/**
 * Step 4 as the Python client does it (docs/threat-model.md, rule 3): a value the domain cannot
 * take is not refused (refusing would make whether a report is sent depend on the value); the
 * report carries a value drawn uniformly from the domain instead (a random category, a number
 * in [lo, hi], a string nobody holds), and the caller learns it was substituted. A categories
 * domain with `other` never substitutes: `other` takes the value. Any failure of `encode`
 * counts, so no value can make this throw.
 */
export function encodeForReport(mechanism: Mechanism, value: unknown, rng: RandomSource = cryptoRandom): Encoded {
  try {
    return { input: mechanism.encode(value), substituted: false };
  } catch (error) {
    const reason = error instanceof ValueDomainError ? error
      : new ValueDomainError(`the value cannot be encoded (${error instanceof Error ? error.name : typeof error})`);
    return { input: mechanism.encode(mechanism.randomValue(rng)), substituted: true, reason };
  }
}
