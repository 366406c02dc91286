// The browser's core bundle (dist/browser/chorus.min.js, built by `npm run bundle`): what a web
// page imports: the client, its IndexedDB store, config checks and the common mechanisms
// (mechanisms/common-set.ts); chorus-full.min.js (browser-full.ts) adds every other mechanism.
// Named exports only, so that the bundle keeps what a page can use and no more. It must stay
// free of Node's modules (the bundle is built for the browser platform, so one would fail the
// build) and within the size budget that test/bundle.test.ts checks. What an app may not need
// (the rolling window, the worst case in words, the sent log's text and HTML) is in
// chorus-extras.min.js (browser-extras.ts), which works with this bundle's Client.
import "./mechanisms/common-set.js";

export { BudgetExceededError, CampaignUnavailableError, Client, ReportRefusedError } from "./client.js";
export type { CampaignPlan, ClientOptions, Outcome } from "./client.js";
export { ConfigError, configDigest, recomputeEpsilon, verifyConfig } from "./config.js";
export type { VerifiedConfig, VerifyOptions } from "./config.js";
export { IndexedDBStore } from "./idb-store.js";
export type { IndexedDBStoreOptions } from "./idb-store.js";
export { COMMON_MECHANISMS } from "./mechanisms/common-set.js";
export { mechanismFor, registeredMechanisms, ValueDomainError } from "./mechanisms/index.js";
export { PlanError } from "./plan.js";
export type { PrivacyPlanOptions } from "./plan.js";
export type { FlushResult } from "./sender.js";
export type { SentLog, SentReport } from "./sent-log.js";
export type { SpendCounter, Timers } from "./policy.js";
export { MemoryStore, StoreError } from "./store.js";
export type { Store } from "./store.js";
export type { Waiting } from "./waiting.js";
