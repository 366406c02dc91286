/**
 * The common mechanisms, registered in every build (the browser's core bundle included): the
 * categorical frequency oracles an app reaches for first, and the one-bit means.
 */
import { categoriesOf, NumericRange } from "./common.js";
import { KRR, LocalHashing, UnaryEncoding } from "./frequency.js";
import { registerMechanisms } from "./index.js";
import { DuchiBit } from "./numbers.js";

export const COMMON_MECHANISMS = ["rr", "krr", "sue", "oue", "olh", "blh", "duchi", "one_bit_mean"] as const;

registerMechanisms({
  rr: (d, e) => new KRR("rr", categoriesOf(d), e),
  krr: (d, e) => new KRR("krr", categoriesOf(d), e),
  sue: (d, e) => new UnaryEncoding("sue", categoriesOf(d), e),
  oue: (d, e) => new UnaryEncoding("oue", categoriesOf(d), e),
  olh: (d, e, p) => new LocalHashing("olh", categoriesOf(d), e, p),
  blh: (d, e, p) => new LocalHashing("blh", categoriesOf(d), e, p),
  duchi: (d, e) => new DuchiBit("duchi", NumericRange.of(d), e),
  one_bit_mean: (d, e) => new DuchiBit("one_bit_mean", NumericRange.of(d), e),
});
