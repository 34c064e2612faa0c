#!/usr/bin/env node
/**
 * Builds @sandpit/cli's published form into cli/dist (the repository runs cli/src directly;
 * package.json's publishConfig points the packed package at dist, see scripts/pack.ts):
 *
 * - tsc (cli/tsconfig.build.json): cli/src as ES modules for Node 22, with source maps;
 *   dist/main.js is the `sandpit` bin.
 * - `sandpit serve` (provisioner/src/serve/main.ts), bundled by esbuild into dist/serve.js, and
 *   the CLI's `@sandpit/provisioner/serve` import made relative to it. The provisioner, and the
 *   parts of the operator and sandboxd it imports, are private workspaces: they reach users
 *   inside this one file rather than as packages of their own. Every npm package stays outside
 *   the bundle, for npm to install (and to share with the SDK: one SandboxError class): the build
 *   fails unless each one it imports is a dependency of the CLI, or for `@sandpit/sdk/...` an
 *   export the SDK publishes, so the published manifest is complete.
 *
 *   node cli/scripts/build.ts
 */
import { spawnSync } from "node:child_process";
import { readdir, readFile, rm, writeFile } from "node:fs/promises";
import { builtinModules, createRequire } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type Metafile } from "esbuild";
import { rewriteSpecifiers } from "../../sdk/scripts/build.ts";

const cliDir = fileURLToPath(new URL("../", import.meta.url));
const repoRoot = join(cliDir, "..");
const dist = join(cliDir, "dist");

/** The workspaces that are never published: bundled into serve.js instead of imported. */
const PRIVATE = /^@sandpit\/(provisioner|operator|sandboxd)(\/|$)/;

/** Where the CLI's import of serve lands in dist. */
const SERVE_TARGET = { "@sandpit/provisioner/serve": "serve.js" };

/** A bare specifier's package: `@scope/name` or `name`. */
export function packageOf(specifier: string): string {
  const parts = specifier.split("/");
  return specifier.startsWith("@") ? parts.slice(0, 2).join("/") : parts[0]!;
}

/**
 * What the bundle imports from outside itself that the published CLI cannot resolve: a package
 * that is not among `dependencies`, or an `@sandpit/sdk` subpath the SDK does not publish.
 * Node's built-ins are always there.
 */
export function unresolvedImports(
  imports: string[],
  dependencies: Record<string, string>,
  sdkExports: Record<string, unknown>,
): string[] {
  return imports.filter((spec) => {
    if (spec.startsWith("node:") || builtinModules.includes(spec)) return false;
    const pkg = packageOf(spec);
    if (!(pkg in dependencies)) return true;
    return pkg === "@sandpit/sdk" && !(`.${spec.slice(pkg.length)}` in sdkExports);
  });
}

/** The bare specifiers a bundle's metafile says it leaves to Node, sorted. */
function externalImports(meta: Metafile): string[] {
  const out = new Set<string>();
  for (const o of Object.values(meta.outputs))
    for (const i of o.imports) if (i.external) out.add(i.path);
  return [...out].sort();
}

async function bundleServe(): Promise<void> {
  const result = await build({
    entryPoints: [join(repoRoot, "provisioner", "src", "serve", "main.ts")],
    outfile: join(dist, "serve.js"),
    bundle: true,
    platform: "node",
    format: "esm",
    target: "node22",
    sourcemap: true,
    metafile: true,
    legalComments: "none",
    logLevel: "warning",
    plugins: [
      {
        name: "npm-packages-external",
        setup(b) {
          b.onResolve({ filter: /^[^./]/ }, (args) =>
            PRIVATE.test(args.path) ? undefined : { path: args.path, external: true },
          );
        },
      },
    ],
  });
  const cli = JSON.parse(await readFile(join(cliDir, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
  };
  const sdk = JSON.parse(await readFile(join(repoRoot, "sdk", "package.json"), "utf8")) as {
    publishConfig: { exports: Record<string, unknown> };
  };
  const missing = unresolvedImports(
    externalImports(result.metafile),
    cli.dependencies,
    sdk.publishConfig.exports,
  );
  if (missing.length)
    throw new Error(
      `dist/serve.js imports what the published CLI does not provide: ${missing.join(", ")} ` +
        "(add the package to cli/package.json's dependencies, or the subpath to the SDK's publishConfig.exports)",
    );
}

export async function buildCli(): Promise<void> {
  await rm(dist, { recursive: true, force: true });
  const tsc = createRequire(import.meta.url).resolve("typescript/bin/tsc");
  const r = spawnSync(process.execPath, [tsc, "-p", join(cliDir, "tsconfig.build.json")], {
    stdio: "inherit",
  });
  if (r.status !== 0) throw new Error(`tsc failed (exit ${r.status})`);
  await bundleServe();
  for (const file of (await readdir(dist, { recursive: true })).filter((f) => f.endsWith(".js"))) {
    const path = join(dist, file);
    const text = await readFile(path, "utf8");
    const out = rewriteSpecifiers(text, path, dist, SERVE_TARGET);
    if (out !== text) await writeFile(path, out);
  }
}

if (import.meta.main) await buildCli();
