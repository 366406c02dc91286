// The browser's core bundle (dist/browser/chorus.min.js, built by `npm run bundle`): what a web
// page imports, with the common mechanisms (mechanisms/common-set.ts); chorus-full.min.js
// (browser-full.ts) adds every other one. Named exports only, so that the bundle keeps what a
// page can use and no more. It must stay free of Node's modules (the bundle is built for the
// browser platform, so one would fail the build) and within the size budget that
// test/bundle.test.ts checks.
import "./mechanisms/common-set.js";

export { ConfigError, configDigest, recomputeEpsilon, verifyConfig } from "./config.js";
export type { VerifiedConfig, VerifyOptions } from "./config.js";
export { canonicalJson, parseJsonExact } from "./json.js";
export { COMMON_MECHANISMS } from "./mechanisms/common-set.js";
export { encodeForReport, mechanismFor, registeredMechanisms, PayloadError, ValueDomainError } from "./mechanisms/index.js";
export type { Mechanism } from "./mechanisms/index.js";
export { cryptoRandom } from "./random.js";
export { buildReport, ReportError, reportWire, truncateTime } from "./report.js";
