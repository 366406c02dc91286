// The browser's extras bundle (dist/browser/chorus-extras.min.js): what an app may not need,
// kept out of the core bundle's size budget, for use with the Client of chorus.min.js or
// chorus-full.min.js: the rolling window, the worst case in numbers and words, the sent log's
// text and HTML. Each takes the client or its data as an argument, so no code is shared.
export { RollingWindow } from "./window.js";
export { worstCase } from "./worst-case.js";
export type { InstallWorstCase, PrivacyBound } from "./worst-case.js";
export { budgetLine, escapeHtml, sentLogHtml, sentLogText } from "./sent-log-view.js";
