/**
 * The claims a sandbox's pod mounts: its user-data volume (a claim of its own, or its directory
 * of a shared claim) and its spec.mounts, with {user} and {thread} filled in from the sandbox.
 */
import { VIRTUAL_ROOT } from "@sandpit/sandboxd/protocol";
import type { Effective } from "./spec.ts";

export interface ClaimMount {
  claimName: string;
  mountPath: string;
  readOnly: boolean;
  subPath?: string;
}

/** The pod's mounts, the user-data volume first; or why the sandbox cannot have them. */
export type PodMounts = { mounts: ClaimMount[] } | { problem: string };

/** What a subPath's placeholders stand for. */
export interface Ids {
  userId?: string | undefined;
  threadId?: string | undefined;
}

/** A value that is one plain path segment: it cannot climb out of the directory it names. */
const SEGMENT = /^[A-Za-z0-9._-]+$/;

/** `ownClaim` is the claim made for the pod, used unless the user data lives in a shared claim. */
export function podMounts(e: Effective, ids: Ids, ownClaim: string): PodMounts {
  const shared = e.storage.sharedClaim;
  const wanted = [
    {
      field: "spec.storage.sharedClaim.subPath",
      claimName: shared?.claimName ?? ownClaim,
      mountPath: VIRTUAL_ROOT,
      readOnly: false,
      subPath: shared?.subPath,
    },
    ...e.mounts.map((m) => ({
      field: `the subPath of the mount at ${m.mountPath}`,
      claimName: m.claimName,
      mountPath: m.mountPath,
      readOnly: m.readOnly ?? false,
      subPath: m.subPath,
    })),
  ];
  const mounts: ClaimMount[] = [];
  for (const { field, subPath, ...m } of wanted) {
    if (subPath === undefined) {
      mounts.push(m);
      continue;
    }
    const rendered = render(subPath, ids, field);
    if (typeof rendered !== "string") return rendered;
    mounts.push({ ...m, subPath: rendered });
  }
  return { mounts };
}

function render(template: string, ids: Ids, field: string): string | { problem: string } {
  let problem: string | undefined;
  const out = template.replace(/\{(user|thread)\}/g, (_, name: "user" | "thread") => {
    const key = name === "user" ? "userId" : "threadId";
    const value = ids[key];
    if (value === undefined) {
      problem ??= `${field} names {${name}} but the sandbox has no spec.${key}`;
    } else if (!SEGMENT.test(value) || value === "." || value === "..") {
      problem ??= `${field} names {${name}} but spec.${key} is not a plain path segment`;
    }
    return value ?? "";
  });
  return problem ? { problem } : out;
}
