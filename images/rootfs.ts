/**
 * The sandbox image's base: a Debian rootfs made with debootstrap from the machine's own apt
 * mirror (no container registry is needed, or reachable, here). It is slimmed and cached as a
 * tarball outside the repository, keyed by what went into it, so only a cold build pays for it.
 */
import { execFile, spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync } from "node:fs";
import { mkdir, readdir, readFile, rename, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { promisify } from "node:util";

const run = promisify(execFile);

export const SUITE = "bookworm";
/**
 * Debian packages beyond minbase: the interpreters sandboxd runs code with, the trust store, and
 * what a shell user expects in a sandbox (ps/top, curl, git, `python3 -m venv` with pip, as the
 * AIO image has them), plus tini as PID 1 so orphaned background processes are reaped.
 */
export const PACKAGES = [
  "python3",
  "python3-pip",
  "python3-venv",
  "ca-certificates",
  "procps",
  "curl",
  "git",
  "tini",
] as const;
/** Bump when the slimming below changes, so cached rootfs tarballs are rebuilt. */
const RECIPE = 1;

export interface RootfsRecipe {
  suite: string;
  packages: readonly string[];
  mirror: string;
  recipe: number;
}

export function rootfsRecipe(mirror: string): RootfsRecipe {
  return { suite: SUITE, packages: [...PACKAGES], mirror, recipe: RECIPE };
}

export function rootfsKey(r: RootfsRecipe): string {
  return createHash("sha256").update(JSON.stringify(r)).digest("hex");
}

/**
 * The Debian mirror this machine's apt uses, for `suite`: from deb822 `.sources` files (URIs:)
 * or one-line `sources.list` entries. Security and other suites are skipped in favour of the main one.
 */
export async function aptMirror(suite = SUITE): Promise<string> {
  const entries: { uri: string; suites: string[] }[] = [];
  const dir = "/etc/apt/sources.list.d";
  const files = existsSync(dir) ? (await readdir(dir)).sort().map((f) => join(dir, f)) : [];
  for (const file of files.filter((f) => f.endsWith(".sources")))
    entries.push(...parseDeb822(await readFile(file, "utf8")));
  for (const file of ["/etc/apt/sources.list", ...files.filter((f) => f.endsWith(".list"))]) {
    if (existsSync(file)) entries.push(...parseOneLine(await readFile(file, "utf8")));
  }
  const match =
    entries.find((e) => e.suites.includes(suite)) ??
    entries.find((e) => e.suites.some((s) => !/security|updates|backports/.test(s)));
  if (!match)
    throw new Error(
      `no Debian mirror found in /etc/apt/sources.list or /etc/apt/sources.list.d/*.sources; debootstrap needs one`,
    );
  return match.uri.replace(/\/+$/, "");
}

function parseDeb822(text: string): { uri: string; suites: string[] }[] {
  const out: { uri: string; suites: string[] }[] = [];
  for (const stanza of text.split(/\n\s*\n/)) {
    const field = (name: string) =>
      stanza
        .split("\n")
        .find((l) => l.toLowerCase().startsWith(`${name.toLowerCase()}:`))
        ?.slice(name.length + 1)
        .trim()
        .split(/\s+/) ?? [];
    if (!field("Types").includes("deb") || /^enabled:\s*no/im.test(stanza)) continue;
    for (const uri of field("URIs")) out.push({ uri, suites: field("Suites") });
  }
  return out;
}

function parseOneLine(text: string): { uri: string; suites: string[] }[] {
  const out: { uri: string; suites: string[] }[] = [];
  for (const raw of text.split("\n")) {
    const line = raw
      .replace(/#.*/, "")
      .replace(/\[[^\]]*\]/, "")
      .trim()
      .split(/\s+/);
    if (line[0] === "deb" && line[1] && line[2]) out.push({ uri: line[1], suites: [line[2]] });
  }
  return out;
}

/** Returns the cached rootfs tarball for `recipe`, making it (about a minute) when missing. */
export async function ensureRootfsTar(
  recipe: RootfsRecipe,
  cacheDir: string,
  log: (line: string) => void,
): Promise<string> {
  const key = rootfsKey(recipe);
  const tarPath = join(cacheDir, `rootfs-${SUITE}-${key.slice(0, 16)}.tar`);
  if (existsSync(tarPath)) return tarPath;
  if (process.getuid?.() !== 0)
    throw new Error(
      "building the sandbox rootfs needs root (debootstrap); run as root or load a built image",
    );
  await ensureDebootstrap(log);
  const work = join(cacheDir, `rootfs-work-${process.pid}-${randomBytes(4).toString("hex")}`);
  const target = join(work, "root");
  await mkdir(target, { recursive: true });
  try {
    const started = Date.now();
    log(
      `debootstrap ${recipe.suite} (minbase + ${recipe.packages.join(",")}) from ${recipe.mirror}`,
    );
    await runLogged(
      "debootstrap",
      [
        "--variant=minbase",
        `--include=${recipe.packages.join(",")}`,
        "--components=main",
        recipe.suite,
        target,
        recipe.mirror,
      ],
      join(work, "debootstrap.log"),
      20 * 60_000,
    );
    log(`debootstrap done in ${Math.round((Date.now() - started) / 1000)} s; slimming`);
    await slim(target);
    const partial = `${tarPath}.partial-${process.pid}`;
    await run("tar", ["--numeric-owner", "-C", target, "-cf", partial, "."], {
      timeout: 10 * 60_000,
    });
    await rename(partial, tarPath);
    return tarPath;
  } finally {
    await removeTree(work);
  }
}

async function ensureDebootstrap(log: (line: string) => void): Promise<void> {
  if (existsSync("/usr/sbin/debootstrap")) return;
  log("installing debootstrap with apt-get");
  const env = { ...process.env, DEBIAN_FRONTEND: "noninteractive" };
  await run("apt-get", ["update"], { env, timeout: 5 * 60_000, maxBuffer: 64 << 20 });
  await run("apt-get", ["install", "-y", "--no-install-recommends", "debootstrap"], {
    env,
    timeout: 10 * 60_000,
    maxBuffer: 64 << 20,
  });
}

/**
 * Drops what a sandbox never reads: apt's downloaded packages and lists, man pages, docs (the
 * copyright files stay, for the licences), translations, logs. Also the host's resolv.conf and
 * hostname, which debootstrap copies in and Docker provides at run time anyway.
 */
async function slim(root: string): Promise<void> {
  const emptyDirs = [
    "var/cache/apt/archives",
    "var/lib/apt/lists",
    "usr/share/man",
    "usr/share/info",
    "usr/share/locale",
    "usr/share/lintian",
    "var/log",
  ];
  for (const dir of emptyDirs) await emptyDir(join(root, dir), new Set(["partial", "lock"]));
  await rm(join(root, "var/cache/apt/pkgcache.bin"), { force: true });
  await rm(join(root, "var/cache/apt/srcpkgcache.bin"), { force: true });
  const docs = join(root, "usr/share/doc");
  for (const pkg of existsSync(docs) ? await readdir(docs) : []) {
    const dir = join(docs, pkg);
    const entries = await readdir(dir).catch(() => null);
    if (entries)
      for (const e of entries)
        if (e !== "copyright") await rm(join(dir, e), { recursive: true, force: true });
  }
  await writeFile(join(root, "etc/resolv.conf"), "");
  await writeFile(join(root, "etc/hostname"), "sandbox\n");
}

async function emptyDir(dir: string, keep: Set<string>): Promise<void> {
  for (const e of existsSync(dir) ? await readdir(dir) : []) {
    if (!keep.has(e)) await rm(join(dir, e), { recursive: true, force: true });
  }
}

/**
 * debootstrap mounts /proc and /sys inside the target and may leave them mounted when it fails;
 * `rm -r` must never walk into them, so anything mounted below the tree is unmounted first.
 */
async function removeTree(dir: string): Promise<void> {
  const mounts = (await readFile("/proc/self/mountinfo", "utf8"))
    .split("\n")
    .map((l) => l.split(" ")[4] ?? "")
    .filter((m) => m.startsWith(dir + "/"))
    .sort((a, b) => b.length - a.length);
  for (const m of mounts) await run("umount", ["-l", m]).catch(() => undefined);
  await rm(dir, { recursive: true, force: true });
}

/** Runs a long tool with its output in a log file; a failure quotes the log's tail. */
function runLogged(
  file: string,
  args: string[],
  logPath: string,
  timeoutMs: number,
): Promise<void> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    const child = spawn(file, args, { stdio: ["ignore", "pipe", "pipe"], timeout: timeoutMs });
    child.stdout.on("data", (d: Buffer) => chunks.push(d));
    child.stderr.on("data", (d: Buffer) => chunks.push(d));
    child.on("error", reject);
    child.on("close", (code, signal) => {
      const text = Buffer.concat(chunks).toString("utf8");
      void writeFile(logPath, text).catch(() => undefined);
      if (code === 0) resolve();
      else
        reject(
          new Error(
            `${file} failed (${signal ?? `exit ${code}`}); last output:\n${text.split("\n").slice(-30).join("\n")}`,
          ),
        );
    });
  });
}
