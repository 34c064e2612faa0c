/**
 * The checked-in forms of the CRDs, each file with a header saying how it is made:
 *  - crds/<name>.yaml, for `kubectl apply -f crds/`;
 *  - charts/sandpit/templates/crd-<plural>.yaml, the same CRD as a chart template: installed
 *    when crds.install is true, and kept by `helm uninstall` (helm.sh/resource-policy: keep),
 *    since deleting a CRD deletes every Sandbox of every user.
 */
import { fileURLToPath } from "node:url";
import { stringify } from "yaml";
import { crds } from "./crds.ts";

const ROOT = fileURLToPath(new URL("../../../", import.meta.url));
const HEADER =
  "# Generated from operator/src/api/v1alpha1.ts by `npm run crds`. Do not edit by hand.\n";

interface Crd {
  metadata: { name: string; annotations?: Record<string, string>; labels?: Record<string, string> };
  spec: { names: { plural: string } };
}

export function crdFiles(): { path: string; text: string }[] {
  return crds().flatMap((object) => {
    const crd = object as unknown as Crd;
    const inChart = structuredClone(crd);
    inChart.metadata.annotations = {
      ...inChart.metadata.annotations,
      "helm.sh/resource-policy": "keep",
    };
    inChart.metadata.labels = {
      ...inChart.metadata.labels,
      "app.kubernetes.io/part-of": "sandpit",
    };
    return [
      {
        path: `${ROOT}crds/${crd.metadata.name}.yaml`,
        text: HEADER + stringify(crd, { lineWidth: 0 }),
      },
      {
        path: `${ROOT}charts/sandpit/templates/crd-${crd.spec.names.plural}.yaml`,
        text:
          HEADER +
          "{{- if .Values.crds.install }}\n" +
          stringify(inChart, { lineWidth: 0 }) +
          "{{- end }}\n",
      },
    ];
  });
}
