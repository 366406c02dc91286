import assert from "node:assert/strict";
import { test } from "node:test";

import { bernoulli, cryptoRandom, newReportId, REPORT_ID_PATTERN, seededRandomForTests, uniformInt } from "../src/index.js";

// χ² critical values at α = 1e-6 (scipy.stats.chi2.ppf(1 - 1e-6, dof)).
const CRITICAL = { 2: 27.63, 5: 35.89 } as const;

test("uniformInt is uniform for n that is not a power of two (rejection, no modulo bias)", () => {
  const rng = seededRandomForTests(11);
  for (const n of [3, 6] as const) {
    const draws = 60_000;
    const counts = new Array<number>(n).fill(0);
    for (let i = 0; i < draws; i++) {
      const x = uniformInt(rng, n);
      assert.ok(Number.isInteger(x) && x >= 0 && x < n);
      counts[x] = (counts[x] as number) + 1;
    }
    const e = draws / n;
    const chi2 = counts.reduce((s, o) => s + (o - e) ** 2 / e, 0);
    assert.ok(chi2 < CRITICAL[(n - 1) as 2 | 5], `n=${n}: χ² = ${chi2}`);
  }
  assert.equal(uniformInt(rng, 1), 0);
  assert.throws(() => uniformInt(rng, 0), RangeError);
});

test("bernoulli's rate is p within 5 standard deviations", () => {
  const rng = seededRandomForTests(12);
  for (const p of [0.001, 0.25, 0.7310585786300049]) {
    const n = 100_000;
    let ones = 0;
    for (let i = 0; i < n; i++) ones += bernoulli(rng, p) ? 1 : 0;
    assert.ok(Math.abs(ones / n - p) < 5 * Math.sqrt((p * (1 - p)) / n), `p=${p}: ${ones / n}`);
  }
  assert.equal(bernoulli(rng, 0), false);
  assert.equal(bernoulli(rng, 1), true);
});

test("report IDs come from the CSPRNG: 32 lowercase hex digits, never repeated", () => {
  const ids = new Set(Array.from({ length: 1000 }, () => newReportId(cryptoRandom)));
  assert.equal(ids.size, 1000);
  for (const id of ids) assert.match(id, REPORT_ID_PATTERN);
});
