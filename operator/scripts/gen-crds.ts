/** Writes crds/<plural>.sandpit.dev.yaml from the API types: `npm run crds`. */
import { writeFile } from "node:fs/promises";
import { crdFiles } from "../src/api/crd-files.ts";

for (const { path, text } of crdFiles()) {
  await writeFile(path, text);
  console.log(`wrote ${path}`);
}
