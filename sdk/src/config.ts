/**
 * Sandpit's SDK configuration: one strict object (or YAML file) whose `sandbox.use` picks the
 * provider, or an ordered list of providers for a fallback chain, in one line:
 *
 *   sandbox:
 *     use: [docker, local]
 *     local:
 *       isolation: bwrap
 *
 * Unknown keys anywhere are errors that name the key.
 */
import { readFile } from "node:fs/promises";
import { z } from "zod";
import { SandboxError } from "./errors.ts";
import { getProvider, providerNames } from "./registry.ts";

export interface SandboxSection {
  use: string | string[];
  [provider: string]: unknown;
}
export interface SandpitConfig {
  sandbox: SandboxSection;
}

/** The schema is built from the registry, so every registered provider's options are checked. */
function schema() {
  const names = providerNames();
  const sections = Object.fromEntries(names.map((n) => [n, getProvider(n).options.optional()]));
  const use = z
    .union([z.string(), z.array(z.string())], {
      error: "use is a provider name or a list of provider names",
    })
    .superRefine((value, ctx) => {
      const listed = [value].flat();
      if (listed.length === 0)
        ctx.addIssue({ code: "custom", message: "use lists at least one provider" });
      for (const n of listed.filter((n) => !names.includes(n))) {
        ctx.addIssue({
          code: "custom",
          message: `unknown provider ${JSON.stringify(n)} (registered: ${names.join(", ")})`,
        });
      }
    });
  return z.strictObject({ sandbox: z.strictObject({ use, ...sections }) });
}

export function parseConfig(input: unknown): SandpitConfig {
  const r = schema().safeParse(input);
  if (!r.success) {
    const lines = r.error.issues.map((i) => {
      const where = i.path.join(".") || "(root)";
      if (i.code === "unrecognized_keys")
        return `${where ? where + ": " : ""}unknown key${i.keys.length > 1 ? "s" : ""} ${i.keys.map((k) => JSON.stringify(k)).join(", ")}`;
      return `${where}: ${i.message}`;
    });
    throw new SandboxError(`invalid Sandpit config:\n  ${lines.join("\n  ")}`, "INVALID_ARGUMENT");
  }
  return r.data as SandpitConfig;
}

export async function loadConfigFile(path: string): Promise<SandpitConfig> {
  let text: string;
  try {
    text = await readFile(path, "utf8");
  } catch (err) {
    throw new SandboxError(
      `cannot read config file ${path}: ${(err as Error).message}`,
      "INVALID_ARGUMENT",
      err,
    );
  }
  // yaml loads with the first config file read: importing the SDK does not load it.
  const { parse } = await import("yaml");
  let data: unknown;
  try {
    data = parse(text);
  } catch (err) {
    throw new SandboxError(
      `config file ${path} is not valid YAML: ${(err as Error).message}`,
      "INVALID_ARGUMENT",
      err,
    );
  }
  return parseConfig(data);
}
