/**
 * Every vector of docs/vectors/, run one by one; the last test fails if a file gains a family
 * that is in neither COVERED nor NOT_COVERED (which is empty: `campaigns.json`'s `spec`, the
 * definition a config was resolved from, is the collector's job and is named in COVERED's
 * campaigns line as left out on purpose).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  bloomBits, canonicalBytes, canonicalJson, checkEnvelope, configDigest, configOf, ConfigError,
  DIGEST_PATTERN, formatFloat, googleBloomBits, hadamardSign, HierarchicalHistogram, hrInBlock, JsonFloat,
  localHash, MAX_TIME, md5, mechanismFor, mix64, murmur3x86_32, parseJsonExact, PEM, prefixBucket, prefixChain,
  PrefixDiscovery, prefixSeed, prefixWords, recomputeEpsilon, REPORT_ID_PATTERN, reportCanonical, reportWire,
  seededRandomForTests, SUPPORTED_MECHANISMS, truncateTime, typeConfigFloats, valueBits, verifyConfig,
  type Json, type Mechanism,
} from "../src/index.js";

type Obj = { [key: string]: Json };
const VECTORS = new URL("../../../docs/vectors/", import.meta.url);
const text = (name: string) => readFileSync(new URL(name, VECTORS), "utf8");
/** Each file twice: exactly (floats and big integers kept) and as JSON.parse reads it. */
const exact = (name: string) => parseJsonExact(text(name)) as Obj;
const plain = (name: string) => JSON.parse(text(name)) as Obj;
const hex = (bytes: Uint8Array) => Buffer.from(bytes).toString("hex");
const list = (v: Json | undefined) => v as Obj[];

/** Families (file: top-level key) covered here, and the ones left to the next increments. */
const COVERED = [
  "canonical-json.json: floats", "canonical-json.json: integers", "canonical-json.json: strings",
  "canonical-json.json: values", "canonical-json.json: refused",
  "campaigns.json: campaigns (config, canonical, canonical_bytes, digest, public_config; not spec)",
  "hashing.json: murmur3_x86_32", "hashing.json: bloom_bits", "hashing.json: local_hash",
  "hashing.json: hadamard_sign", "hashing.json: hr_in_block", "hashing.json: google_bloom_bits",
  "hashing.json: prefix_hash", "hashing.json: alphabet_encoding",
  "payloads.json: payloads (all 90 campaigns, all 34 mechanisms)",
  "reports.json: valid", "reports.json: invalid", "reports.json: time_buckets",
  "reports.json: report_id_pattern", "reports.json: digest_pattern", "reports.json: max_time",
];
const NOT_COVERED: string[] = [];

const C = exact("canonical-json.json");

test("canonical-json floats: binary64 bits → Python's repr", () => {
  for (const v of list(C.floats)) {
    const x = Buffer.from(v.bits as string, "hex").readDoubleBE(0);
    assert.equal(formatFloat(x), v.canonical, `bits ${v.bits}`);
    assert.equal(canonicalJson(new JsonFloat(x)), v.canonical);
    const back = parseJsonExact(v.canonical as string);
    assert.ok(back instanceof JsonFloat && Object.is(back.value, x), "reads back as the same float");
  }
  assert.equal(list(C.floats).length, 36);
});

test("canonical-json integers, including beyond 2^53 (as bigint)", () => {
  for (const v of list(C.integers)) assert.equal(canonicalJson(v.value as Json), v.canonical);
  assert.equal(typeof list(C.integers).at(-1)?.value, "bigint");
});

test("canonical-json strings and nested values: text and UTF-8 bytes", () => {
  for (const v of [...list(C.strings), ...list(C.values)]) {
    assert.equal(canonicalJson(v.value as Json), v.canonical);
    assert.equal(hex(canonicalBytes(v.value as Json)), v.utf8_hex);
  }
});

test("canonical-json refused values", () => {
  const values: { [k: string]: number } = { NaN: NaN, Infinity: Infinity, "-Infinity": -Infinity };
  for (const v of list(C.refused)) {
    const x = values[v.value as string];
    assert.ok(x !== undefined, `unknown refused value ${v.value}`);
    assert.throws(() => canonicalJson(x), /not JSON/);
    assert.throws(() => canonicalJson(new JsonFloat(x)), /not JSON/);
  }
});

const CAMPAIGNS = list(exact("campaigns.json").campaigns);
const PLAIN_CAMPAIGNS = list(plain("campaigns.json").campaigns);

test("campaigns: canonical text, byte count and digest of every config, read exactly", async () => {
  assert.equal(CAMPAIGNS.length, 90);
  for (const c of CAMPAIGNS) {
    const config = c.config as Obj;
    assert.equal(canonicalJson(config), c.canonical, String(c.name));
    assert.equal(canonicalBytes(config).length, c.canonical_bytes);
    assert.equal(await configDigest(config), c.digest);
    assert.equal(await configDigest(configOf(c.public_config as Obj)), c.digest, "from the public config");
  }
});

test("campaigns: the same digests from JSON.parse and the known float fields", async () => {
  for (const c of PLAIN_CAMPAIGNS) {
    assert.equal(canonicalJson(typeConfigFloats(c.config as Obj)), c.canonical, String(c.name));
    assert.equal(await configDigest(typeConfigFloats(configOf(c.public_config as Obj))), c.digest);
  }
});

test("campaigns: ε re-derived from the parameters matches the config and the served derived ε", () => {
  for (const c of CAMPAIGNS) {
    const config = c.config as Obj;
    const epsilon = recomputeEpsilon(config);
    // Bit for bit: the same operations in the same order as the Python side, and V8's log
    // agrees with the C library's on all 90 campaigns (a port on another engine may see the
    // last bit differ; it should then compare within a few ulps).
    assert.equal(epsilon, (config.epsilon as JsonFloat).value, String(c.name));
    const derived = ((c.public_config as Obj).derived as Obj).epsilon as JsonFloat;
    assert.equal(epsilon, derived.value);
  }
});

test("campaigns: verifyConfig accepts the pinned digest and refuses tampering", async () => {
  for (const c of CAMPAIGNS) {
    const served = c.public_config as Obj;
    const pinnedDigest = c.digest as string;
    const ok = await verifyConfig(served, { pinnedDigest, epsilonCap: 50 });
    assert.equal(ok.digest, pinnedDigest);
    await assert.rejects(verifyConfig(served, { pinnedDigest: "0".repeat(64), epsilonCap: 50 }), ConfigError);
    await assert.rejects(verifyConfig(served, { pinnedDigest, epsilonCap: ok.epsilon * 0.999 }), /cap/);
    const renamed = { ...served, description: "x" + String(served.description) };
    await assert.rejects(verifyConfig(renamed, { pinnedDigest, epsilonCap: 50 }), /pinned/);
    await assert.rejects(verifyConfig({ ...served, format: "chorus.campaign/2" }, { pinnedDigest, epsilonCap: 50 }), /format/);
  }
});

test("campaigns: a config claiming a smaller ε than its RAPPOR parameters give is refused", async () => {
  const c = CAMPAIGNS.find((x) => (x.config as Obj).mechanism === "rappor") as Obj;
  const config = { ...(c.config as Obj), epsilon: new JsonFloat(0.1) };
  const pinnedDigest = await configDigest(config);
  await assert.rejects(verifyConfig(config, { pinnedDigest, epsilonCap: 50 }), /does not match/);
});

const H = exact("hashing.json");

test("hashing: murmur3_x86_32 (unsigned, including hashes ≥ 2^31)", () => {
  const rows = list(H.murmur3_x86_32);
  assert.ok(rows.some((r) => (r.hash as number) >= 2 ** 31));
  for (const r of rows) {
    assert.equal(murmur3x86_32(Buffer.from(r.utf8_hex as string, "hex"), r.seed as number), r.hash);
  }
});

test("hashing: bloom_bits, local_hash, hadamard_sign, hr_in_block", () => {
  for (const r of list(H.bloom_bits)) {
    assert.deepEqual(bloomBits(r.value as string, r.cohort as number, r.k as number, r.h as number), r.bits);
  }
  for (const r of list(H.local_hash)) {
    const { a, b, v, prime, g } = r as { [k: string]: number };
    assert.equal(localHash(a as number, b as number, v as number, prime as number, g as number), r.hash);
  }
  for (const r of list(H.hadamard_sign)) assert.equal(hadamardSign(r.row as number, r.column as number), r.sign);
  for (const r of list(H.hr_in_block)) assert.equal(hrInBlock(r.x as number, r.y as number), r.in_block);
});
test("hashing: MD5 (RFC 1321's own test suite) and google_bloom_bits with their MD5 input", () => {
  const rfc: [string, string][] = [
    ["", "d41d8cd98f00b204e9800998ecf8427e"],
    ["a", "0cc175b9c0f1b6a831c399e269772661"],
    ["abc", "900150983cd24fb0d6963f7d28e17f72"],
    ["message digest", "f96b697d7cb7938d525a2f31aaf161d0"],
    ["abcdefghijklmnopqrstuvwxyz", "c3fcd3d76192e4007dfb496cca67e13b"],
    ["ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789", "d174ab98d277d9f5a5611c2c9f419d9f"],
    ["1234567890".repeat(8), "57edf4a22be3c955ac49da2e2107b67a"],
  ];
  for (const [input, digest] of rfc) assert.equal(hex(md5(new TextEncoder().encode(input))), digest, input);
  const rows = list(H.google_bloom_bits);
  assert.ok(rows.length > 0);
  for (const r of rows) {
    const input = Buffer.concat([Buffer.from([0, 0, 0, 0]), Buffer.from(r.value as string, "utf8")]);
    input.writeUInt32BE(r.cohort as number, 0);
    assert.equal(input.toString("hex"), r.md5_input_hex);
    assert.deepEqual(googleBloomBits(r.value as string, r.cohort as number, r.k as number, r.h as number), r.bits);
  }
});

const hex64 = (x: bigint) => x.toString(16).padStart(16, "0");

test("hashing: prefix_hash, every intermediate value (padded value, prefix words, seed, chain, bucket)", () => {
  const rows = list(H.prefix_hash);
  assert.ok(rows.length > 0);
  for (const r of rows) {
    const { max_bytes: maxBytes, salt, group, s, cohort, bins } = r as { [k: string]: number };
    const m = 8 * (maxBytes as number);
    const x = valueBits(new TextEncoder().encode(r.value as string), maxBytes as number);
    assert.equal(x.toString(16).padStart(2 * (maxBytes as number), "0"), r.value_hex);
    const words = prefixWords(x, s as number, m);
    assert.deepEqual(words.map(hex64), r.prefix_words_hex);
    const seed = prefixSeed(salt as number, group as number, s as number);
    assert.equal(hex64(seed), r.seed_hex);
    const chained = prefixChain(seed, words);
    assert.equal(hex64(chained), r.chain_hex);
    assert.equal(prefixBucket(chained, cohort as number, bins as number), r.bucket);
  }
  assert.equal(mix64(0n), 0n);
});

test("hashing: alphabet_encoding, through a discovery campaign over that alphabet", () => {
  const rows = list(H.alphabet_encoding);
  assert.ok(rows.length > 0);
  for (const r of rows) {
    const { symbol_bits: width, salt, group, s, cohort, bins } = r as { [k: string]: number };
    const config = {
      domain: { kind: "strings", max_bytes: r.max_bytes as number, alphabet: r.alphabet as string },
      params: { top: 1, keep: 1, bins: bins as number, cohorts: 1, first_bits: width as number,
        step_bits: width as number, final_share: 25, salt: salt as number },
    };
    const pem = new PEM(config.domain, 1.0, config.params);
    assert.equal(pem.symbolBits, width);
    assert.equal(pem.m, r.m);
    const x = pem.encode(r.value);
    assert.equal(x.toString(16), r.value_bits_hex, String(r.value));
    assert.equal(pem.bucket(group as number, s as number, cohort as number, bins as number, x), r.bucket);
  }
});

const PAYLOADS = list(exact("payloads.json").payloads);
const byName = new Map(CAMPAIGNS.map((c) => [c.name, c]));
const mechanismOf = (config: Obj) => mechanismFor(config, recomputeEpsilon(config));

test("payloads: every mechanism accepts every valid payload and refuses every invalid one", () => {
  const seen = new Set<Json>();
  for (const entry of PAYLOADS) {
    const config = (byName.get(entry.campaign) as Obj).config as Obj;
    const mechanism = mechanismOf(config);
    seen.add(entry.mechanism as Json);
    assert.equal(mechanism.name, entry.mechanism);
    assert.deepEqual(mechanism.payloadBounds(), entry.payload_bounds, `${entry.campaign}: payload_bounds`);
    for (const v of list(entry.valid)) {
      assert.equal(canonicalJson(mechanism.checkPayload(v.payload as Json)), v.canonical, `${entry.campaign}`);
    }
    for (const v of list(entry.invalid)) {
      assert.throws(() => mechanism.checkPayload(v.payload as Json), `${entry.campaign}: ${v.mutation}`);
    }
  }
  assert.equal(PAYLOADS.length, CAMPAIGNS.length);
  assert.deepEqual([...seen].sort(), [...SUPPORTED_MECHANISMS].sort());
  assert.equal(SUPPORTED_MECHANISMS.length, 34);
});

/** Inputs worth randomizing for a campaign: every category (or attribute combination's
 * extremes), the ends and middle of a range, and values drawn from the domain. */
function inputsOf(mechanism: Mechanism, domain: Obj, rng: ReturnType<typeof seededRandomForTests>): unknown[] {
  const drawn = Array.from({ length: 6 }, () => mechanism.randomValue(rng));
  switch (domain.kind) {
    case "categories":
      return [...(domain.values as string[]), ...drawn];
    case "numeric": {
      const lo = (domain.lo as JsonFloat).value;
      const hi = (domain.hi as JsonFloat).value;
      return [lo, hi, (lo + hi) / 2, lo - 1, ...drawn];
    }
    case "vector": {
      const attributes = domain.attributes as Obj[];
      const end = (key: "lo" | "hi") => attributes.map((a) => (a[key] as JsonFloat).value);
      return [end("lo"), end("hi"), ...drawn];
    }
    case "record": {
      const attributes = domain.attributes as Obj[];
      const pick = (i: number) => Object.fromEntries(attributes.map((a) => [a.name as string, (a.values as string[]).at(i) as string]));
      return [pick(0), pick(-1), ...drawn];
    }
    default:
      return ["", ...drawn];
  }
}

test("payloads: what this client randomizes has the shape of the valid payloads, for every input", () => {
  const rng = seededRandomForTests(36);
  for (const c of CAMPAIGNS) {
    const config = c.config as Obj;
    const mechanism = mechanismOf(config);
    for (const value of inputsOf(mechanism, config.domain as Obj, rng)) {
      const x = mechanism.encode(value);
      for (let i = 0; i < 100; i++) {
        const payload = mechanism.randomize(x, rng);
        assert.equal(canonicalJson(mechanism.checkPayload(payload)), canonicalJson(payload), String(c.name));
      }
    }
  }
});

test("campaigns: the facts derived here match the served `derived` (groups, prefix bits, oracles, levels)", () => {
  for (const c of CAMPAIGNS) {
    const mechanism = mechanismOf(c.config as Obj);
    const derived = (c.public_config as Obj).derived as Obj;
    if (mechanism instanceof PrefixDiscovery) {
      assert.equal(mechanism.groups, derived.groups, String(c.name));
      assert.deepEqual(mechanism.lengths, derived.prefix_bits, String(c.name));
    } else if (mechanism instanceof HierarchicalHistogram) {
      assert.equal(mechanism.height, derived.height);
      assert.deepEqual(mechanism.oracles.map((o) => o.name), derived.level_oracles);
    } else if ("oracleNames" in mechanism) {
      assert.deepEqual((mechanism as unknown as { oracleNames(): string[] }).oracleNames(), derived.oracles, String(c.name));
    }
  }
});

const R = exact("reports.json");

test("reports: valid reports give the Python client's wire bytes and the canonical text", () => {
  const byName = new Map(CAMPAIGNS.map((c) => [c.name, c.config as Obj]));
  for (const v of list(R.valid)) {
    const report = v.report as Obj;
    checkEnvelope(report, (byName.get(v.campaign) as Obj).time_precision as number);
    assert.equal(reportWire(report), v.wire);
    assert.equal(reportCanonical(report), v.canonical);
  }
});

test("reports: every invalid report is refused (envelope, digest or payload)", () => {
  const config = CAMPAIGNS.find((c) => c.name === "krr-0")?.config as Obj;
  const mechanism = mechanismFor(config, recomputeEpsilon(config));
  const digest = CAMPAIGNS.find((c) => c.name === "krr-0")?.digest;
  for (const v of list(R.invalid)) {
    assert.equal(v.campaign, "krr-0");
    const refused = () => {
      checkEnvelope(v.report, config.time_precision as number);
      if (v.report.digest !== digest) throw new Error("digest-mismatch");
      mechanism.checkPayload(v.report.payload as Json);
    };
    assert.throws(refused, String(v.case));
  }
});

test("reports: time buckets, patterns and the time limit", () => {
  for (const v of list(R.time_buckets)) {
    const now = v.now instanceof JsonFloat ? v.now.value : (v.now as number);
    assert.equal(truncateTime(now, v.time_precision as number), v.time);
  }
  assert.equal(REPORT_ID_PATTERN.source, R.report_id_pattern);
  assert.equal(DIGEST_PATTERN.source, R.digest_pattern);
  assert.equal(MAX_TIME, R.max_time);
});

test("the covered and not-covered lists name every vector family", () => {
  const named = new Set([...COVERED, ...NOT_COVERED].map((s) => s.split(" ")[0] + " " + s.split(" ")[1]));
  for (const file of ["canonical-json.json", "campaigns.json", "hashing.json", "payloads.json", "reports.json"]) {
    for (const key of Object.keys(exact(file)).filter((k) => k !== "description")) {
      assert.ok(named.has(`${file}: ${key}`), `${file}: ${key} is in neither list`);
    }
  }
});
