export * from "./json.js";
export * from "./config.js";
export * from "./hashing.js";
export * from "./random.js";
export * from "./mechanisms.js";
export * from "./report.js";
