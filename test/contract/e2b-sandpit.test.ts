/**
 * The contract suite on our own SDK's `e2b` provider pointed at Sandpit's E2B-compatible API
 * (docs/e2b.md): a second, independent client of the same API the official SDKs' conformance
 * suites run against (test/provisioner/e2b-sdk.test.ts). The real operator and provisioner on
 * the cluster; the provider knows nothing of Sandpit but the URLs and the key.
 *
 * `getHost` is host-based routing (`<port>-<sandboxId>.<domain>`): the provisioner is given an
 * E2B domain, and this file resolves that domain's names to the provisioner's address, as the
 * wildcard DNS record in front of the chart's Ingress would.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupOptions } from "node:dns";
import { randomBytes } from "node:crypto";
import { Agent, setGlobalDispatcher } from "undici";
import { inject } from "vitest";
import { E2BProvider } from "@sandpit/sdk/e2b";
import { startStack } from "../cluster/harness.ts";
import { contractSuite } from "./suite.ts";

const DOMAIN = "e2b.sandpit.test";
const KEY = "e2b-contract-key-0123456789abcdefgh";

type LookupCallback = (
  err: NodeJS.ErrnoException | null,
  address: string | LookupAddress[],
  family?: number,
) => void;

/** `*.<DOMAIN>` is this machine (where the provisioner listens); any other name, the system's. */
function lookup(hostname: string, options: LookupOptions, callback: LookupCallback): void {
  if (!hostname.endsWith(`.${DOMAIN}`)) {
    dnsLookup(hostname, options, callback as never);
    return;
  }
  if (options.all) callback(null, [{ address: "127.0.0.1", family: 4 }]);
  else callback(null, "127.0.0.1", 4);
}

contractSuite(
  "e2b provider against Sandpit's /e2b API",
  async () => {
    setGlobalDispatcher(new Agent({ connect: { lookup } }));
    const stack = await startStack({
      kubeconfig: inject("kubeconfig"),
      image: inject("clusterSandboxImage"),
      prefix: "e2b-contract",
      keys: [{ key: KEY, tenant: "e2b-contract", maxSandboxes: 50 }],
      env: {
        SANDPIT_E2B_TOKEN_SECRET: randomBytes(32).toString("base64url"),
        SANDPIT_E2B_DOMAIN: DOMAIN,
      },
    });
    const e2b = `${stack.prov.url}/e2b`;
    const provider = new E2BProvider({
      apiKey: KEY,
      apiUrl: e2b,
      sandboxUrl: e2b,
      domain: DOMAIN,
      // No TLS in front of the provisioner here: a sandbox's port is its host on the
      // provisioner's port.
      hostTemplate: `{host}:${new URL(stack.prov.url).port}`,
    });
    return { provider, teardown: stack.stop };
  },
  {
    lacks: [
      // envd streams a process's output from the moment a client connects (the translator
      // follows from then too: commands.connect offset "end", pty.connect replay false), and
      // forgets a process once it exits.
      "replay",
      "ptyReplay",
      // "limits" it has: sandboxd's per-sandbox limits, answered as E2B's API answers no room
      // (Connect's resource_exhausted, the code interpreter's 507), which the provider reports
      // as CAPACITY_EXCEEDED.
    ],
    platform: {
      provider: "e2b",
      // timeout -> the Sandbox's ttlSeconds.
      ttl: true,
      // The e2b provider has no idle timeout to send (autoPause is E2B's nearest).
      idleTimeout: false,
      // Compute is the template's (the pool's) through E2B.
      cpu: false,
      memory: false,
      disk: false,
      // A template is a SandboxPool.
      template: true,
      // allow_internet_access: false -> network.egress: Deny.
      networkDeny: true,
      networkInternet: true,
      // Sandpit refuses E2B's network allow lists (400 "not supported by Sandpit").
      networkAllow: false,
      // E2B volumes are not wired to mounts.
      mounts: false,
      expiresAt: true,
      // Lifetimes are at least 60 s on Kubernetes.
      ttlEnforced: false,
      memoryEnforced: false,
      isolationVisible: false,
    },
  },
);
