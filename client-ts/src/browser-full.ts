// The browser's full bundle (dist/browser/chorus-full.min.js): the core bundle's exports with
// every mechanism of the Chorus registry registered, and the extras (browser-extras.ts).
import "./mechanisms/full-set.js";

export * from "./browser.js";
export * from "./browser-extras.js";
