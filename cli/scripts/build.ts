#!/usr/bin/env node
/**
 * Builds @sandpit/cli's published form into cli/dist (the repository runs cli/src directly;
 * package.json's publishConfig points the packed package at dist, see scripts/pack.ts):
 *
 * - The CLI, bundled by esbuild: dist/main.js is the `sandpit` bin (it turns on Node's compile
 *   cache, then imports dist/run.js), dist/run.js is the whole command line in one file, the
 *   CLI's own modules and commander included. Every `sandpit` invocation is a fresh process
 *   whose start-up is mostly loading modules, and a module costs more to find and instantiate
 *   than to compile. What the CLI loads only on demand stays out of run.js: the MCP server's
 *   own code is a chunk beside it, and npm packages (the SDK, the MCP SDK, zod) are imported
 *   from node_modules as before, so `@sandpit/sdk` is the one copy an app shares (one
 *   SandboxError class for `instanceof`).
 * - `sandpit serve` (provisioner/src/serve/main.ts), bundled by esbuild into dist/serve.js, and
 *   the CLI's `@sandpit/provisioner/serve` import pointed at it. The provisioner, and the
 *   parts of the operator and sandboxd it imports, are private workspaces: they reach users
 *   inside this one file rather than as packages of their own.
 *
 * In both bundles every npm package but commander stays outside, for npm to install: the build
 * fails unless each one imported is a dependency of the CLI, or for `@sandpit/sdk/...` an export
 * the SDK publishes, so the published manifest is complete.
 *
 *   node cli/scripts/build.ts
 */
import { readFile, rm } from "node:fs/promises";
import { builtinModules } from "node:module";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { build, type BuildOptions, type Metafile } from "esbuild";

const cliDir = fileURLToPath(new URL("../", import.meta.url));
const repoRoot = join(cliDir, "..");
const dist = join(cliDir, "dist");

/** The workspaces that are never published: bundled into serve.js instead of imported. */
const PRIVATE = /^@sandpit\/(provisioner|operator|sandboxd)(\/|$)/;

/** Where the CLI's import of `@sandpit/provisioner/serve` lands: beside run.js and its chunks. */
const SERVE_FILE = "./serve.js";

/** npm packages bundled into run.js: small, and loaded by every invocation. */
const BUNDLED = new Set(["commander"]);

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

const COMMON = {
  bundle: true,
  platform: "node",
  format: "esm",
  target: "node22",
  sourcemap: true,
  metafile: true,
  legalComments: "none",
  logLevel: "warning",
} as const satisfies BuildOptions;

/** Bare specifiers stay imports, except the private workspaces and the packages in `bundled`. */
function npmPackagesExternal(bundled: (specifier: string) => boolean): BuildOptions["plugins"] {
  return [
    {
      name: "npm-packages-external",
      setup(b) {
        b.onResolve({ filter: /^[^./]/ }, (args) =>
          bundled(args.path) ? undefined : { path: args.path, external: true },
        );
      },
    },
  ];
}

/** Fails the build when `file` imports what the published CLI does not provide. */
async function checkImports(file: string, meta: Metafile): Promise<void> {
  const cli = JSON.parse(await readFile(join(cliDir, "package.json"), "utf8")) as {
    dependencies: Record<string, string>;
  };
  const sdk = JSON.parse(await readFile(join(repoRoot, "sdk", "package.json"), "utf8")) as {
    publishConfig: { exports: Record<string, unknown> };
  };
  const missing = unresolvedImports(
    externalImports(meta).filter((spec) => spec !== SERVE_FILE),
    cli.dependencies,
    sdk.publishConfig.exports,
  );
  if (missing.length)
    throw new Error(
      `${file} imports what the published CLI does not provide: ${missing.join(", ")} ` +
        "(add the package to cli/package.json's dependencies, or the subpath to the SDK's publishConfig.exports)",
    );
}

async function bundleServe(): Promise<void> {
  const result = await build({
    ...COMMON,
    entryPoints: [join(repoRoot, "provisioner", "src", "serve", "main.ts")],
    outfile: join(dist, "serve.js"),
    plugins: npmPackagesExternal((spec) => PRIVATE.test(spec)),
  });
  await checkImports("dist/serve.js", result.metafile);
}

/**
 * dist/main.js and dist/run.js; chunks (what loads on demand) beside them, at the same depth, so
 * version.ts's `../package.json` is the package's manifest from any of them.
 */
async function bundleCli(): Promise<void> {
  const plugins = npmPackagesExternal((spec) => BUNDLED.has(packageOf(spec)));
  plugins!.unshift({
    name: "serve-beside",
    setup(b) {
      b.onResolve({ filter: /^@sandpit\/provisioner\/serve$/ }, () => ({
        path: SERVE_FILE,
        external: true,
      }));
    },
  });
  const result = await build({
    ...COMMON,
    entryPoints: [join(cliDir, "src", "main.ts"), join(cliDir, "src", "run.ts")],
    outdir: dist,
    splitting: true,
    chunkNames: "[name]-[hash]",
    plugins,
  });
  await checkImports("dist/main.js", result.metafile);
}

export async function buildCli(): Promise<void> {
  await rm(dist, { recursive: true, force: true });
  await bundleCli();
  await bundleServe();
}

if (import.meta.main) await buildCli();
