import { createRequire } from "node:module";

// package.json is one directory up from both src/ and a built dist/.
export const VERSION = (createRequire(import.meta.url)("../package.json") as { version: string })
  .version;
