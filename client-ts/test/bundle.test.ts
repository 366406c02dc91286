import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { gzipSync } from "node:zlib";

// The bundle `npm run bundle` builds (esbuild, minified, for the browser) before the tests run.
const BUNDLE = fileURLToPath(new URL("../browser/chorus.min.js", import.meta.url));

// The README's promise: the browser bundle, minified and gzipped, under 15 kB.
const BUDGET_BYTES = 15_000;

test("the browser bundle is within its size budget, minified and gzipped", () => {
  const gzipped = gzipSync(readFileSync(BUNDLE), { level: 9 }).length;
  assert.ok(gzipped <= BUDGET_BYTES, `${gzipped} bytes gzipped, over the ${BUDGET_BYTES} budget`);
});

test("the browser bundle draws no randomness but the CSPRNG and needs no Node module", () => {
  const code = readFileSync(BUNDLE, "utf8");
  assert.ok(!code.includes("Math.random"), "Math.random in the bundle");
  assert.ok(code.includes("getRandomValues"), "no crypto.getRandomValues in the bundle");
  assert.ok(!/\bfrom\s*["']node:|require\(/.test(code), "a Node import in the bundle");
});
