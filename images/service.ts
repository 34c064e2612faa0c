#!/usr/bin/env node
/**
 * Builds the images of Sandpit's services, the operator, the provisioner and the egress proxy, with no
 * container registry, the way ./build.ts builds the sandbox image and with its code: the pinned
 * Node 24, the service bundled by esbuild into one file, tini as PID 1, a non-root uid, and a
 * content hash as the tag.
 *
 * Neither service needs a shell, Python or package manager, so the image starts `FROM scratch`
 * and takes from the sandbox image's cached Debian rootfs tarball only what Node and tini load
 * (the dynamic loader, libc, libm, libdl, libpthread, libstdc++, libgcc_s), the CA bundle and
 * the packages' copyright files: about 6 MB beside the Node binary. No second debootstrap.
 *
 *   node images/service.ts operator      prints the tag (sandpit-operator:<12 hex>)
 *   node images/service.ts provisioner   prints the tag (sandpit-provisioner:<12 hex>)
 *   node images/service.ts egress        prints the tag (sandpit-egress:<12 hex>)
 */
import { execFile } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { chmod, mkdir, rm, writeFile } from "node:fs/promises";
import { join, posix } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import type Docker from "dockerode";
import {
  OPT,
  bundleForNode,
  defaultDocker,
  dockerBuild,
  type EnsuredImage,
  imageExists,
  linkOrCopy,
  nodeAndNpm,
  sandpitCacheDir,
  imageCli,
  sha256File,
  withBuildLock,
} from "./build.ts";
import { aptMirror, ensureRootfsTar, rootfsKey, rootfsRecipe } from "./rootfs.ts";

/** The services, each with its entry point and the port its image declares. */
export const SERVICES = {
  /** /healthz, /readyz and /metrics (SANDPIT_PROBE_ADDRESS). */
  operator: { entry: "operator/src/main.ts", port: 8081 },
  /** The API, the proxy and the probes (SANDPIT_LISTEN). */
  provisioner: { entry: "provisioner/src/main.ts", port: 8080 },
  /** The egress proxy for network.allowDomains (SANDPIT_EGRESS_LISTEN). */
  egress: { entry: "operator/src/egress-proxy/main.ts", port: 3128 },
} as const;
export type Service = keyof typeof SERVICES;

/** The image repository of a service: `sandpit-<service>`. */
export const imageRepo = (service: Service) => `sandpit-${service}`;
/** The distroless convention for "nonroot"; no file in the image belongs to it. */
export const SERVICE_UID = 65532;
/** The bundle's path in the image; the container command is `node` with it. */
export const serviceMain = (service: Service) => `${OPT}/${service}/${service}.mjs`;

/**
 * V8 flags of a service's `node` command. The operator's: a young generation of 8 MiB semi-spaces
 * instead of the default V8 sizes from the machine's memory (49 MiB in use in new space alone on
 * a 24 GiB machine, far more than the reconcile churn needs): 1,000 sandboxes on fake nodes took
 * 253 MiB RSS instead of 326, for 39 s of operator CPU instead of 33 (bench/RESULTS.md,
 * "Operator at scale"). The bench runs the operator's bundle with these flags and SERVICE_ENV.
 */
export const SERVICE_NODE_FLAGS: Record<Service, readonly string[]> = {
  operator: ["--max-semi-space-size=8"],
  provisioner: [],
  egress: [],
};

/**
 * Environment of a service's image. The operator's: two malloc arenas instead of glibc's eight
 * per core, so what the TLS, HTTP and JSON work frees in native memory is reused rather than
 * left spread over arenas of their own. A small gain, within the noise of one run each: native
 * memory 82 MiB against 91 at 1,000 sandboxes (bench/RESULTS.md, "Operator at scale").
 */
export const SERVICE_ENV: Record<Service, Readonly<Record<string, string>>> = {
  operator: { MALLOC_ARENA_MAX: "2" },
  provisioner: {},
  egress: {},
};

const run = promisify(execFile);
const repoRoot = fileURLToPath(new URL("../", import.meta.url));

export interface EnsureServiceImageOptions {
  /** Engine to build on; default: DOCKER_HOST or /var/run/docker.sock. */
  docker?: Docker;
  log?: (line: string) => void;
}

/** Debian's multiarch triplet and Node's dynamic loader (PT_INTERP) for this machine. */
function platformPaths(): { triplet: string; loader: string } {
  if (process.arch === "x64")
    return { triplet: "x86_64-linux-gnu", loader: "/lib64/ld-linux-x86-64.so.2" };
  if (process.arch === "arm64")
    return { triplet: "aarch64-linux-gnu", loader: "/lib/ld-linux-aarch64.so.1" };
  throw new Error(`service images are built for x64 and arm64 only, not ${process.arch}`);
}

/** What the image takes from the rootfs, as absolute paths; symlinks on the way come too. */
export function rootfsFiles(): string[] {
  const { triplet, loader } = platformPaths();
  const libs = [
    "libc.so.6",
    "libm.so.6",
    "libdl.so.2",
    "libpthread.so.0",
    "libstdc++.so.6",
    "libgcc_s.so.1",
  ];
  const docs = ["libc6", "libgcc-s1", "libstdc++6", "tini", "ca-certificates"];
  return [
    loader,
    ...libs.map((l) => `/usr/lib/${triplet}/${l}`),
    "/usr/bin/tini",
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/nsswitch.conf",
    ...docs.map((d) => `/usr/share/doc/${d}/copyright`),
  ];
}

const PASSWD = [
  "root:x:0:0:root:/root:/sbin/nologin",
  `nonroot:x:${SERVICE_UID}:${SERVICE_UID}:nonroot:/nonexistent:/sbin/nologin`,
  "",
].join("\n");
const GROUP = ["root:x:0:", `nonroot:x:${SERVICE_UID}:`, ""].join("\n");

function dockerfileText(service: Service): string {
  return [
    "# Generated by images/service.ts.",
    "FROM scratch",
    "COPY rootfs/ /",
    `COPY node/ ${OPT}/node/`,
    `COPY ${service}/ ${OPT}/${service}/`,
    `ENV PATH=${OPT}/node/bin:/usr/bin:/bin`,
    ...Object.entries(SERVICE_ENV[service]).map(([k, v]) => `ENV ${k}=${v}`),
    `USER ${SERVICE_UID}:${SERVICE_UID}`,
    `EXPOSE ${SERVICES[service].port}`,
    // tini reaps and forwards SIGTERM, on which both services drain (the operator also
    // releases its lease).
    'ENTRYPOINT ["/usr/bin/tini", "--"]',
    `CMD [${["node", ...SERVICE_NODE_FLAGS[service], serviceMain(service)].map((a) => `"${a}"`).join(", ")}]`,
    "",
  ].join("\n");
}

interface Inputs {
  recipe: ReturnType<typeof rootfsRecipe>;
  files: string[];
  nodeBinary: string;
  bundle: Uint8Array;
  dockerfile: string;
  hash: string;
}

async function collectInputs(service: Service): Promise<Inputs> {
  const recipe = rootfsRecipe(await aptMirror());
  const files = rootfsFiles();
  const { nodeBinary } = await nodeAndNpm();
  const bundle = await bundleForNode(join(repoRoot, SERVICES[service].entry), `${service}.mjs`);
  const dockerfile = dockerfileText(service);
  const h = createHash("sha256");
  const part = (name: string, data: string | Uint8Array) =>
    h.update(`${name}\0${data.length}\0`).update(data);
  part("rootfs", rootfsKey(recipe));
  part("files", files.join("\n"));
  part("node", await sha256File(nodeBinary));
  part("bundle", bundle);
  part("passwd", PASSWD + GROUP);
  part("dockerfile", dockerfile);
  return { recipe, files, nodeBinary, bundle, dockerfile, hash: h.digest("hex") };
}

/** The tag the current sources make (`sandpit-<service>:<12 hex>`), without asking Docker. */
export async function serviceImageTag(service: Service): Promise<string> {
  return `${imageRepo(service)}:${(await collectInputs(service)).hash.slice(0, 12)}`;
}

/**
 * Returns the service's image for the current sources, building it only when no image has that
 * tag; `sandpit-<service>:latest` is moved to it. Cold (rootfs tarball cached by the sandbox
 * image): seconds. Serialised with sandbox image builds by the same lock.
 */
export async function ensureServiceImage(
  service: Service,
  opts: EnsureServiceImageOptions = {},
): Promise<EnsuredImage> {
  const started = Date.now();
  const log = opts.log ?? (() => undefined);
  const docker = opts.docker ?? defaultDocker();
  const cacheDir = sandpitCacheDir();
  const repo = imageRepo(service);
  return withBuildLock(`${service} image build`, log, async () => {
    const inputs = await collectInputs(service);
    const tag = `${repo}:${inputs.hash.slice(0, 12)}`;
    let built = false;
    if (await imageExists(docker, tag)) {
      log(`${tag} is up to date`);
    } else {
      const rootfsTar = await ensureRootfsTar(inputs.recipe, cacheDir, log);
      await buildImage(service, docker, inputs, rootfsTar, tag, cacheDir, log);
      built = true;
    }
    await docker.getImage(tag).tag({ repo, tag: "latest" });
    return { tag, built, seconds: (Date.now() - started) / 1000 };
  });
}

async function buildImage(
  service: Service,
  docker: Docker,
  inputs: Inputs,
  rootfsTar: string,
  tag: string,
  cacheDir: string,
  log: (line: string) => void,
): Promise<void> {
  const ctx = join(cacheDir, `${service}-context-${process.pid}-${randomBytes(4).toString("hex")}`);
  try {
    const root = join(ctx, "rootfs");
    await mkdir(root, { recursive: true });
    const members = membersFor(await listTar(rootfsTar), inputs.files);
    await run("tar", ["-xf", rootfsTar, "-C", root, "--no-recursion", "--", ...members], {
      timeout: 5 * 60_000,
    });
    await mkdir(join(root, "tmp"));
    await chmod(join(root, "tmp"), 0o1777);
    await writeFile(join(root, "etc", "passwd"), PASSWD);
    await writeFile(join(root, "etc", "group"), GROUP);
    await mkdir(join(ctx, "node", "bin"), { recursive: true });
    await linkOrCopy(inputs.nodeBinary, join(ctx, "node", "bin", "node"));
    await mkdir(join(ctx, service));
    await writeFile(join(ctx, service, `${service}.mjs`), inputs.bundle);
    await writeFile(join(ctx, "Dockerfile"), inputs.dockerfile);
    await dockerBuild(docker, ctx, tag, { title: imageRepo(service), inputs: inputs.hash }, log);
  } finally {
    await rm(ctx, { recursive: true, force: true });
  }
}

interface TarEntry {
  type: string;
  /** Symlink target, or the member a hard link points to. */
  target?: string;
}

/** The rootfs tarball's members, by path without the leading `./`. */
async function listTar(tarPath: string): Promise<Map<string, TarEntry>> {
  const { stdout } = await run("tar", ["--quoting-style=literal", "-tvf", tarPath], {
    maxBuffer: 256 << 20,
    timeout: 5 * 60_000,
  });
  const entries = new Map<string, TarEntry>();
  for (const line of stdout.split("\n")) {
    // "lrwxrwxrwx 0/0 0 2026-12-02 13:58 ./lib -> usr/lib"
    const m = /^(\S)\S*\s+\S+\s+\d+\s+\S+\s+\S+\s+(.*)$/.exec(line);
    if (!m) continue;
    const type = m[1]!;
    const rest = m[2]!;
    const sep = type === "l" ? " -> " : type === "h" ? " link to " : undefined;
    const at = sep ? rest.indexOf(sep) : -1;
    const name = at >= 0 ? rest.slice(0, at) : rest;
    const target = at >= 0 && sep ? rest.slice(at + sep.length) : undefined;
    entries.set(clean(name), { type, ...(target ? { target } : {}) });
  }
  return entries;
}

const clean = (p: string) => posix.normalize(p.replace(/^\.?\/+/, "")).replace(/\/$/, "");

/**
 * The tar members to extract so that each path in `wanted` resolves in the extracted tree as it
 * does in the rootfs: the file itself and every symlink met on the way (`/lib64` → `usr/lib64`,
 * `libstdc++.so.6` → `libstdc++.so.6.0.30`, …), as `./`-prefixed member names.
 */
export function membersFor(entries: Map<string, TarEntry>, wanted: string[]): string[] {
  const members = new Set<string>();
  for (const path of wanted) {
    let parts = clean(path).split("/");
    let hops = 0;
    let i = 0;
    while (i < parts.length) {
      const here = parts.slice(0, i + 1).join("/");
      const e = entries.get(here);
      if (!e) throw new Error(`the rootfs has no ${here} (looking for ${path})`);
      if (e.type === "l" && e.target) {
        if (++hops > 40) throw new Error(`too many symlinks resolving ${path}`);
        members.add(here);
        const base = e.target.startsWith("/") ? "" : posix.dirname(here);
        parts = clean(posix.join(base, e.target, ...parts.slice(i + 1))).split("/");
        i = 0;
        continue;
      }
      if (i === parts.length - 1) {
        if (e.type === "d") throw new Error(`${path} is a directory in the rootfs`);
        members.add(here);
        if (e.type === "h" && e.target) members.add(clean(e.target));
      }
      i++;
    }
  }
  return [...members].sort().map((m) => `./${m}`);
}

/** CLI: `service.ts operator|provisioner|egress`. */
await imageCli(import.meta.url, (log) => {
  const service = process.argv[2];
  if (!service || !Object.hasOwn(SERVICES, service))
    throw new Error(`usage: service.ts ${Object.keys(SERVICES).join("|")}`);
  return ensureServiceImage(service as Service, { log });
});
