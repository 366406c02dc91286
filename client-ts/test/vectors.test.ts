/**
 * Every vector of docs/vectors/ that this package covers, run one by one; the families it does
 * not cover yet are listed in NOT_COVERED and the last test fails if a file gains a family
 * that is in neither list.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  bloomBits, canonicalBytes, canonicalJson, checkEnvelope, configDigest, configOf, ConfigError,
  DIGEST_PATTERN, formatFloat, hadamardSign, hrInBlock, JsonFloat, localHash, MAX_TIME, mechanismFor,
  murmur3x86_32, parseJsonExact, recomputeEpsilon, REPORT_ID_PATTERN, reportCanonical, reportWire,
  seededRandomForTests, SUPPORTED_MECHANISMS, truncateTime, typeConfigFloats, verifyConfig, type Json,
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
  "hashing.json: hadamard_sign", "hashing.json: hr_in_block",
  "payloads.json: payloads (campaigns of the supported mechanisms only)",
  "reports.json: valid", "reports.json: invalid", "reports.json: time_buckets",
  "reports.json: report_id_pattern", "reports.json: digest_pattern", "reports.json: max_time",
];
const NOT_COVERED = [
  "hashing.json: google_bloom_bits (needs MD5, which WebCrypto lacks)",
  "hashing.json: prefix_hash", "hashing.json: alphabet_encoding",
];

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

const PAYLOADS = list(exact("payloads.json").payloads);
const supported = (mechanism: Json | undefined) => (SUPPORTED_MECHANISMS as readonly Json[]).includes(mechanism as Json);

test("payloads: the supported mechanisms accept every valid payload and refuse every invalid one", () => {
  const byName = new Map(CAMPAIGNS.map((c) => [c.name, c]));
  let campaigns = 0;
  for (const entry of PAYLOADS.filter((e) => supported(e.mechanism))) {
    campaigns++;
    const config = (byName.get(entry.campaign) as Obj).config as Obj;
    const mechanism = mechanismFor(config, recomputeEpsilon(config));
    for (const v of list(entry.valid)) {
      assert.equal(canonicalJson(mechanism.checkPayload(v.payload as Json)), v.canonical, `${entry.campaign}`);
    }
    for (const v of list(entry.invalid)) {
      assert.throws(() => mechanism.checkPayload(v.payload as Json), `${entry.campaign}: ${v.mutation}`);
    }
  }
  assert.equal(campaigns, 24);
});

test("payloads: what this client randomizes has the shape of the valid payloads, for every input", () => {
  const rng = seededRandomForTests(36);
  for (const c of CAMPAIGNS.filter((x) => supported((x.config as Obj).mechanism))) {
    const config = c.config as Obj;
    const mechanism = mechanismFor(config, recomputeEpsilon(config));
    const domain = config.domain as Obj;
    const inputs = domain.kind === "numeric" ? [-1, -0.5, 0, 0.25, 1]
      : (domain.values as string[]).map((v) => mechanism.encode(v));
    for (const x of inputs) {
      for (let i = 0; i < 200; i++) {
        const payload = mechanism.randomize(x, rng);
        assert.equal(canonicalJson(mechanism.checkPayload(payload)), canonicalJson(payload));
      }
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
