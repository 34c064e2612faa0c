/**
 * The provider SDKs (e2b, @e2b/code-interpreter, @daytonaio/sdk, dockerode) are optional peer
 * dependencies: an app installs only those of the providers it uses. A provider's module imports
 * its SDK, so loading that module is where a missing one shows: this turns Node's "cannot find
 * package" into a SandboxError that says what to install.
 */
import { SandboxError } from "./errors.ts";

/**
 * Imports a provider's implementation, which needs `packages`. NOT_SUPPORTED when one of them
 * is not installed: this installation cannot run the provider until it is.
 */
export async function loadWithPackages<T>(
  provider: string,
  packages: readonly string[],
  load: () => Promise<T>,
): Promise<T> {
  try {
    return await load();
  } catch (err) {
    if (!packages.some((p) => isMissingPackage(err, p))) throw err;
    throw new SandboxError(
      `the ${provider} provider needs ${packages.join(" and ")}, not installed here: ` +
        `npm install ${packages.join(" ")}`,
      "NOT_SUPPORTED",
      err,
    );
  }
}

/** Node's error for an import of a package that is not installed (or a file of it missing). */
function isMissingPackage(err: unknown, pkg: string): boolean {
  const e = err as { code?: unknown; message?: unknown } | null;
  return (
    typeof e?.message === "string" &&
    (e.code === "ERR_MODULE_NOT_FOUND" || e.code === "MODULE_NOT_FOUND") &&
    e.message.includes(`'${pkg}'`)
  );
}
