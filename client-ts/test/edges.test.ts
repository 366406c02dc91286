import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";

import { canonicalJson, mechanismFor, parseJsonExact, recomputeEpsilon, ValueDomainError, type Json } from "../src/index.js";

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

test("rr takes booleans as its first and second category; numbers clip, NaN is refused", () => {
  const rr = mechanism("rr-0");
  assert.equal(rr.encode(false), 0);
  assert.equal(rr.encode(true), 1);
  const duchi = mechanism("duchi-0"); // [-5, 5]
  assert.equal(duchi.encode(-Infinity), -1);
  assert.equal(duchi.encode(1e9), 1);
  assert.equal(duchi.encode(0), 0);
  assert.throws(() => duchi.encode(NaN), ValueDomainError);
  assert.throws(() => duchi.encode("3"), ValueDomainError);
});
