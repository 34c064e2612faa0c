/**
 * What the E2B conformance suites run against: an E2B-speaking server given as the SDKs take it
 * (API URL, sandbox URL or domain, API key), plus what that server is known to lack. A lacked
 * feature's tests are reported as skipped with the reason, never silently left out.
 *
 * Both suites read the same target: the TypeScript suite (conformance.ts) as an object, the
 * Python suite (conformance_test.py) from the environment `targetEnv` builds, which is exactly
 * the E2B_* variables an unchanged E2B program reads, plus the suite's own SANDPIT_E2B_* ones.
 */

/** Features a target may lack; each names the tests it gates. */
export type Feature =
  /** pause, resume by connect, list by state=paused, auto-pause on timeout */
  | "pause"
  /** a second API key whose quota the suite can exhaust */
  | "quota"
  /** pandas and matplotlib importable in the code interpreter without installing them */
  | "richLibrariesPreinstalled"
  /** pip install from the package index inside a sandbox (to add pandas/matplotlib) */
  | "packageIndex"
  /** code cells in bash */
  | "bashCells"
  /** JavaScript/TypeScript cells by language (no context) giving the last expression's value */
  | "jsDefaultContexts"
  /** os.getcwd() in a context created with cwd under /home/user reports that /home/user path */
  | "homeCwd"
  /** the polled watcher (CreateWatcher/GetWatcherEvents) reports a write made right after a create */
  | "polledWatchWrites";

export interface E2BConnection {
  apiKey: string;
  /** E2B_API_URL: the control plane. */
  apiUrl?: string;
  /** E2B_SANDBOX_URL: the data plane, sandboxes told apart by the E2b-Sandbox-Id header. */
  sandboxUrl?: string;
  /** E2B_DOMAIN: with neither URL, the SDK reaches api.<domain> and <port>-<id>.<domain>. */
  domain?: string;
  /** A key allowed at most `maxSandboxes` sandboxes at once (the quota tests exhaust it). */
  quota?: { apiKey: string; maxSandboxes: number };
}

export interface E2BTarget {
  name: string;
  /** Lacked features and why (shown as the skip reason). */
  lacks: Partial<Record<Feature, string>>;
}

/** The connection options every SDK call takes (`Sandbox.create(opts)`, `Sandbox.list(opts)`). */
export function connectionOpts(c: E2BConnection, apiKey = c.apiKey) {
  return {
    apiKey,
    ...(c.apiUrl ? { apiUrl: c.apiUrl } : {}),
    ...(c.sandboxUrl ? { sandboxUrl: c.sandboxUrl } : {}),
    ...(c.domain ? { domain: c.domain } : {}),
  };
}

/** The environment of the Python suite: the SDKs' own variables and the suite's. */
export function targetEnv(t: E2BTarget, c: E2BConnection): Record<string, string> {
  return {
    E2B_API_KEY: c.apiKey,
    ...(c.apiUrl ? { E2B_API_URL: c.apiUrl } : {}),
    ...(c.sandboxUrl ? { E2B_SANDBOX_URL: c.sandboxUrl } : {}),
    ...(c.domain ? { E2B_DOMAIN: c.domain } : {}),
    ...(c.quota
      ? {
          SANDPIT_E2B_QUOTA_KEY: c.quota.apiKey,
          SANDPIT_E2B_QUOTA_MAX: String(c.quota.maxSandboxes),
        }
      : {}),
    SANDPIT_E2B_TARGET: t.name,
    SANDPIT_E2B_LACKS: JSON.stringify(t.lacks),
  };
}

/** The loopback fake (test/fakes/e2b.ts): both planes on one 127.0.0.1 port. */
export const FAKE_TARGET: E2BTarget = {
  name: "loopback E2B fake",
  lacks: {
    richLibrariesPreinstalled:
      "the fake's sandboxes use this machine's Python, which has no pandas or matplotlib; the suite installs them",
    bashCells: "the fake's code interpreter has Python and JavaScript/TypeScript kernels only",
    jsDefaultContexts:
      "the fake runs JavaScript/TypeScript cells without a context as one-off processes, which give no last value (our E2B provider's contract relies on that: its stateless TypeScript reports unhandled rejections, which the fake's kernel adapter cannot)",
  },
};

/** Sandpit's E2B-compatible API on the provisioner (docs/e2b.md). */
export const SANDPIT_TARGET: E2BTarget = {
  name: "Sandpit provisioner /e2b",
  lacks: {
    richLibrariesPreinstalled:
      "the sandbox image ships no pandas or matplotlib (E2B's code-interpreter template does); the suite installs them",
    homeCwd:
      "/home/user is a link to the workspace, not a mount, so the kernel's getcwd() names /mnt/user-data/workspace (docs/e2b.md, Paths); a bind mount from the operator would fix it",
  },
};

/** Sandpit's E2B-compatible API on `sandpit serve` (docs/serve.md), by backend. */
export const SERVE_TARGETS: Record<"local" | "docker", E2BTarget> = {
  local: {
    name: "sandpit serve (local) /e2b",
    lacks: {
      richLibrariesPreinstalled:
        "local sandboxes use this machine's Python, which need not have pandas or matplotlib; the suite installs them",
      homeCwd:
        "/home/user is a link to the workspace inside bubblewrap (as in the sandbox image), so the kernel's getcwd() names /mnt/user-data/workspace (docs/e2b.md, Paths)",
    },
  },
  docker: {
    name: "sandpit serve (docker) /e2b",
    lacks: {
      richLibrariesPreinstalled: SANDPIT_TARGET.lacks.richLibrariesPreinstalled!,
      homeCwd: SANDPIT_TARGET.lacks.homeCwd!.replace(/; a bind mount from the operator.*$/, ""),
    },
  },
};
