/**
 * A package has two forms: the spec string pip and npm take (`numpy==2.1.0`, `zod@4`,
 * `@scope/pkg@1`), which the SDK, the provisioner's bodies and sandboxd use, and the
 * `{name, version}` object a Sandbox resource lists, which reads better in YAML. These two
 * functions are the only crossing between them, and each undoes the other
 * (operator/test/packages.test.ts).
 */
import type { Language } from "@sandpit/sandboxd/protocol";
import type { Package } from "./v1alpha1.ts";

/** The spec as sandboxd's installer takes it: `name==version` for pip, `name@version` for npm. */
export function packageSpec(language: Language, p: Package): string {
  return p.version ? `${p.name}${language === "python" ? "==" : "@"}${p.version}` : p.name;
}

/** The resource's form of a spec in either installer's syntax. */
export function packageOfSpec(spec: string): Package {
  const pip = /^([^=<>!~\s]+)==(.+)$/.exec(spec);
  if (pip) return { name: pip[1]!, version: pip[2]! };
  const at = spec.lastIndexOf("@");
  if (at > 0) return { name: spec.slice(0, at), version: spec.slice(at + 1) };
  return { name: spec };
}
