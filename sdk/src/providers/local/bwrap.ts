/**
 * bubblewrap for the local provider. sandboxd itself runs inside the namespace, exactly as it
 * runs inside a container: the sandbox directory is mounted at /mnt/user-data, the host's
 * system directories and Sandpit's own code are mounted read-only, the rest of the host
 * (home directories, other sandboxes, most of /etc) is simply absent. Commands are then plain
 * children of sandboxd, so isolation costs one namespace setup per sandbox, not per command.
 */
import { execFile } from "node:child_process";
import { existsSync } from "node:fs";
import * as fs from "node:fs/promises";
import { promisify } from "node:util";

const run = promisify(execFile);

/** /etc entries a process needs for DNS, TLS, users and locale; the rest of /etc stays hidden. */
const ETC_ALLOW = [
  "resolv.conf",
  "hosts",
  "nsswitch.conf",
  "host.conf",
  "gai.conf",
  "services",
  "protocols",
  "ssl",
  "ca-certificates",
  "ca-certificates.conf",
  "pki",
  "pip.conf",
  "npmrc",
  "passwd",
  "group",
  "localtime",
  "timezone",
  "ld.so.cache",
  "ld.so.conf",
  "ld.so.conf.d",
  "alternatives",
  "mime.types",
  "os-release",
  "debian_version",
];

export interface BwrapOptions {
  /** Host directory mounted read-write at /mnt/user-data. */
  dataDir: string;
  virtualRoot: string;
  /** Host directory for sandboxd's socket, mounted read-write at `runMount`. */
  runDir: string;
  runMount: string;
  /** Share the host's network namespace (servers inside reachable on 127.0.0.1). */
  network: boolean;
  /** Host directories mounted read-only at the same path: Node, Python, sandboxd's code. */
  readOnly: string[];
  /** The caller's mounts: host paths at paths inside, after everything else. */
  mounts?: { source: string; target: string; readOnly?: boolean | undefined }[];
}

/**
 * The host's system as a sandbox sees it: /usr and its top-level links, the allowed /etc
 * entries, a fresh /proc and /dev, a private /tmp, then `readOnly` host directories (Node,
 * Python, Sandpit's code) at their own paths. Namespace flags and writable binds are the
 * caller's. Order matters: bubblewrap mounts in argument order, so the /tmp tmpfs comes before
 * binds that may live under /tmp (a checkout there, say).
 */
export async function systemMounts(readOnly: string[]): Promise<string[]> {
  const args = ["--ro-bind", "/usr", "/usr"];
  // Merged-/usr systems have /bin -> usr/bin and friends: recreate the links, else bind.
  for (const top of ["bin", "sbin", "lib", "lib32", "lib64", "libx32"]) {
    const link = await fs.readlink(`/${top}`).catch(() => null);
    if (link !== null) args.push("--symlink", link, `/${top}`);
    else if (existsSync(`/${top}`)) args.push("--ro-bind", `/${top}`, `/${top}`);
  }
  for (const entry of ETC_ALLOW) args.push("--ro-bind-try", `/etc/${entry}`, `/etc/${entry}`);
  args.push("--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp");
  for (const dir of new Set(readOnly)) {
    if (dir === "/usr" || dir.startsWith("/usr/")) continue;
    args.push("--ro-bind", dir, dir);
  }
  return args;
}

/**
 * No --die-with-parent: the sandbox outlives the process that started it (./detached.ts stops
 * it). --new-session keeps it off the starter's terminal and out of its process group.
 */
export async function bwrapArgs(o: BwrapOptions): Promise<string[]> {
  const args = ["--new-session", "--unshare-all", "--cap-drop", "ALL"];
  if (o.network) args.push("--share-net");
  args.push(...(await systemMounts(o.readOnly)));
  args.push("--bind", o.dataDir, o.virtualRoot, "--bind", o.runDir, o.runMount);
  // E2B programs live in /home/user: as in the sandbox image, it names the workspace.
  args.push("--symlink", `${o.virtualRoot}/workspace`, "/home/user");
  for (const m of o.mounts ?? [])
    args.push(m.readOnly ? "--ro-bind" : "--bind", m.source, m.target);
  args.push("--chdir", o.virtualRoot);
  return args;
}

/** True when bubblewrap is installed and can create namespaces on this host. */
export async function bwrapAvailable(): Promise<boolean> {
  try {
    await run("bwrap", ["--unshare-all", "--ro-bind", "/", "/", "--", "/bin/true"], {
      timeout: 10_000,
    });
    return true;
  } catch {
    return false;
  }
}
