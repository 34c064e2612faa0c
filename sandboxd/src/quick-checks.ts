/**
 * Checks by hand for the bodies of a warm claim's first requests, `/v1/init` and then a command
 * (`/v1/commands/run`) or a code cell (`/v1/code/execute`), so that a claim does not wait for
 * zod and its schemas to load (./request-input.ts). They only ever accept: a body one of them
 * accepts, the route's zod schema (./request-schemas.ts) accepts too, with the same value;
 * anything else, valid or not, goes to the schema, which says what is wrong in its own words. sandboxd/test/quick-checks.test.ts holds
 * them to that, against the schemas.
 */
import {
  ENV_NAME_PATTERN,
  LANGUAGES,
  MAX_SOURCE_BYTES,
  MAX_TIMEOUT_MS,
  PACKAGE_SPEC_PATTERN,
} from "./wire.ts";
import type { ExecuteCodeRequest, InitRequest, RunCommandRequest } from "./protocol.ts";

type Fields = Record<string, unknown>;

const isFields = (v: unknown): v is Fields =>
  typeof v === "object" && v !== null && Object.getPrototypeOf(v) === Object.prototype;

const onlyKeys = (v: Fields, allowed: readonly string[]) =>
  Object.keys(v).every((k) => allowed.includes(k));

const isText = (v: unknown, min = 0, max = Infinity): v is string =>
  typeof v === "string" && v.length >= min && v.length <= max;

/** An environment map: at most 1000 names of the rule, string values without NUL. */
function envMap(v: unknown): Record<string, string> | undefined {
  if (!isFields(v)) return undefined;
  const names = Object.keys(v);
  if (names.length > 1000) return undefined;
  const out: Record<string, string> = {};
  for (const name of names) {
    const value = v[name];
    if (name === "__proto__" || !ENV_NAME_PATTERN.test(name)) return undefined;
    if (typeof value !== "string" || value.includes("\0")) return undefined;
    out[name] = value;
  }
  return out;
}

/** Copies the optional field `key` of `from` into `to` when `ok` gives its value; false if not. */
function optional<T>(from: Fields, to: Fields, key: string, ok: (v: unknown) => T | undefined) {
  if (!Object.hasOwn(from, key)) return true;
  const value = ok(from[key]);
  if (value === undefined) return false;
  to[key] = value;
  return true;
}

const text = (v: unknown) => (typeof v === "string" ? v : undefined);
const timeout = (v: unknown) =>
  typeof v === "number" && Number.isSafeInteger(v) && v > 0 && v <= MAX_TIMEOUT_MS ? v : undefined;
const language = (v: unknown) =>
  typeof v === "string" && (LANGUAGES as readonly string[]).includes(v) ? v : undefined;
const packages = (v: unknown) =>
  Array.isArray(v) &&
  v.length <= 200 &&
  v.every((p) => isText(p, 1, 320) && PACKAGE_SPEC_PATTERN.test(p))
    ? [...(v as string[])]
    : undefined;

/** `POST /v1/init`'s body, or undefined for the schema to judge. */
export function quickInit(body: unknown): InitRequest | undefined {
  if (!isFields(body) || !onlyKeys(body, ["token", "env", "packages", "language"])) return;
  if (!isText(body.token, 32, 512)) return;
  const out: Fields = { token: body.token };
  if (!optional(body, out, "env", envMap)) return;
  if (!optional(body, out, "packages", packages)) return;
  if (!optional(body, out, "language", language)) return;
  return out as InitRequest;
}

/** `POST /v1/commands/run`'s body, or undefined for the schema to judge. */
export function quickRunCommand(body: unknown): RunCommandRequest | undefined {
  if (!isFields(body) || !onlyKeys(body, ["command", "cwd", "env", "timeoutMs", "stdin"])) return;
  if (!isText(body.command, 1, MAX_SOURCE_BYTES)) return;
  const out: Fields = { command: body.command };
  if (!optional(body, out, "cwd", text)) return;
  if (!optional(body, out, "env", envMap)) return;
  if (!optional(body, out, "timeoutMs", timeout)) return;
  if (!optional(body, out, "stdin", text)) return;
  return out as RunCommandRequest;
}

/** `POST /v1/code/execute`'s body, or undefined for the schema to judge. */
export function quickExecuteCode(body: unknown): ExecuteCodeRequest | undefined {
  if (!isFields(body) || !onlyKeys(body, ["language", "code", "cwd", "env", "timeoutMs"])) return;
  const lang = language(body.language);
  if (lang === undefined || !isText(body.code, 0, MAX_SOURCE_BYTES)) return;
  const out: Fields = { language: lang, code: body.code };
  if (!optional(body, out, "cwd", text)) return;
  if (!optional(body, out, "env", envMap)) return;
  if (!optional(body, out, "timeoutMs", timeout)) return;
  return out as ExecuteCodeRequest;
}
