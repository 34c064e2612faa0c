/**
 * E2B's home directory onto sandboxd's workspace. E2B programs write to `/home/user/...` (and
 * `~/...`), and expect commands to start there; sandboxd's jail is `/mnt/user-data`, whose
 * workspace is where relative paths and commands already start. So `/home/user` and `~` name the
 * workspace on the way in, and paths under the workspace are reported under `/home/user` on the
 * way out: a program sees one home, whichever way it names it. The sandbox image links
 * `/home/user` to the workspace, so the same paths work inside commands too (docs/e2b.md).
 */
import { VIRTUAL_WORKSPACE } from "@sandpit/sandboxd/protocol";

export const E2B_HOME = "/home/user";

/** Replaces `from` by `to` when it is the whole path or its leading directory. */
function swapPrefix(path: string, from: string, to: string): string | undefined {
  if (path === from) return to;
  if (path.startsWith(`${from}/`)) return to + path.slice(from.length);
  return undefined;
}

/** An E2B path as sandboxd names it (`~`, `/home/user` → the workspace; others unchanged). */
export function toSandbox(path: string): string {
  return (
    swapPrefix(path, "~", VIRTUAL_WORKSPACE) ??
    swapPrefix(path, E2B_HOME, VIRTUAL_WORKSPACE) ??
    path
  );
}

/** A sandboxd path as an E2B program expects it (the workspace → `/home/user`). */
export function toE2b(path: string): string {
  return swapPrefix(path, VIRTUAL_WORKSPACE, E2B_HOME) ?? path;
}

/**
 * Where a process starts: sandboxd's directory, and the `PWD` it is told (E2B's name for it,
 * `/home/user` by default). Through the image's link both name the same directory, so a shell
 * keeps the E2B name and `pwd` prints it, as on E2B.
 */
export function startDir(cwd: string | undefined): { cwd: string; pwd: string } {
  const given = cwd || E2B_HOME;
  const absolute = given.startsWith("/") || given === "~" || given.startsWith("~/");
  const logical = toE2b(toSandbox(absolute ? given : `${E2B_HOME}/${given}`));
  return { cwd: toSandbox(logical), pwd: logical };
}
