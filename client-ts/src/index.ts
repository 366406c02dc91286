// The package's main entry (Node, or a bundler of the app's own): everything, with every
// mechanism registered. A web page that loads a prebuilt file uses dist/browser/ instead.
import "./mechanisms/full-set.js";

export * from "./json.js";
export * from "./config.js";
export * from "./hashing.js";
export * from "./random.js";
export * from "./mechanisms.js";
export * from "./report.js";
export * from "./store.js";
export * from "./schedule.js";
export * from "./campaign.js";
export * from "./plan.js";
export * from "./ledger.js";
export * from "./timing.js";
export * from "./transport.js";
export * from "./sender.js";
export * from "./waiting.js";
export * from "./sent-log.js";
export * from "./client.js";
export * from "./policy.js";
export * from "./window.js";
export * from "./worst-case.js";
export * from "./sent-log-view.js";
export { COMMON_MECHANISMS } from "./mechanisms/common-set.js";
