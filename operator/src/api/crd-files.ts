/** The checked-in form of the CRDs: one YAML file per CRD under crds/, with a header saying how it is made. */
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { crds } from "./crds.ts";

const CRDS_DIR = fileURLToPath(new URL("../../../crds/", import.meta.url));
const HEADER =
  "# Generated from operator/src/api/v1alpha1.ts by `npm run crds`. Do not edit by hand.\n";

export function crdFiles(): { path: string; text: string }[] {
  return crds().map((crd) => {
    const name = (crd.metadata as { name: string }).name;
    return { path: `${CRDS_DIR}${name}.yaml`, text: HEADER + stringify(crd, { lineWidth: 0 }) };
  });
}
