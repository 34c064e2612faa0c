/**
 * Writes docs/api/sandbox.md, the Sandbox and SandboxPool API reference, from the same JSON
 * Schema the CRDs are generated from (operator/src/api/crds.ts), so the reference, the CRDs and
 * `kubectl explain` say the same thing. `npm run crds` runs it after the CRD generator;
 * operator/test/api-reference.test.ts fails when the committed file differs from its output.
 *
 * A schema keyword this file does not know how to render is an error, not a silent omission:
 * a new kind of constraint must show up in the reference.
 */
import { writeFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { format, resolveConfig } from "prettier";
import { crds } from "../src/api/crds.ts";

export const REFERENCE_PATH = fileURLToPath(new URL("../../docs/api/sandbox.md", import.meta.url));

interface Schema {
  type?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  format?: string;
  pattern?: string;
  minLength?: number;
  maxLength?: number;
  minimum?: number;
  maximum?: number;
  minItems?: number;
  maxItems?: number;
  items?: Schema;
  properties?: Record<string, Schema>;
  required?: string[];
  "x-kubernetes-validations"?: { rule: string; message: string }[];
  "x-kubernetes-list-type"?: string;
  "x-kubernetes-list-map-keys"?: string[];
}

const RENDERED = new Set<string>([
  "type",
  "description",
  "default",
  "enum",
  "format",
  "pattern",
  "minLength",
  "maxLength",
  "minimum",
  "maximum",
  "minItems",
  "maxItems",
  "items",
  "properties",
  "required",
  "x-kubernetes-validations",
  "x-kubernetes-list-type",
  "x-kubernetes-list-map-keys",
]);

interface Crd {
  spec: {
    group: string;
    scope: string;
    names: { kind: string; plural: string; shortNames?: string[] };
    versions: {
      name: string;
      additionalPrinterColumns?: { name: string; jsonPath: string; description: string }[];
      schema: { openAPIV3Schema: Schema & { properties: Record<string, Schema> } };
    }[];
  };
}

/** A table cell: pipes would end the cell, even inside a code span. */
const cell = (s: string) => s.replaceAll("|", "\\|");
const code = (s: string) => (s.includes("`") ? `\`\` ${s} \`\`` : `\`${s}\``);
/** Prose: a `<name>` outside code would be taken for an HTML tag and vanish. */
const prose = (s: string) =>
  s
    .split(/(`[^`]*`)/)
    .map((part, i) => (i % 2 ? part : part.replaceAll("<", "\\<")))
    .join("");

function checkKeys(node: Schema, path: string): void {
  for (const key of Object.keys(node)) {
    if (!RENDERED.has(key)) throw new Error(`${path}: no rendering for schema keyword "${key}"`);
  }
}

function range(min: number | undefined, max: number | undefined, unit = ""): string | undefined {
  if (min !== undefined && max !== undefined) return `${min} to ${max}${unit}`;
  if (min !== undefined) return `at least ${min}${unit}`;
  if (max !== undefined) return `at most ${max}${unit}`;
  return undefined;
}

/** What a scalar's own keywords allow (its type and default are columns of their own). */
function scalarConstraints(s: Schema): string[] {
  const out: string[] = [];
  if (s.enum) out.push(`one of ${s.enum.map((v) => code(String(v))).join(", ")}`);
  const length = range(s.minLength, s.maxLength, " characters");
  if (length) out.push(length);
  const value = range(s.minimum, s.maximum);
  if (value) out.push(value);
  // A date-time's pattern is only how the format is spelt in JSON Schema: the format says it.
  if (s.pattern && s.format !== "date-time") out.push(`matches ${code(s.pattern)}`);
  return out;
}

function typeOf(s: Schema): string {
  if (s.type === "array") return `[]${s.items ? typeOf(s.items) : "unknown"}`;
  if (s.format === "date-time") return "string (date-time)";
  return s.type ?? "unknown";
}

function constraintsOf(s: Schema, required: boolean): string[] {
  const out = required ? ["required"] : [];
  out.push(...scalarConstraints(s));
  const items = range(s.minItems, s.maxItems, " items");
  if (items) out.push(items);
  if (s.items && s.items.type !== "object") {
    const each = scalarConstraints(s.items);
    if (each.length) out.push(`each ${each.join(", ")}`);
  }
  if (s["x-kubernetes-list-type"] === "map") {
    const keys = (s["x-kubernetes-list-map-keys"] ?? []).map(code).join(", ");
    out.push(`one item per ${keys} (merged by key under server-side apply)`);
  }
  for (const v of s["x-kubernetes-validations"] ?? []) {
    out.push(`rule: ${v.message} (${code(v.rule)})`);
  }
  return out;
}

function describe(s: Schema): string {
  const own = s.description ?? "";
  const item = s.items?.type === "object" ? s.items.description : undefined;
  return prose(item ? `${own} Each item: ${item}` : own);
}

interface Row {
  field: string;
  type: string;
  default: string;
  constraints: string;
  description: string;
}

/** One row per field under `node`, depth first, children right after their parent. */
function rows(node: Schema, path: string): Row[] {
  checkKeys(node, path);
  const out: Row[] = [];
  const required = new Set(node.required ?? []);
  for (const [name, child] of Object.entries(node.properties ?? {})) {
    const here = `${path}.${name}`;
    checkKeys(child, here);
    out.push({
      field: code(here),
      type: typeOf(child),
      default: child.default === undefined ? "" : code(JSON.stringify(child.default)),
      constraints: constraintsOf(child, required.has(name)).join("; "),
      description: describe(child),
    });
    if (child.properties) out.push(...rows(child, here));
    if (child.items) {
      checkKeys(child.items, `${here}[]`);
      if (child.items.properties) out.push(...rows(child.items, `${here}[]`));
    }
  }
  return out;
}

function table(r: Row[]): string {
  const lines = [
    "| Field | Type | Default | Constraints | Description |",
    "| --- | --- | --- | --- | --- |",
  ];
  for (const x of r) {
    const cells = [x.field, x.type, x.default, x.constraints, x.description].map(cell);
    lines.push(`| ${cells.join(" | ")} |`);
  }
  return lines.join("\n");
}

function section(title: string, root: Schema, path: string): string {
  checkKeys(root, path);
  const parts = [`### ${title}`, prose(root.description ?? "")];
  const rules = root["x-kubernetes-validations"] ?? [];
  if (rules.length) {
    parts.push(
      "Rules the API server checks on every write:\n\n" +
        rules.map((v) => `- ${v.message}: ${code(v.rule)}`).join("\n"),
    );
  }
  parts.push(table(rows(root, path)));
  return parts.join("\n\n");
}

function kindSection(crd: Crd): string {
  const { names, group, scope, versions } = crd.spec;
  const version = versions[0]!;
  const root = version.schema.openAPIV3Schema;
  const columns = version.additionalPrinterColumns ?? [];
  const facts = [
    `- \`apiVersion: ${group}/${version.name}\`, \`kind: ${names.kind}\`, ${scope.toLowerCase()}.`,
    `- Resource \`${names.plural}\`${
      names.shortNames?.length
        ? `, short name${names.shortNames.length > 1 ? "s" : ""} ${names.shortNames.map(code).join(", ")}`
        : ""
    }.`,
    `- ${root.required?.includes("spec") ? "`spec` is required; " : ""}\`status\` is a subresource: writes to the object itself leave it unchanged.`,
  ];
  if (columns.length) {
    facts.push(
      `- \`kubectl get ${names.plural}\` columns: ${columns
        .map((c) => `${c.name} (${code(c.jsonPath)}: ${c.description})`)
        .join(", ")}.`,
    );
  }
  return [
    `## ${names.kind}`,
    prose(root.description ?? ""),
    facts.join("\n"),
    section(`${names.kind} spec`, root.properties.spec!, "spec"),
    section(`${names.kind} status`, root.properties.status!, "status"),
  ].join("\n\n");
}

/** The reference as committed: generated Markdown, formatted with the repository's Prettier. */
export async function apiReference(): Promise<string> {
  const all = crds() as unknown as Crd[];
  const first = all[0]!.spec;
  const text = [
    "<!-- Generated from the zod schemas in operator/src/api/ by `npm run crds`. Do not edit by hand. -->",
    `# ${first.group}/${first.versions[0]!.name} API reference`,
    `The resources the operator reconciles: ${all.map((c) => `[${c.spec.names.kind}](#${c.spec.names.kind.toLowerCase()})`).join(" and ")}. ` +
      "Every field below is also in the CRDs (`crds/`), so `kubectl explain` shows the same " +
      "descriptions, and the API server enforces the same constraints and rules. Fields are " +
      "written as paths: `spec.network.allow[].cidr` is the `cidr` of each item of " +
      "`spec.network.allow`. Fields without a default are left unset when omitted; what the " +
      "operator then assumes is in their description.",
    "How these resources are turned into pods is in [the architecture](../architecture.md); " +
      "what a sandbox is allowed to do, in [the security model](../security.md).",
    ...all.map(kindSection),
  ].join("\n\n");
  const options = await resolveConfig(REFERENCE_PATH);
  return format(text, { ...options, filepath: REFERENCE_PATH });
}

if (import.meta.main) {
  await writeFile(REFERENCE_PATH, await apiReference());
  console.log(`wrote ${REFERENCE_PATH}`);
}
