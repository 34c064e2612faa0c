#!/usr/bin/env node
/**
 * Packs the published workspaces into npm tarballs, the files `npm publish` would upload: each
 * is built (its `build` script), then staged with its package.json as published, then packed.
 * Prints each tarball's path on its own line, each package after those it depends on (the
 * order to publish them in).
 *
 *   node scripts/pack.ts --out DIR [WORKSPACE...]     default: every workspace with publishConfig
 *
 * A workspace is published when its package.json has `publishConfig`, `files` and (if it has
 * anything to compile) a `build` script that writes what `files` lists. In the repository its
 * `exports`/`bin` point at `src/*.ts`, which Node runs directly; the published manifest takes
 * `exports`, `bin`, `main` and `types` from `publishConfig` (pnpm's convention), which point at
 * the built files, and drops `scripts`, `devDependencies` and `publishConfig`.
 */
import { execFileSync } from "node:child_process";
import { cp, mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { withLock } from "../images/lock.ts";

const repoRoot = fileURLToPath(new URL("../", import.meta.url));
/** Fields of publishConfig that replace the manifest's own when published. */
const PUBLISHED_FIELDS = ["exports", "bin", "main", "types"] as const;

export interface Manifest {
  name: string;
  version: string;
  private?: boolean;
  files?: string[];
  dependencies?: Record<string, string>;
  scripts?: Record<string, string>;
  publishConfig?: Record<string, unknown>;
  [field: string]: unknown;
}

async function manifestOf(workspace: string): Promise<Manifest> {
  return JSON.parse(await readFile(join(repoRoot, workspace, "package.json"), "utf8")) as Manifest;
}

/**
 * The workspaces that publish, each after the ones it depends on (the order to publish them
 * in); otherwise in the root manifest's order.
 */
export async function publishedWorkspaces(): Promise<string[]> {
  const root = JSON.parse(await readFile(join(repoRoot, "package.json"), "utf8")) as {
    workspaces: string[];
  };
  const published = new Map<string, Manifest>();
  for (const ws of root.workspaces) {
    const m = await manifestOf(ws);
    if (m.publishConfig) published.set(ws, m);
  }
  return dependencyOrder(published);
}

/**
 * `workspaces` (directory → manifest) ordered so that each comes after the workspaces among
 * them whose package it depends on. Throws on a cycle.
 */
export function dependencyOrder(workspaces: Map<string, Manifest>): string[] {
  const dirOf = new Map([...workspaces].map(([dir, m]) => [m.name, dir]));
  const out: string[] = [];
  const visiting = new Set<string>();
  const visit = (dir: string) => {
    if (out.includes(dir)) return;
    if (visiting.has(dir))
      throw new Error(`${dir}: its dependencies between workspaces form a cycle`);
    visiting.add(dir);
    for (const dep of Object.keys(workspaces.get(dir)!.dependencies ?? {}))
      if (dirOf.has(dep)) visit(dirOf.get(dep)!);
    visiting.delete(dir);
    out.push(dir);
  };
  for (const dir of workspaces.keys()) visit(dir);
  return out;
}

/**
 * Throws when the published manifest depends on one of the repository's packages that is not
 * published (`private`, or without publishConfig): installing it would fail. Such code is
 * bundled in by the workspace's build instead, or moved to devDependencies.
 */
export async function checkPublishedDependencies(workspace: string, m: Manifest): Promise<void> {
  const unpublished: string[] = [];
  const root = JSON.parse(await readFile(join(repoRoot, "package.json"), "utf8")) as {
    workspaces: string[];
  };
  for (const ws of root.workspaces) {
    const other = await manifestOf(ws);
    if (other.name in (m.dependencies ?? {}) && (other.private || !other.publishConfig))
      unpublished.push(other.name);
  }
  if (unpublished.length)
    throw new Error(
      `${workspace}: depends on ${unpublished.join(", ")}, which ${unpublished.length > 1 ? "are" : "is"} not published`,
    );
}

/** The manifest as published: publishConfig's fields in place of the repository's. */
export function publishedManifest(m: Manifest): Manifest {
  const { publishConfig = {}, scripts: _s, devDependencies: _d, ...rest } = m;
  const out: Manifest = { ...rest };
  for (const field of PUBLISHED_FIELDS)
    if (field in publishConfig) out[field] = publishConfig[field];
  const leftover = Object.keys(publishConfig).filter(
    (k) => !(PUBLISHED_FIELDS as readonly string[]).includes(k),
  );
  if (leftover.length)
    out.publishConfig = Object.fromEntries(leftover.map((k) => [k, publishConfig[k]]));
  return out;
}

/** Builds, stages and packs one workspace into `outDir`; returns the tarball's path. */
export async function packWorkspace(workspace: string, outDir: string): Promise<string> {
  const m = await manifestOf(workspace);
  const { files } = m;
  if (!m.publishConfig || !files)
    throw new Error(`${workspace}: not published (no publishConfig or files in package.json)`);
  const published = publishedManifest(m);
  await checkPublishedDependencies(workspace, published);
  const dir = join(repoRoot, workspace);
  // Builds write into the workspace (dist/): two packs at once (two test files, say) take turns.
  return withLock(
    join(repoRoot, "node_modules", ".cache", "sandpit", `pack-${workspace}.lock`),
    { timeoutMs: 600_000, what: `${workspace} build` },
    () => buildAndPack(dir, m, files, published, outDir),
  );
}

async function buildAndPack(
  dir: string,
  m: Manifest,
  files: string[],
  published: Manifest,
  outDir: string,
): Promise<string> {
  // The build's own output goes to stderr: stdout carries only the tarball paths.
  if (m.scripts?.build)
    execFileSync("npm", ["run", "build"], { cwd: dir, stdio: ["ignore", 2, 2] });
  const stage = await mkdtemp(join(tmpdir(), "sandpit-pack-"));
  try {
    for (const f of [...files, "README.md"])
      await cp(join(dir, f), join(stage, f), { recursive: true, force: true }).catch(
        (err: NodeJS.ErrnoException) => {
          if (!(f === "README.md" && err.code === "ENOENT")) throw err;
        },
      );
    await writeFile(join(stage, "package.json"), JSON.stringify(published, null, 2) + "\n");
    const packed = JSON.parse(
      execFileSync("npm", ["pack", "--json", "--pack-destination", outDir], {
        cwd: stage,
        encoding: "utf8",
        stdio: ["ignore", "pipe", 2],
      }),
    ) as { filename: string }[];
    return join(outDir, packed[0]!.filename);
  } finally {
    await rm(stage, { recursive: true, force: true });
  }
}

if (import.meta.main) {
  const { values, positionals } = parseArgs({
    options: { out: { type: "string" } },
    allowPositionals: true,
  });
  if (!values.out) {
    process.stderr.write("usage: node scripts/pack.ts --out DIR [WORKSPACE...]\n");
    process.exit(2);
  }
  const outDir = resolve(values.out);
  await mkdir(outDir, { recursive: true });
  for (const ws of positionals.length ? positionals : await publishedWorkspaces())
    process.stdout.write((await packWorkspace(ws, outDir)) + "\n");
}
