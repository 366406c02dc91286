/**
 * The registry: the client half of every mechanism the Chorus registry offers
 * (shared/chorus_shared/mechanisms/__init__.py), by its wire name, and the encoding step of
 * docs/protocol.md with the Python client's substitutes for values outside the domain.
 */
import { ConfigError } from "../config.js";
import { cryptoRandom, type RandomSource } from "../random.js";
import { ValueDomainError, type JsonObject, type Mechanism } from "./common.js";

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

/** Makes a mechanism's client half from a verified config's domain, ε and params. */
export type Factory = (domain: JsonObject, epsilon: number, params: JsonObject) => Mechanism;

/** Every mechanism this package implements: all 34 of the Chorus registry. */
export const SUPPORTED_MECHANISMS = [
  "rr", "krr", "sue", "oue", "olh", "blh", "ss", "hr", "shist", "dbitflip", "rappor", "basic_rappor",
  "boolean_rappor", "o_rr", "o_rappor", "cms", "hcms", "duchi", "one_bit_mean", "pm", "hm", "laplace",
  "duchi_md", "harmony", "pm_md", "hm_md", "sw", "hh", "smp", "spl", "rsfd", "marginals", "pem", "treehist",
] as const;
export type MechanismName = (typeof SUPPORTED_MECHANISMS)[number];

/**
 * The mechanisms this build registered: the common set (`common-set.ts`, in every build) and,
 * where the app imported it, the full set (`full-set.ts`). Registration keeps a browser bundle
 * down to the mechanisms an app uses: a factory nobody registers is never bundled.
 */
const REGISTRY = new Map<string, Factory>();

/** Adds mechanisms' factories to the registry (the sets call it when imported). */
export function registerMechanisms(factories: Partial<Record<MechanismName, Factory>>): void {
  for (const [name, factory] of Object.entries(factories)) {
    if (factory !== undefined) REGISTRY.set(name, factory);
  }
}

/** The names of the mechanisms this build can report with. */
export function registeredMechanisms(): string[] {
  return [...REGISTRY.keys()].sort();
}

/** The client half of a verified config's mechanism ({@link verifyConfig} first; `epsilon` is
 * what {@link recomputeEpsilon} gives). */
export function mechanismFor(config: JsonObject, epsilon: number): Mechanism {
  const domain = config.domain as JsonObject;
  const params = (config.params ?? {}) as JsonObject;
  const name = config.mechanism;
  const factory = typeof name === "string" ? REGISTRY.get(name) : undefined;
  if (factory === undefined) {
    const known = (SUPPORTED_MECHANISMS as readonly unknown[]).includes(name);
    throw new ConfigError(known
      ? `mechanism ${JSON.stringify(name)} is not in this build: import "@chorus-ldp/client/mechanisms/full" `
        + "(or load chorus-full.min.js) to report with every mechanism"
      : `mechanism ${JSON.stringify(name)} is not implemented by this client`);
  }
  if (typeof domain !== "object" || domain === null) throw new ConfigError("the config has no domain");
  return factory(domain, epsilon, params);
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
