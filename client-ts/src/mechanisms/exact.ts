/**
 * Exact samplers from uniform integers and rationals (Canonne, Kamath, Steinke, NeurIPS 2020;
 * MECHANISMS.md §14.3): the discrete Laplace is drawn with integer arithmetic only, so the
 * distribution sampled is exactly the one the privacy proof is about (a floating-point
 * λ·ln(U) leaks through its low-order bits, Mironov 2012). Rationals are bigint pairs.
 */
import { uniformBigInt, type RandomSource } from "../random.js";

/** n/d with d > 0. */
export interface Rational {
  n: bigint;
  d: bigint;
}

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

export function rational(n: bigint, d: bigint): Rational {
  if (d <= 0n) throw new RangeError("the denominator must be positive");
  const g = gcd(n, d);
  return g > 1n ? { n: n / g, d: d / g } : { n, d };
}

/** A finite double as the exact rational it is (its binary64 value, no rounding). */
export function exactRational(x: number): Rational {
  if (!Number.isFinite(x)) throw new RangeError("not a finite number");
  const view = new DataView(new ArrayBuffer(8));
  view.setFloat64(0, x);
  const bits = view.getBigUint64(0);
  const negative = bits >> 63n === 1n;
  const exponent = Number((bits >> 52n) & 0x7ffn);
  const fraction = bits & ((1n << 52n) - 1n);
  // value = mantissa · 2^power (subnormals have no implicit bit and the least exponent)
  const mantissa = exponent === 0 ? fraction : fraction | (1n << 52n);
  const power = (exponent === 0 ? 1 : exponent) - 1075;
  const signed = negative ? -mantissa : mantissa;
  return power >= 0 ? rational(signed << BigInt(power), 1n) : rational(signed, 1n << BigInt(-power));
}

/** True with probability exactly n/d ∈ [0, 1]. */
export function bernoulliRational(rng: RandomSource, p: Rational): boolean {
  return uniformBigInt(rng, p.d) < p.n;
}

/** True with probability exactly e^(−γ), γ ∈ [0, 1]: draw A_k ~ Bernoulli(γ/k) until the
 * first 0; its index is odd with probability Σ (−γ)^k/k! = e^(−γ). */
function bernoulliExpUnit(rng: RandomSource, gamma: Rational): boolean {
  let k = 1n;
  while (bernoulliRational(rng, { n: gamma.n, d: gamma.d * k })) k++;
  return k % 2n === 1n;
}

/** True with probability exactly e^(−γ), rational γ ≥ 0. */
export function bernoulliExp(rng: RandomSource, gamma: Rational): boolean {
  if (gamma.n < 0n) throw new RangeError("gamma must be >= 0");
  const whole = gamma.n / gamma.d;
  for (let i = 0n; i < whole; i++) {
    if (!bernoulliExpUnit(rng, { n: 1n, d: 1n })) return false;
  }
  return bernoulliExpUnit(rng, { n: gamma.n - whole * gamma.d, d: gamma.d });
}

/** G ≥ 0 with P(G = g) = (1 − e^(−x))·e^(−x·g), rational x = s/t > 0: U uniform on [0, t)
 * accepted with e^(−U/t) and V ~ Geometric(1 − e^(−1)) make U + t·V geometric with parameter
 * 1 − e^(−1/t); ⌊(U + t·V)/s⌋ is then geometric with parameter 1 − e^(−s/t). */
export function geometricExp(rng: RandomSource, x: Rational): bigint {
  if (x.n <= 0n) throw new RangeError("x must be > 0");
  const { n: s, d: t } = x;
  let u: bigint;
  do u = uniformBigInt(rng, t);
  while (!bernoulliExp(rng, { n: u, d: t }));
  let v = 0n;
  while (bernoulliExp(rng, { n: 1n, d: 1n })) v++;
  return (u + t * v) / s;
}

/** Z with P(Z = z) ∝ e^(−|z|·rate), exactly: a fair sign and a geometric magnitude, "−0"
 * rejected so that 0 is not counted twice. `rate` = 1/τ. */
export function discreteLaplace(rng: RandomSource, rate: Rational): bigint {
  for (;;) {
    const negative = uniformBigInt(rng, 2n) === 1n;
    const magnitude = geometricExp(rng, rate);
    if (negative && magnitude === 0n) continue;
    return negative ? -magnitude : magnitude;
  }
}
