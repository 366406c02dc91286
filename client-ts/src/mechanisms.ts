/** The mechanisms' client halves, one module per family under mechanisms/ (this re-export keeps
 * the old import path working). */
export * from "./mechanisms/index.js";
