/**
 * How to reach a sandboxd-backed sandbox's sandboxd directly: its address (a URL, or a unix
 * socket) and its bearer token. For a server that forwards requests to the sandbox itself
 * (`sandpit serve` proxies sandboxd's native API, streams and upgrades included) instead of
 * going through the SDK's client. The token grants everything sandboxd serves: keep it on the
 * server side.
 */
import { SandboxError } from "./errors.ts";
import { SandboxdInstance, type SandboxDefaults } from "./sandboxd-instance.ts";
import type { SandboxdConnection } from "./sandboxd-client.ts";
import type { SandboxInstance } from "./types.ts";

export type { SandboxdConnection, SandboxDefaults };

/**
 * The instance's sandboxd connection, starting the sandbox first if it was paused (as any call
 * on it would). NOT_SUPPORTED for instances not served by sandboxd (E2B, Daytona).
 */
export function sandboxdConnection(instance: SandboxInstance): Promise<SandboxdConnection> {
  if (!(instance instanceof SandboxdInstance))
    throw new SandboxError(
      `sandbox ${instance.sandboxId} is not served by sandboxd: no direct connection`,
      "NOT_SUPPORTED",
    );
  return instance.sandboxdConnection();
}

/**
 * What a `SandboxdInstance` over `sandboxdConnection(instance)` needs to act as this one: the
 * defaults (working directory, timeout, language) its provider read when it reached the
 * sandbox. `sandpit exec` keeps both so its next run needs neither the provider nor its config.
 */
export function sandboxdDefaults(instance: SandboxInstance): SandboxDefaults {
  if (!(instance instanceof SandboxdInstance))
    throw new SandboxError(
      `sandbox ${instance.sandboxId} is not served by sandboxd`,
      "NOT_SUPPORTED",
    );
  return instance.sandboxdDefaults();
}
