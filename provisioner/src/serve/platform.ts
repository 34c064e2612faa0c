/**
 * What `sandpit serve` honours of a create's platform options on its backend, and the refusal
 * of the rest. Every option the native API (and the E2B API) accepts is either carried out or
 * refused here, before anything is made, with NOT_SUPPORTED (a 400: the request asks for what
 * this server cannot do) naming the option and what serve does support on this backend; none is
 * silently dropped.
 *
 * How each is carried out (./provider-store.ts): `ttlSeconds` by serve's reaper and the
 * provider's own lifetime (so the backend holds the end across a restart); `idleTimeoutSeconds`
 * by serve's reaper alone (only serve sees the traffic through its proxy); resources and
 * `network: "deny"` by the provider's create options of the same meaning.
 */
import { ApiError } from "../api/errors.ts";
import type { CreateInput } from "../sandboxes.ts";

export interface ServeSupport {
  backend: "docker" | "local";
  cpu: boolean;
  memory: boolean;
  /** resources.ephemeralStorage */
  disk: boolean;
  networkDeny: boolean;
}

/** Why an option is missing on a backend, for the refusal's message. */
const WHY: Record<ServeSupport["backend"], Partial<Record<keyof ServeSupport, string>>> = {
  local: {
    cpu: "local sandboxes are host processes, without a cgroup to limit them",
    memory: "local sandboxes are host processes, without a cgroup to limit them",
    disk: "a local sandbox's files are a directory of the host's filesystem",
    networkDeny: "it needs bubblewrap, which is not usable on this machine",
  },
  docker: {
    disk: "the Docker data volume's driver has no size limit",
  },
};

/** What serve supports on this backend, for the message. */
function supported(s: ServeSupport): string {
  return [
    "ttlSeconds",
    "idleTimeoutSeconds",
    ...(s.cpu ? ["resources.cpu"] : []),
    ...(s.memory ? ["resources.memory"] : []),
    ...(s.disk ? ["resources.ephemeralStorage"] : []),
    ...(s.networkDeny ? ['network "deny"'] : []),
    "labels",
    "packages",
    "env",
  ].join(", ");
}

/** Throws NOT_SUPPORTED (400) for the first option of `input` serve cannot carry out here. */
export function refuseUnsupported(s: ServeSupport, input: CreateInput): void {
  const refuse = (option: string, why: string) => {
    throw new ApiError(
      "NOT_SUPPORTED",
      `${option} is not supported by sandpit serve on the ${s.backend} backend (${why}); ` +
        `it supports: ${supported(s)}`,
      { status: 400 },
    );
  };
  if (input.pool)
    refuse(
      `pool "${input.pool}"`,
      s.backend === "docker"
        ? "it has no SandboxPools: every sandbox is made from the image serve was started with (--image)"
        : "it has no SandboxPools: every sandbox runs on this machine's system",
    );
  const r = input.spec.resources;
  const check = (asked: unknown, key: keyof ServeSupport, option: string) => {
    if (asked && !s[key]) refuse(option, WHY[s.backend][key] ?? "");
  };
  check(r?.cpu, "cpu", "resources.cpu");
  check(r?.memory, "memory", "resources.memory");
  check(r?.ephemeralStorage, "disk", "resources.ephemeralStorage");
  check(input.spec.network?.egress === "Deny", "networkDeny", 'network "deny"');
}
