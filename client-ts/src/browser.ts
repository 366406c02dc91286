// The browser bundle's entry (dist/browser/chorus.min.js, built by `npm run bundle`): what a
// web page imports. It must stay free of Node's modules (the bundle is built for the browser
// platform, so one would fail the build) and within the size budget test/bundle.test.ts
// checks.
export * from "./index.js";
export * from "./idb-store.js";
