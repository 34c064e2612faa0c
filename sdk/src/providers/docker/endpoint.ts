/** Reaching a container's sandboxd at the endpoint the engine reports for it. */
import type { HealthResponse } from "@sandpit/sandboxd/protocol";
import { SandboxdClient } from "../../sandboxd-client.ts";
import type { ContainerInfo } from "./runtime.ts";

/** A client for sandboxd at a container's endpoint ("host:port" or "unix:/path"). */
export function clientAt(endpoint: string, token: string): SandboxdClient {
  const socketPath = endpoint.startsWith("unix:") ? endpoint.slice(5) : undefined;
  return new SandboxdClient({
    baseUrl: socketPath ? "http://sandboxd" : `http://${endpoint}`,
    socketPath,
    token,
  });
}

/** sandboxd's unauthenticated /healthz; null when it does not answer (or has no endpoint). */
export async function health(c: ContainerInfo): Promise<HealthResponse | null> {
  if (!c.endpoint) return null;
  const client = clientAt(c.endpoint, "-");
  try {
    return await client.health(2_000);
  } catch {
    return null;
  } finally {
    await client.close();
  }
}
