/**
 * Campaign configs: their digest and the privacy claim re-derived from their parameters
 * (docs/protocol.md, "What a client does", steps 2–3, and "The config and its digest").
 */
import { canonicalBytes, JsonFloat, type Json } from "./json.js";

export const CONFIG_FORMAT = "chorus.campaign/1";

/** Fields of a public config that the digest does not cover. */
export const NON_CONFIG_FIELDS = ["digest", "derived", "worst_case", "warnings", "retired_at"] as const;

export class ConfigError extends Error {
  override name = "ConfigError";
}

type JsonObject = { [key: string]: Json };

function isObject(v: unknown): v is JsonObject {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof JsonFloat);
}

/** The config inside a public config (`GET /v1/campaigns/{name}`): the non-config fields dropped. */
export function configOf(publicConfig: JsonObject): JsonObject {
  const out: JsonObject = {};
  for (const [k, v] of Object.entries(publicConfig)) {
    if (!(NON_CONFIG_FIELDS as readonly string[]).includes(k)) out[k] = v;
  }
  return out;
}

function asFloat(v: Json | undefined): Json | undefined {
  return typeof v === "number" ? new JsonFloat(v) : v;
}

function floatVariances(v: Json): Json {
  if (Array.isArray(v)) return v.map(floatVariances);
  if (!isObject(v)) return v;
  const out: JsonObject = {};
  for (const [k, x] of Object.entries(v)) {
    out[k] = k === "variance_per_user" ? (asFloat(x) as Json) : floatVariances(x);
  }
  return out;
}

/**
 * "Know the types": mark the config fields that are always floats, for a config read with
 * `JSON.parse` (which reads `1.0` as `1`). Everything else in a config is an integer.
 */
export function typeConfigFloats(config: JsonObject): JsonObject {
  const out: JsonObject = { ...config };
  const set = (obj: JsonObject, key: string) => {
    if (key in obj) obj[key] = asFloat(obj[key]) as Json;
  };
  set(out, "epsilon");
  if (isObject(out.domain)) {
    const domain: JsonObject = { ...out.domain };
    set(domain, "lo");
    set(domain, "hi");
    if (Array.isArray(domain.attributes)) {
      domain.attributes = domain.attributes.map((a) => {
        if (!isObject(a)) return a;
        const attribute: JsonObject = { ...a };
        set(attribute, "lo");
        set(attribute, "hi");
        return attribute;
      });
    }
    out.domain = domain;
  }
  if (isObject(out.params)) {
    const params: JsonObject = { ...out.params };
    for (const k of ["f", "p", "q"]) set(params, k);
    out.params = params;
  }
  if (isObject(out.privacy)) {
    const privacy: JsonObject = { ...out.privacy };
    set(privacy, "budget");
    out.privacy = privacy;
  }
  if (out.selection !== undefined) out.selection = floatVariances(out.selection);
  return out;
}

function hex(bytes: ArrayBuffer): string {
  return Array.from(new Uint8Array(bytes), (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Lowercase hex SHA-256 of the config's canonical JSON (WebCrypto: browsers and Node alike). */
export async function configDigest(config: JsonObject): Promise<string> {
  const bytes = canonicalBytes(config);
  return hex(await globalThis.crypto.subtle.digest("SHA-256", bytes));
}

function num(v: Json | undefined, what: string): number {
  const x = v instanceof JsonFloat ? v.value : v;
  if (typeof x !== "number" || !Number.isFinite(x)) throw new ConfigError(`${what} must be a finite number`);
  return x;
}

/** ε of one report of RAPPOR's h-bit Bloom filter, from f, p, q (MECHANISMS.md §5). */
function rapporEpsilon(h: number, f: number, p: number, q: number): number {
  const r1 = (f * (p + q)) / 2 + (1 - f) * q;
  const r0 = (f * (p + q)) / 2 + (1 - f) * p;
  if (!(0 < r0 && r0 < r1 && r1 < 1)) return Infinity;
  return h * Math.log((r1 * (1 - r0)) / (r0 * (1 - r1)));
}

/** The mechanisms whose ε is a parameter of its own (every other parameter follows from it). */
const EPSILON_IS_THE_PARAMETER = new Set([
  "rr", "krr", "sue", "oue", "olh", "blh", "ss", "hr", "shist", "dbitflip", "o_rr", "cms",
  "hcms", "pem", "treehist", "duchi", "one_bit_mean", "pm", "hm", "laplace", "sw", "duchi_md",
  "harmony", "pm_md", "hm_md", "hh", "smp", "spl", "rsfd", "marginals",
]);

/**
 * ε of one report, recomputed from the config's parameters; never read from `derived`.
 * For the RAPPOR family it follows from f, p, q (and h); for every other mechanism ε is
 * itself the parameter the rest were derived from, so it is checked and returned.
 */
export function recomputeEpsilon(config: JsonObject): number {
  const mechanism = config.mechanism;
  const params = isObject(config.params) ? config.params : {};
  let epsilon: number;
  if (mechanism === "rappor" || mechanism === "o_rappor" || mechanism === "basic_rappor") {
    // o_rappor has no PRR (f = 0) and one hash (h = 1); basic_rappor's one-hot vectors of two
    // categories differ in one pair of bits, which is h = 1 in the Bloom formula.
    const h = mechanism === "rappor" ? num(params.h, "params.h") : 1;
    const f = params.f === undefined ? 0 : num(params.f, "params.f");
    epsilon = rapporEpsilon(h, f, num(params.p, "params.p"), num(params.q, "params.q"));
  } else if (mechanism === "boolean_rappor") {
    const f = num(params.f, "params.f");
    const p = num(params.p, "params.p");
    const q = num(params.q, "params.q");
    const r1 = (f * (p + q)) / 2 + (1 - f) * q;
    const r0 = (f * (p + q)) / 2 + (1 - f) * p;
    // Two inputs differ in one bit: the worse of the two likelihood ratios.
    epsilon = 0 < r0 && r0 < r1 && r1 < 1 ? Math.log(Math.max(r1 / r0, (1 - r0) / (1 - r1))) : Infinity;
  } else if (typeof mechanism === "string" && EPSILON_IS_THE_PARAMETER.has(mechanism)) {
    epsilon = num(config.epsilon, "epsilon");
  } else {
    throw new ConfigError(`unknown mechanism ${JSON.stringify(mechanism)}`);
  }
  if (!Number.isFinite(epsilon) || !(epsilon > 0)) {
    throw new ConfigError("the parameters give no privacy (ε is infinite or not positive)");
  }
  return epsilon;
}

export interface VerifyOptions {
  /** The digest the app pinned (shipped with it): the config must have exactly this one. */
  pinnedDigest: string;
  /** The app's cap on ε per report: a config whose recomputed ε exceeds it is refused. */
  epsilonCap: number;
}

export interface VerifiedConfig {
  config: JsonObject;
  digest: string;
  /** ε of one report as the parameters give it. */
  epsilon: number;
}

/**
 * Steps 2–3 of docs/protocol.md: recompute the digest and compare it with the pinned one
 * (and the served `digest`), refuse another format, re-derive ε and refuse it above the cap
 * or when the config's own `epsilon` claims less than its parameters give.
 *
 * `served` is a public config or a config, with floats typed: parsed with
 * {@link parseJsonExact}, or read with `JSON.parse` and passed through {@link typeConfigFloats}.
 */
export async function verifyConfig(served: JsonObject, options: VerifyOptions): Promise<VerifiedConfig> {
  const config = configOf(served);
  if (config.format !== CONFIG_FORMAT) throw new ConfigError(`unsupported config format ${JSON.stringify(config.format)}`);
  const digest = await configDigest(config);
  if (digest !== options.pinnedDigest) throw new ConfigError("the config's digest is not the pinned one");
  if ("digest" in served && served.digest !== digest) {
    throw new ConfigError("the served digest does not match the config");
  }
  const epsilon = recomputeEpsilon(config);
  const claimed = num(config.epsilon, "epsilon");
  if (Math.abs(claimed - epsilon) > 1e-9 * epsilon) {
    throw new ConfigError("the config's epsilon does not match what its parameters give");
  }
  if (epsilon > options.epsilonCap) throw new ConfigError("the config's ε exceeds this app's cap");
  return { config, digest, epsilon };
}
