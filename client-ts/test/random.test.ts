import assert from "node:assert/strict";
import { test } from "node:test";

import {
  bernoulli, bernoulliExp, cryptoRandom, discreteLaplace, exactRational, newReportId, rational, REPORT_ID_PATTERN,
  sampleDistinct, seededRandomForTests, uniformBigInt, uniformInt,
} from "../src/index.js";

// χ² critical values at α = 1e-6 (scipy.stats.chi2.ppf(1 - 1e-6, dof)).
const CRITICAL = { 2: 27.63, 5: 35.89, 9: 44.81, 16: 58.32 } as const;

function chi2(counts: number[], expected: number[]): number {
  return counts.reduce((s, o, i) => s + (o - (expected[i] as number)) ** 2 / (expected[i] as number), 0);
}

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

test("uniformBigInt is uniform beyond 2^53, and sampleDistinct draws every k-subset equally often", () => {
  const rng = seededRandomForTests(13);
  const n = 3n * 2n ** 60n; // not a power of two: half of [0, 2^62) is rejected
  const thirds = [0, 0, 0];
  const draws = 30_000;
  for (let i = 0; i < draws; i++) {
    const x = uniformBigInt(rng, n);
    assert.ok(x >= 0n && x < n);
    thirds[Number(x / 2n ** 60n)]! += 1;
  }
  assert.ok(chi2(thirds, [draws / 3, draws / 3, draws / 3]) < CRITICAL[2], `thirds ${thirds}`);
  const subsets = new Map<string, number>();
  for (let i = 0; i < draws; i++) {
    const s = sampleDistinct(rng, 5, 2);
    assert.ok(s.length === 2 && s[0]! < s[1]! && s[1]! < 5);
    subsets.set(s.join(), (subsets.get(s.join()) ?? 0) + 1);
  }
  assert.equal(subsets.size, 10);
  assert.ok(chi2([...subsets.values()], new Array(10).fill(draws / 10)) < CRITICAL[9]);
});

test("exact samplers: a double's exact rational, e^(−γ) coins, and the discrete Laplace pmf (χ²)", () => {
  assert.deepEqual(exactRational(0.75), { n: 3n, d: 4n });
  assert.deepEqual(exactRational(0.1), { n: 3602879701896397n, d: 2n ** 55n });
  assert.deepEqual(exactRational(-3), { n: -3n, d: 1n });
  const rng = seededRandomForTests(14);
  const n = 40_000;
  let ones = 0;
  for (let i = 0; i < n; i++) ones += bernoulliExp(rng, rational(3n, 2n)) ? 1 : 0;
  const p = Math.exp(-1.5);
  assert.ok(Math.abs(ones / n - p) < 5 * Math.sqrt((p * (1 - p)) / n), `e^-1.5: ${ones / n}`);
  // P(Z = z) = (1 − r)/(1 + r)·r^|z|, r = e^(−rate), over −7…7 and the two tails pooled.
  const rate = exactRational(0.7);
  const r = Math.exp(-0.7);
  const counts = new Array<number>(17).fill(0);
  for (let i = 0; i < n; i++) {
    const z = Number(discreteLaplace(rng, rate));
    counts[z < -7 ? 0 : z > 7 ? 16 : z + 8]! += 1;
  }
  const pmf = (z: number) => ((1 - r) / (1 + r)) * r ** Math.abs(z);
  const tail = r ** 8 / (1 + r); // P(Z ≥ 8) = P(Z ≤ −8)
  const expected = [tail, ...Array.from({ length: 15 }, (_, i) => pmf(i - 7)), tail].map((q) => q * n);
  assert.ok(Math.abs(expected.reduce((a, b) => a + b, 0) - n) < 1e-6);
  assert.ok(chi2(counts, expected) < CRITICAL[16], `χ² = ${chi2(counts, expected)}`);
});
