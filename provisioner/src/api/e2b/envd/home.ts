/**
 * E2B's home directory onto sandboxd's workspace. E2B programs write to `/home/user/...` (and
 * `~/...`, or relative paths), and expect commands to start there; sandboxd's jail is
 * `/mnt/user-data`, whose workspace is where relative paths and commands already start. So
 * `/home/user` and `~` name the workspace on the way in. On the way out a path is spelled the
 * way the caller spelled the one it asked about: under `/home/user` for a caller that named the
 * home (or a relative path), under `/mnt/user-data` for one that named sandboxd's paths (our own
 * SDK's e2b provider does). The sandbox image links `/home/user` to the workspace and makes it
 * HOME, so the same paths work inside commands too (docs/e2b.md, "Paths").
 */
import { VIRTUAL_ROOT, VIRTUAL_WORKSPACE } from "@sandpit/sandboxd/protocol";

export const E2B_HOME = "/home/user";

/** Replaces `from` by `to` when it is the whole path or its leading directory. */
function swapPrefix(path: string, from: string, to: string): string | undefined {
  if (path === from) return to;
  if (path.startsWith(`${from}/`)) return to + path.slice(from.length);
  return undefined;
}

/** `~` and relative paths as E2B resolves them: from the home. */
function absolute(path: string): string {
  if (path.startsWith("/")) return path;
  return swapPrefix(path, "~", E2B_HOME) ?? `${E2B_HOME}/${path}`;
}

/** An E2B path as sandboxd names it (`~`, `/home/user` → the workspace; others unchanged). */
export function toSandbox(path: string): string {
  if (!path) return path;
  const abs = absolute(path);
  return swapPrefix(abs, E2B_HOME, VIRTUAL_WORKSPACE) ?? abs;
}

/** How paths are reported to a caller who asked about `asked`: in the same spelling. */
export function reportAs(asked: string): (sandboxPath: string) => string {
  const home = swapPrefix(absolute(asked || "~"), E2B_HOME, "") !== undefined;
  return home ? (p) => swapPrefix(p, VIRTUAL_WORKSPACE, E2B_HOME) ?? p : (p) => p;
}

/**
 * Where a process starts: sandboxd's directory, and the `PWD` it is told (the caller's name for
 * it, `/home/user` by default). Through the image's link both name the same directory, so a
 * shell keeps the caller's name and `pwd` prints it, as on E2B.
 */
export function startDir(cwd: string | undefined): {
  cwd: string | undefined;
  pwd: string;
} {
  const pwd = absolute(cwd || E2B_HOME);
  const dir = toSandbox(pwd);
  // A directory outside the jail (E2B programs may start in `/` or `/tmp`): sandboxd starts the
  // process in the workspace and the shell changes there (cwd undefined), as the command itself
  // could; the jail bounds the file API, not where a process may go.
  return { cwd: dir === VIRTUAL_ROOT || dir.startsWith(`${VIRTUAL_ROOT}/`) ? dir : undefined, pwd };
}
