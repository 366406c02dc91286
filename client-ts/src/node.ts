/** The Node-only parts: `import { FileStore } from "@chorus-ldp/client/node"`. */
export * from "./file-store.js";
export * from "./file-spend-counter.js";
