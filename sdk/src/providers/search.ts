/**
 * glob and grep for the cloud providers, whose services have no such call (E2B) or only a
 * narrower one (Daytona): a shell command that does the walking in the sandbox, argv strictly
 * quoted, and the exact glob rule applied here, so every provider means the same by a pattern.
 */
import { posix } from "node:path";
import { SandboxError } from "../errors.ts";
import type { GrepMatch, GrepOptions } from "../types.ts";
import { shq, VIRTUAL_ROOT, virtualPath } from "./cloud-common.ts";

export const DEFAULT_MAX_MATCHES = 1000;

export function checkPattern(pattern: unknown, what: string): string {
  if (typeof pattern !== "string" || pattern.length === 0 || pattern.includes("\0"))
    throw new SandboxError(`${what} must be a non-empty string`, "INVALID_ARGUMENT");
  return pattern;
}

/** The directory a glob walks and the relative pattern (an absolute pattern sets the root). */
export function globRoot(pattern: string, cwd: string): { root: string; relative: string } {
  if (!pattern.startsWith("/")) return { root: cwd, relative: pattern };
  const parts = pattern.split("/");
  let i = 1;
  while (i < parts.length - 1 && !/[*?[\]{}]/.test(parts[i]!)) i++;
  return {
    root: virtualPath(parts.slice(0, i).join("/") || "/"),
    relative: parts.slice(i).join("/"),
  };
}

/** `find` listing every path under root, NUL-separated (errors such as unreadable dirs ignored). */
export function findCommand(root: string): string {
  return `find ${shq(root)} -mindepth 1 -print0 2>/dev/null; true`;
}

/** The paths (from `find -print0` output) matching the relative glob, sorted. */
export function matchGlob(found: string, root: string, relative: string): string[] {
  const out: string[] = [];
  for (const p of found.split("\0")) {
    if (!p || !(p === VIRTUAL_ROOT || p.startsWith(`${VIRTUAL_ROOT}/`))) continue;
    if (posix.matchesGlob(posix.relative(root, p), relative)) out.push(p);
  }
  return out.sort();
}

export interface GrepPlan {
  command: string;
  max: number;
}

/** `grep -rnIH` with NUL after each file name; -E (POSIX extended) or -F (literal). */
export function grepCommand(pattern: string, o: GrepOptions, cwd: string): GrepPlan {
  const path = virtualPath(o.path ?? cwd);
  const max = o.maxMatches ?? DEFAULT_MAX_MATCHES;
  if (!Number.isInteger(max) || max < 1)
    throw new SandboxError("maxMatches must be a positive integer", "INVALID_ARGUMENT");
  if (o.glob !== undefined) checkPattern(o.glob, "glob");
  const flags = ["-rnIH", "--null", o.literal ? "-F" : "-E", ...(o.ignoreCase ? ["-i"] : [])];
  if (o.glob !== undefined) flags.push(`--include=${shq(o.glob)}`);
  // grep exits 1 when nothing matched: that is an empty answer, not a failure.
  const command = `grep ${flags.join(" ")} -m ${max} -e ${shq(pattern)} -- ${shq(path)}; rc=$?; [ $rc -le 1 ] || exit $rc`;
  return { command, max };
}

/** Parses `path\0line:text` lines, keeping at most `max`. */
export function parseGrep(out: string, max: number): GrepMatch[] {
  const matches: GrepMatch[] = [];
  for (const line of out.split("\n")) {
    if (matches.length >= max) break;
    const nul = line.indexOf("\0");
    if (nul < 0) continue;
    const rest = line.slice(nul + 1);
    const colon = rest.indexOf(":");
    const n = Number(rest.slice(0, colon));
    if (colon < 0 || !Number.isInteger(n)) continue;
    matches.push({ path: line.slice(0, nul), line: n, text: rest.slice(colon + 1) });
  }
  return matches;
}
