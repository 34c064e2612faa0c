/**
 * Writes the CRDs from the API types, `npm run crds`: crds/<plural>.sandpit.dev.yaml and the
 * chart's copies, charts/sandpit/templates/crd-<plural>.yaml (see src/api/crd-files.ts).
 */
import { writeFile } from "node:fs/promises";
import { crdFiles } from "../src/api/crd-files.ts";

for (const { path, text } of crdFiles()) {
  await writeFile(path, text);
  console.log(`wrote ${path}`);
}
