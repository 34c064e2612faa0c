/**
 * The warm create's own part (docs/architecture.md, "The warm create"): which creates may take
 * a reserved warm pod, and handing that pod to the new sandbox (sandboxd's /v1/init with the
 * pod's own warm token, giving it the sandbox's derived token, environment and packages) without a
 * write to the API server. The operator completes ownership, Secret, Service and status later.
 */
import { type InitRequest, SANDBOXD_PORT } from "@sandpit/sandboxd/protocol";
import {
  RESERVATION,
  type Sandbox,
  type SandboxPool,
  derivedToken,
  faultPoint,
  faultStall,
  packageSpec,
} from "@sandpit/operator/api";
import { isSandboxError } from "@sandpit/sdk/errors";
import { SandboxdClient } from "@sandpit/sdk/sandboxd-client";
import type { Reserved, Reservations } from "./reservations.ts";
import type { CreateInput } from "./store.ts";

/** The longest a reserved pod's /v1/init may take before the operator is left to finish it. */
const INIT_TIMEOUT_MS = 15_000;
const PACKAGES_INIT_TIMEOUT_MS = 10 * 60_000;

/** What the provisioner knows of a sandbox it answered for before the operator reported it. */
export interface FastReady {
  uid: string;
  podName: string;
  endpoint: string;
  token: string;
  /** The operator had initialised the pod for this sandbox before the provisioner got to it. */
  operatorFirst: boolean;
}

/**
 * Whether a create may take a reserved warm pod: it changes nothing a pod is made of (limits,
 * image, volumes: those the pod has already) nor its network (the warm pod carries the
 * template's network key, and its code runs as soon as the create answers, before the
 * operator's claim could give it another), and the pool has room (a sandbox over the cap would
 * be stopped by the operator's admission).
 */
export function fastEligible(input: CreateInput, pool: SandboxPool | undefined): boolean {
  if (!pool || pool.spec.warm <= 0) return false;
  const s = input.spec;
  if (s.resources || s.network || s.image || s.mounts || s.storage || s.emptyDirs) return false;
  if (s.runtimeClassName || s.lifecycle?.suspended) return false;
  return (pool.status?.active ?? 0) < pool.spec.maxActive;
}

/** The annotations that name the reserved pod on the Sandbox (the one write is the claim). */
export function reservedAnnotations(r: Reserved, holder: string): Record<string, string> {
  return { [RESERVATION.pod]: r.podName, [RESERVATION.holder]: holder };
}

/**
 * Initialises the reserved pod's sandboxd for `sbx` (rejects when it cannot: the caller then
 * leaves the pod to the operator).
 */
export async function initReserved(
  reservations: Reservations,
  r: Reserved,
  sbx: Sandbox,
  pool: SandboxPool,
): Promise<FastReady> {
  faultPoint("provisioner-sandbox-created");
  await faultStall("provisioner-sandbox-created");
  // The pod's token first: it reads the key again if the pod was made under a newer one.
  const warm = await reservations.warmToken(r);
  const key = await reservations.tokenKey();
  const token = derivedToken(key, sbx.metadata.uid!);
  const t = pool.spec.template;
  const env: Record<string, string> = {};
  for (const e of [...(t.env ?? []), ...(sbx.spec.env ?? [])]) env[e.name] = e.value;
  const language = sbx.spec.language ?? t.language ?? "python";
  // The template's packages are on the pod already; the sandbox's own list replaces them.
  const packages = sbx.spec.packages?.map((p) => packageSpec(language, p)) ?? [];
  const endpoint = `${r.podIP}:${SANDBOXD_PORT}`;
  const body = { token, env, packages, language };
  // Without packages an init is a few writes in sandboxd: a pod that has not answered by then
  // is left to the operator rather than holding the caller's create.
  const timeoutMs = packages.length ? PACKAGES_INIT_TIMEOUT_MS : INIT_TIMEOUT_MS;
  let operatorFirst = false;
  try {
    await initWith(endpoint, warm, body, timeoutMs);
  } catch (err) {
    // The operator saw the Sandbox first and initialised the pod for it already: the pod then
    // answers to this sandbox's own token (derived from its uid, so to no other sandbox's).
    if (!isSandboxError(err, "UNAUTHORIZED")) throw err;
    await initWith(endpoint, token, body, timeoutMs);
    operatorFirst = true;
  }
  faultPoint("provisioner-initialised");
  return { uid: sbx.metadata.uid!, podName: r.podName, endpoint, token, operatorFirst };
}

/** One /v1/init call on a connection of its own (closed after: it is for this one call). */
async function initWith(
  endpoint: string,
  bearer: string,
  body: InitRequest,
  timeoutMs: number,
): Promise<void> {
  const client = new SandboxdClient({ baseUrl: `http://${endpoint}`, token: bearer });
  try {
    await client.init(body, timeoutMs);
  } finally {
    await client.destroy();
  }
}
