// The package's main entry (Node, or a bundler of the app's own): everything, with every
// mechanism registered. A web page that loads a prebuilt file uses dist/browser/ instead.
import "./mechanisms/full-set.js";

export * from "./json.js";
export * from "./config.js";
export * from "./hashing.js";
export * from "./random.js";
export * from "./mechanisms.js";
export * from "./report.js";
export { COMMON_MECHANISMS } from "./mechanisms/common-set.js";
