#!/usr/bin/env node
/**
 * Builds the Sandpit sandbox image with no container registry: a debootstrap'd Debian rootfs
 * (cached, see rootfs.ts) imported as a base image, plus the pinned Node 24 and npm, sandboxd
 * bundled into one file, its runners, and an optional extra CA bundle.
 *
 * The tag is a hash of everything that goes in (`sandpit-sandbox:<12 hex>`), so a warm call only
 * bundles and hashes, finds the tag, and returns. Concurrent callers (two test workers) are
 * serialised by a lock file.
 *
 *   node images/build.ts [--ca-bundle FILE]     prints the tag
 */
import { spawn } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { createReadStream, existsSync } from "node:fs";
import {
  copyFile,
  cp,
  link,
  mkdir,
  readdir,
  readFile,
  realpath,
  rm,
  symlink,
  writeFile,
} from "node:fs/promises";
import { createRequire } from "node:module";
import { homedir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import Docker from "dockerode";
import { build as esbuild, type Metafile } from "esbuild";
import { withLock } from "./lock.ts";
import { aptMirror, ensureRootfsTar, rootfsKey, rootfsRecipe } from "./rootfs.ts";

export const IMAGE_REPO = "sandpit-sandbox";
const BASE_REPO = "sandpit-rootfs";
/** Where things live inside the image; sandboxd finds its runners at ../runners/ from dist/. */
export const OPT = "/opt/sandpit";
const BUILD_LOCK_TIMEOUT_MS = 30 * 60_000;

export interface EnsureImageOptions {
  /** Engine to build on; default: DOCKER_HOST or /var/run/docker.sock. */
  docker?: Docker;
  /** PEM file of extra CAs to trust (TLS-inspecting networks); baked into the image. */
  caBundle?: string;
  log?: (line: string) => void;
}

export interface EnsuredImage {
  /** `sandpit-sandbox:<12 hex>`; `sandpit-sandbox:latest` points at the same image. */
  tag: string;
  /** False when the image existed already. */
  built: boolean;
  seconds: number;
}

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
const sandboxdDir = join(repoRoot, "sandboxd");

/** Cache for rootfs tarballs and build contexts: never inside the repository. */
export function sandpitCacheDir(): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "sandpit");
}

/**
 * Runs an image build under the one build lock in the cache directory, so concurrent builds (of
 * this or another Sandpit image) never race on the rootfs tarball or the base image.
 */
export function withBuildLock<T>(
  what: string,
  log: (line: string) => void,
  fn: () => Promise<T>,
): Promise<T> {
  const lock = join(sandpitCacheDir(), "image-build.lock");
  return withLock(lock, { timeoutMs: BUILD_LOCK_TIMEOUT_MS, what, log }, fn);
}

export async function ensureSandboxImage(opts: EnsureImageOptions = {}): Promise<EnsuredImage> {
  const started = Date.now();
  const log = opts.log ?? (() => undefined);
  const docker = opts.docker ?? defaultDocker();
  const cacheDir = sandpitCacheDir();
  return withBuildLock("sandbox image build", log, async () => {
    const inputs = await collectInputs(opts.caBundle);
    const tag = `${IMAGE_REPO}:${inputs.hash.slice(0, 12)}`;
    let built = false;
    if (await imageExists(docker, tag)) {
      log(`${tag} is up to date`);
    } else {
      const rootfsTar = await ensureRootfsTar(inputs.recipe, cacheDir, log);
      await ensureBaseImage(docker, rootfsTar, inputs.baseTag, log);
      await buildImage(docker, inputs, tag, cacheDir, log);
      built = true;
    }
    await docker.getImage(tag).tag({ repo: IMAGE_REPO, tag: "latest" });
    return { tag, built, seconds: (Date.now() - started) / 1000 };
  });
}

/** The engine at DOCKER_HOST (unix sockets) or /var/run/docker.sock. */
export function defaultDocker(): Docker {
  const host = process.env.DOCKER_HOST;
  return new Docker({
    socketPath: host?.startsWith("unix://") ? host.slice("unix://".length) : "/var/run/docker.sock",
  });
}

/** Everything the image is made of, and the hash of it that names the image. */
interface Inputs {
  recipe: ReturnType<typeof rootfsRecipe>;
  baseTag: string;
  nodeBinary: string;
  npmDir: string;
  /** sandboxd's bundle: dist/sandboxd.mjs and the chunks it loads on demand. */
  bundle: BundleFile[];
  /** node-pty's files, by path under its package directory (see ptyFiles). */
  pty: { path: string; data: Buffer }[];
  runners: { name: string; data: Buffer }[];
  healthcheck: Buffer;
  caCerts: string[];
  dockerfile: string;
  hash: string;
}

async function collectInputs(caBundle: string | undefined): Promise<Inputs> {
  const recipe = rootfsRecipe(await aptMirror());
  const baseTag = `${BASE_REPO}:${rootfsKey(recipe).slice(0, 12)}`;
  const { nodeBinary, npmDir, npmVersion } = await nodeAndNpm();
  const bundle = await bundleSandboxd();
  const pty = await ptyFiles();
  const runnersDir = join(sandboxdDir, "runners");
  const runners = await Promise.all(
    (await readdir(runnersDir))
      .sort()
      .map(async (name) => ({ name, data: await readFile(join(runnersDir, name)) })),
  );
  const healthcheck = await readFile(fileURLToPath(new URL("./healthcheck.mjs", import.meta.url)));
  const caCerts = caBundle ? splitPem(await readFile(caBundle, "utf8"), caBundle) : [];
  const dockerfile = dockerfileText(baseTag, caCerts.length > 0);
  const h = createHash("sha256");
  const part = (name: string, data: string | Uint8Array) =>
    h.update(`${name}\0${data.length}\0`).update(data);
  part("rootfs", rootfsKey(recipe));
  part("node", await sha256File(nodeBinary));
  part("npm", npmVersion);
  for (const f of bundle) part(`bundle:${f.path}`, f.contents);
  for (const f of pty) part(`node-pty:${f.path}`, f.data);
  for (const r of runners) part(`runner:${r.name}`, r.data);
  part("healthcheck", healthcheck);
  part("ca", caCerts.join(""));
  part("dockerfile", dockerfile);
  return {
    recipe,
    baseTag,
    nodeBinary,
    npmDir,
    bundle,
    pty,
    runners,
    healthcheck,
    caCerts,
    dockerfile,
    hash: h.digest("hex"),
  };
}

/** The pinned Node binary (npm package `node`) and npm (a devDependency of images/), resolved, not assumed. */
export async function nodeAndNpm(): Promise<{
  nodeBinary: string;
  npmDir: string;
  npmVersion: string;
}> {
  const fromRoot = createRequire(join(repoRoot, "package.json"));
  const nodeBinary = await realpath(
    join(dirname(fromRoot.resolve("node/package.json")), "bin", "node"),
  );
  const npmPkg = createRequire(join(repoRoot, "images", "package.json")).resolve(
    "npm/package.json",
  );
  const npmVersion = (JSON.parse(await readFile(npmPkg, "utf8")) as { version: string }).version;
  return { nodeBinary, npmDir: dirname(npmPkg), npmVersion };
}

/** One file of a bundle, by its path under the bundle's directory (dist/). */
export interface BundleFile {
  path: string;
  contents: Uint8Array;
}

/**
 * sandboxd as ESM files with zod and ws inside: the entry, dist/sandboxd.mjs, holds what every
 * start runs; what sandboxd imports on first use (zod and the request schemas, ws for
 * terminals) is split into chunks beside it, which are neither read nor compiled until then
 * (bench/RESULTS.md, "A lean sandboxd": 1.8 MiB less idle memory than one file). Some CommonJS
 * code calls `require` for Node built-ins, which an ESM bundle lacks, hence the createRequire
 * banner. node-pty stays outside: it loads its native addon relative to its own files, so it
 * ships as a package next to the bundle (ptyFiles), where the bundle's `import "node-pty"` finds
 * it.
 */
export async function bundleSandboxd(): Promise<BundleFile[]> {
  return (await bundleSandboxdWithMetafile()).files;
}

/** The same files and esbuild's metafile, which says what each input module costs in them (bench/). */
export async function bundleSandboxdWithMetafile(): Promise<{
  files: BundleFile[];
  metafile: Metafile;
}> {
  const outdir = join(sandboxdDir, "dist");
  const result = await esbuild({
    ...esbuildOptions(["node-pty"], "node24"),
    entryPoints: { sandboxd: join(sandboxdDir, "src", "main.ts") },
    splitting: true,
    outdir,
    outExtension: { ".js": ".mjs" },
    chunkNames: "[name]-[hash]",
  });
  const files = result.outputFiles
    .map((f) => ({ path: relative(outdir, f.path), contents: f.contents }))
    .sort((a, b) => (a.path < b.path ? -1 : a.path > b.path ? 1 : 0));
  if (!files.some((f) => f.path === "sandboxd.mjs"))
    throw new Error("esbuild produced no sandboxd.mjs");
  return { files, metafile: result.metafile };
}

/**
 * What of node-pty runs on Linux: its package.json, its compiled JavaScript (tests and source
 * maps left out) and the addon `npm ci` built on this machine. The image's Debian is the same
 * release as the build machine's (rootfs.ts), so the addon's glibc and libstdc++ match.
 */
async function ptyFiles(): Promise<{ path: string; data: Buffer }[]> {
  const dir = dirname(
    createRequire(join(sandboxdDir, "package.json")).resolve("node-pty/package.json"),
  );
  const lib = (await readdir(join(dir, "lib"), { recursive: true }))
    .filter((f) => f.endsWith(".js") && !f.endsWith(".test.js"))
    .map((f) => `lib/${f}`);
  const paths = ["package.json", ...lib, "build/Release/pty.node"].sort();
  return Promise.all(paths.map(async (path) => ({ path, data: await readFile(join(dir, path)) })));
}

/**
 * Bundles `entry` and everything it imports into one ESM file for Node 24 (see bundleSandboxd),
 * or for the oldest Node `target` names (the SDK's package bundles sandboxd for Node 22).
 */
export async function bundleForNode(
  entry: string,
  outfile: string,
  external: string[] = [],
  target = "node24",
): Promise<Uint8Array> {
  return (await bundleNode(entry, outfile, external, target)).contents;
}

export interface NodeBundle {
  contents: Uint8Array;
  metafile: Metafile;
}

async function bundleNode(
  entry: string,
  outfile: string,
  external: string[],
  target: string,
): Promise<NodeBundle> {
  const result = await esbuild({
    ...esbuildOptions(external, target),
    entryPoints: [entry],
    outfile,
  });
  const out = result.outputFiles[0];
  if (!out) throw new Error(`esbuild produced no output for ${outfile}`);
  return { contents: out.contents, metafile: result.metafile };
}

/** What every bundle of ours is built with: ESM for Node, in memory, with a metafile. */
function esbuildOptions(external: string[], target: string) {
  return {
    bundle: true,
    external,
    platform: "node",
    format: "esm",
    target,
    write: false,
    legalComments: "none",
    logLevel: "silent",
    metafile: true,
    banner: {
      js: 'import { createRequire as __sandpitCreateRequire } from "node:module"; const require = __sandpitCreateRequire(import.meta.url);',
    },
  } as const;
}

/** update-ca-certificates wants one certificate per file, so a bundle is split. */
function splitPem(text: string, from: string): string[] {
  const certs = text.match(/-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g) ?? [];
  if (certs.length === 0) throw new Error(`${from}: no PEM certificates found`);
  return certs.map((c) => c + "\n");
}

function dockerfileText(baseTag: string, withCa: boolean): string {
  const bundle = "/etc/ssl/certs/ca-certificates.crt";
  return [
    "# Generated by images/build.ts.",
    `FROM ${baseTag}`,
    // uid 1000 owns the workspace; a named volume mounted there starts as a copy, with this owner.
    "RUN useradd --uid 1000 --user-group --create-home --home-dir /home/sandpit --shell /bin/bash sandpit \\",
    " && mkdir -p /mnt/user-data/workspace /mnt/user-data/uploads /mnt/user-data/outputs \\",
    " && chown -R 1000:1000 /mnt/user-data \\",
    // E2B programs live in /home/user: it names the workspace (docs/e2b.md, "Paths").
    " && ln -s /mnt/user-data/workspace /home/user",
    `COPY node/ ${OPT}/node/`,
    // A login shell (`bash -l`, as E2B's SDKs run every command) resets PATH from /etc/profile:
    // node, npm and npx are found there too.
    `RUN ln -s ${OPT}/node/bin/node ${OPT}/node/bin/npm ${OPT}/node/bin/npx /usr/local/bin/`,
    `COPY sandboxd/ ${OPT}/sandboxd/`,
    ...(withCa
      ? [
          "COPY ca/ /usr/local/share/ca-certificates/sandpit/",
          "RUN update-ca-certificates > /dev/null",
          // Node keeps its own CA list and Python tools may carry certifi: point all at the system store.
          `ENV NODE_EXTRA_CA_CERTS=${bundle} PIP_CERT=${bundle} REQUESTS_CA_BUNDLE=${bundle} SSL_CERT_FILE=${bundle}`,
        ]
      : []),
    `ENV PATH=${OPT}/node/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \\`,
    // HOME is /home/user, the link to the workspace: writable on a read-only root (pip --user,
    // dotfiles), kept across suspension, and what `~` means to the E2B API too (docs/e2b.md).
    "    HOME=/home/user USER=sandpit LOGNAME=sandpit LANG=C.UTF-8 \\",
    "    SANDBOXD_LISTEN=0.0.0.0:8080 SANDBOXD_PYTHON=/usr/bin/python3 SANDBOXD_PYTHON_PREFIX=/usr \\",
    // A container: AIO file routes reach what bash in it can (sandboxd/src/config.ts).
    "    SANDBOXD_AIO_PATHS=any \\",
    // PEP 668: a plain `pip install x` then falls back to a user install in $HOME/.local (the
    // system site-packages are root's, so nothing system-wide can break). No PIP_USER: it would
    // clash with the --target sandboxd installs packages with.
    "    PIP_BREAK_SYSTEM_PACKAGES=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 \\",
    // npm's cache is a cache: /tmp keeps it off the workspace volume and works with a read-only root.
    "    npm_config_cache=/tmp/.npm npm_config_update_notifier=false npm_config_fund=false npm_config_audit=false",
    "WORKDIR /mnt/user-data/workspace",
    "USER 1000:1000",
    "EXPOSE 8080",
    `HEALTHCHECK --interval=5s --timeout=3s --start-period=10s --retries=3 CMD ["${OPT}/node/bin/node", "${OPT}/sandboxd/healthcheck.mjs"]`,
    // tini as PID 1 reaps orphans of background commands and forwards SIGTERM to sandboxd.
    `ENTRYPOINT ["/usr/bin/tini", "--", "${OPT}/node/bin/node", "${OPT}/sandboxd/dist/sandboxd.mjs"]`,
    "",
  ].join("\n");
}

export async function imageExists(docker: Docker, tag: string): Promise<boolean> {
  try {
    await docker.getImage(tag).inspect();
    return true;
  } catch (err) {
    if ((err as { statusCode?: number }).statusCode === 404) return false;
    throw err;
  }
}

/** `docker import` of the rootfs tarball, once per rootfs key. */
async function ensureBaseImage(
  docker: Docker,
  tarPath: string,
  baseTag: string,
  log: (line: string) => void,
): Promise<void> {
  if (await imageExists(docker, baseTag)) return;
  log(`importing ${tarPath} as ${baseTag}`);
  const [repo, tag] = baseTag.split(":") as [string, string];
  const stream = await docker.importImage(tarPath, { repo, tag });
  await follow(docker, stream, `importing ${baseTag}`);
}

/** Lays out the build context (node, npm, sandboxd, runners, CA certs), then `docker build`. */
async function buildImage(
  docker: Docker,
  inputs: Inputs,
  tag: string,
  cacheDir: string,
  log: (line: string) => void,
): Promise<void> {
  const ctx = join(cacheDir, `context-${process.pid}-${randomBytes(4).toString("hex")}`);
  try {
    await mkdir(join(ctx, "node", "bin"), { recursive: true });
    await linkOrCopy(inputs.nodeBinary, join(ctx, "node", "bin", "node"));
    // A normal Node install: lib/node_modules/npm, with npm and npx linked from bin/.
    await cp(inputs.npmDir, join(ctx, "node", "lib", "node_modules", "npm"), {
      recursive: true,
      verbatimSymlinks: true,
    });
    await symlink("../lib/node_modules/npm/bin/npm-cli.js", join(ctx, "node", "bin", "npm"));
    await symlink("../lib/node_modules/npm/bin/npx-cli.js", join(ctx, "node", "bin", "npx"));
    await mkdir(join(ctx, "sandboxd", "dist"), { recursive: true });
    await mkdir(join(ctx, "sandboxd", "runners"), { recursive: true });
    for (const f of inputs.bundle)
      await writeFile(join(ctx, "sandboxd", "dist", f.path), f.contents);
    for (const f of inputs.pty) {
      const to = join(ctx, "sandboxd", "node_modules", "node-pty", f.path);
      await mkdir(dirname(to), { recursive: true });
      await writeFile(to, f.data);
    }
    for (const r of inputs.runners)
      await writeFile(join(ctx, "sandboxd", "runners", r.name), r.data);
    await writeFile(join(ctx, "sandboxd", "healthcheck.mjs"), inputs.healthcheck);
    if (inputs.caCerts.length > 0) {
      await mkdir(join(ctx, "ca"));
      for (const [i, pem] of inputs.caCerts.entries())
        await writeFile(join(ctx, "ca", `extra-${String(i).padStart(3, "0")}.crt`), pem);
    }
    await writeFile(join(ctx, "Dockerfile"), inputs.dockerfile);
    await dockerBuild(docker, ctx, tag, { title: IMAGE_REPO, inputs: inputs.hash }, log);
  } finally {
    await rm(ctx, { recursive: true, force: true });
  }
}

/**
 * `docker build` of the context directory `ctx` (its Dockerfile included), every file owned by
 * root in the context, labelled with the image's title and the hash of its inputs.
 */
export async function dockerBuild(
  docker: Docker,
  ctx: string,
  tag: string,
  labels: { title: string; inputs: string },
  log: (line: string) => void,
): Promise<void> {
  log(`building ${tag}`);
  const tar = spawn("tar", ["--numeric-owner", "--owner=0", "--group=0", "-C", ctx, "-c", "."], {
    stdio: ["ignore", "pipe", "inherit"],
  });
  const stream = await docker.buildImage(tar.stdout, {
    t: tag,
    rm: true,
    forcerm: true,
    labels: {
      "org.opencontainers.image.title": labels.title,
      "dev.sandpit.inputs": labels.inputs,
    },
  });
  await follow(docker, stream, `building ${tag}`, (line) => log(`  ${line}`));
}

/** A hard link where possible (the 120 MB Node binary, same file system), else a copy. */
export async function linkOrCopy(from: string, to: string): Promise<void> {
  await link(from, to).catch(() => copyFile(from, to));
}

/** Waits for a Docker progress stream; the engine reports a failed build inside it, not as a status code. */
function follow(
  docker: Docker,
  stream: NodeJS.ReadableStream,
  what: string,
  onLine?: (line: string) => void,
): Promise<void> {
  return new Promise((resolve, reject) => {
    docker.modem.followProgress(
      stream,
      (err, results: { error?: string; errorDetail?: { message?: string } }[]) => {
        const failed = err?.message ?? results.find((r) => r.error)?.error;
        if (failed) reject(new Error(`${what} failed: ${failed}`));
        else resolve();
      },
      (event: { stream?: string }) => {
        const line = event.stream?.trim();
        if (line && onLine && /^Step \d+\/\d+/.test(line)) onLine(line);
      },
    );
  });
}

export async function sha256File(path: string): Promise<string> {
  const h = createHash("sha256");
  for await (const chunk of createReadStream(path)) h.update(chunk as Buffer);
  return h.digest("hex");
}

/**
 * An image builder's command line, when `moduleUrl` is the script node runs: `ensure` builds or
 * finds the image, its tag goes to stdout, progress and errors to stderr (exit 1).
 */
export async function imageCli(
  moduleUrl: string,
  ensure: (
    log: (line: string) => void,
  ) => Promise<{ built: boolean; tag: string; seconds: number }>,
): Promise<void> {
  const script = process.argv[1] && (await realpath(process.argv[1]).catch(() => ""));
  if (script !== fileURLToPath(moduleUrl)) return;
  try {
    const result = await ensure((line) => process.stderr.write(`${line}\n`));
    process.stderr.write(
      `${result.built ? "built" : "found"} ${result.tag} in ${result.seconds.toFixed(1)} s\n`,
    );
    process.stdout.write(`${result.tag}\n`);
  } catch (err) {
    process.stderr.write(`build: ${(err as Error).message}\n`);
    process.exit(1);
  }
}

/** CLI: `build.ts [--ca-bundle FILE]`. */
await imageCli(import.meta.url, (log) => {
  const { values } = parseArgs({ options: { "ca-bundle": { type: "string" } } });
  const caBundle = values["ca-bundle"];
  if (caBundle && !existsSync(caBundle)) throw new Error(`--ca-bundle ${caBundle}: no such file`);
  return ensureSandboxImage({ ...(caBundle ? { caBundle } : {}), log });
});
