import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import {
  canonicalJson, encodeForReport, keyedGroup, mechanismFor, parseJsonExact, PrefixDiscovery, recomputeEpsilon, seededRandomForTests,
  ValueDomainError,
  type Json,
} from "../src/index.js";

type Obj = { [key: string]: Json };
const campaigns = (parseJsonExact(readFileSync(new URL("../../../docs/vectors/campaigns.json", import.meta.url), "utf8")) as Obj).campaigns as Obj[];
const mechanism = (name: string) => {
  const config = campaigns.find((c) => c.name === name)?.config as Obj;
  return mechanismFor(config, recomputeEpsilon(config));
};

test("a lone surrogate is refused, a surrogate pair is written as its character", () => {
  assert.throws(() => canonicalJson("a\ud83d"), /lone surrogate/);
  assert.throws(() => canonicalJson({ "\ude00": 1 }), /lone surrogate/);
  assert.equal(canonicalJson("\ud83d\ude00"), '"😀"');
});

test("out-of-domain values: refused without 'other', never quoting the value", () => {
  const krr = mechanism("krr-0");
  assert.throws(() => krr.encode("secret-value"), (e: Error) => e instanceof ValueDomainError && !e.message.includes("secret"));
  assert.equal(mechanism("unicode-labels").encode("secret-value"), 7); // its `other`, "autre"
});

test("rr takes booleans as its first and second category; numbers clip; NaN and ±∞ are refused", () => {
  const rr = mechanism("rr-0");
  assert.equal(rr.encode(false), 0);
  assert.equal(rr.encode(true), 1);
  assert.equal(mechanism("boolean_rappor-0").encode(true), 1);
  const duchi = mechanism("duchi-0"); // [-5, 5]
  assert.equal(duchi.encode(-1e9), -1);
  assert.equal(duchi.encode(1e9), 1);
  assert.equal(duchi.encode(0), 0);
  // Non-finite numbers are outside the domain, as in the Python client (they are substituted).
  for (const bad of [NaN, Infinity, -Infinity, "3", true, null]) assert.throws(() => duchi.encode(bad), ValueDomainError);
});

// χ² critical values at α = 1e-6 (scipy.stats.chi2.ppf(1 - 1e-6, dof)).
const CRITICAL: { [dof: number]: number } = { 3: 30.66, 7: 40.52 };

test("a value outside the domain is reported as a uniformly drawn substitute, never refused", () => {
  const rng = seededRandomForTests(5);
  const krr = mechanism("krr-0");
  const d = (campaigns.find((c) => c.name === "krr-0")?.config as Obj).domain as Obj;
  const size = (d.values as string[]).length;
  const counts = new Array<number>(size).fill(0);
  const draws = 40_000;
  for (let i = 0; i < draws; i++) {
    const out = encodeForReport(krr, "secret-value", rng);
    assert.equal(out.substituted, true);
    assert.ok(!out.reason?.message.includes("secret"));
    counts[out.input as number] = (counts[out.input as number] as number) + 1;
  }
  const expected = draws / size;
  const chi2 = counts.reduce((s, o) => s + (o - expected) ** 2 / expected, 0);
  assert.ok(chi2 < (CRITICAL[size - 1] as number), `substitutes not uniform: χ² = ${chi2}`);
  // With `other`, the value is `other`: nothing is substituted.
  assert.deepEqual(encodeForReport(mechanism("unicode-labels"), "secret-value", rng), { input: 7, substituted: false });
  // Every kind of domain: the substitute encodes and randomizes like a real value.
  const cases: [string, unknown][] = [
    ["duchi-0", NaN], ["laplace-0", Infinity], ["sw-1", "12"], ["duchi_md-0", { a0: 1 }], ["pm_md-1", [1, 2, 3]],
    ["smp-0", { a0: "v0", a1: "nope" }], ["marginals-0", "x"], ["rappor-0", "\ud800"], ["cms-0", 42],
    ["pem-0", "toolong"], ["pem-0", "\u0000"], ["pem-2", "abc"], ["treehist-2", "xq"], ["o_rr-0", "x".repeat(2000)],
  ];
  for (const [name, value] of cases) {
    const m = mechanism(name);
    const out = encodeForReport(m, value, rng);
    assert.equal(out.substituted, true, name);
    assert.ok(out.reason instanceof ValueDomainError);
    const payload = m.randomize(out.input, rng);
    assert.equal(canonicalJson(m.checkPayload(payload)), canonicalJson(payload));
  }
  // A value inside the domain is encoded, not substituted.
  assert.equal(encodeForReport(mechanism("duchi-0"), 7, rng).input, 1);
  assert.equal(encodeForReport(mechanism("pem-2"), "ab", rng).substituted, false);
});

test("a discovery install's keyed group: fixed per label, split by the campaign's weights", async () => {
  const pem = mechanism("pem-1") as PrefixDiscovery; // 3 walk groups at 75 each, the estimation group 25·3
  assert.deepEqual(pem.groupWeights, [75, 75, 75, 75]);
  const key = new Uint8Array(32).fill(7);
  const first = await keyedGroup(pem, key, "pem-1", "d".repeat(64), "day-1");
  assert.equal(await keyedGroup(pem, key, "pem-1", "d".repeat(64), "day-1"), first);
  await assert.rejects(keyedGroup(pem, key.subarray(0, 8), "pem-1", "d", "lifetime"), RangeError);
  const treehist = mechanism("treehist-1");
  const counts = [0, 0];
  const draws = 4000;
  for (let i = 0; i < draws; i++) counts[await keyedGroup(treehist as PrefixDiscovery, key, "t", "d", `day-${i}`)]! += 1;
  // Two equal groups: a binomial(4000, ½) count within 5 standard deviations.
  assert.ok(Math.abs((counts[0] as number) - draws / 2) < 5 * Math.sqrt(draws / 4), `groups ${counts}`);
  // The group a report carries is the one given.
  const x = pem.encode("a");
  for (let g = 0; g < pem.groups; g++) assert.equal(pem.randomize(x, seededRandomForTests(g), { group: g }).g, g);
});
