/** What a sandbox's pod is made of: effective spec precedence, secure Pod, volumes, token. */
import { createHash } from "node:crypto";
import { describe, expect, it } from "vitest";
import { SANDBOXD_PORT, VIRTUAL_ROOT } from "@sandpit/sandboxd/protocol";
import { LABEL, SandboxPoolSpec, SandboxSpec } from "../src/api/index.ts";
import { readConfig } from "../src/config.ts";
import type { KObject } from "../src/kube/rest.ts";
import { dataClaim, legacyTokenSecret, pod, tokenSecret } from "../src/workload/manifests.ts";
import { podMounts } from "../src/workload/mounts.ts";
import {
  effectiveSpec,
  notStartableReason,
  podShape,
  proxyEnv,
  shapeHash,
  warmable,
} from "../src/workload/spec.ts";

const cfg = readConfig({
  SANDPIT_SANDBOX_IMAGE: "registry.example/sandbox:1",
  SANDPIT_DEFAULT_TTL_SECONDS: "3600",
  SANDPIT_DEFAULT_CPU: "2",
  SANDPIT_DEFAULT_MEMORY: "2Gi",
  SANDPIT_DEFAULT_EPHEMERAL_STORAGE: "4Gi",
  SANDPIT_SYSTEM_NAMESPACE: "sandpit-system",
  SANDPIT_DNS_CIDRS: "10.96.0.10/32",
});

const owner: KObject = {
  apiVersion: "sandpit.dev/v1alpha1",
  kind: "Sandbox",
  metadata: { name: "sbx-1", namespace: "team-a", uid: "uid-1" },
};
const meta = { name: "sbx-1", namespace: "team-a", owner, labels: { [LABEL.sandbox]: "sbx-1" } };

/** Specs as the API server stores them: parsed through the CRD's own schema, defaults applied. */
const sandbox = (spec: unknown) => SandboxSpec.parse(spec);
const poolOf = (spec: unknown) => SandboxPoolSpec.parse(spec);

/** The mounts of a pod with a claim of its own and nothing else. */
const own = (claimName: string) => [{ claimName, mountPath: VIRTUAL_ROOT, readOnly: false }];

/** Navigation into the plain JSON objects the builders return. */
const at = (o: unknown, ...path: (string | number)[]): unknown =>
  path.reduce<unknown>((v, k) => (v as Record<string, unknown> | undefined)?.[k], o);

describe("effectiveSpec", () => {
  it("falls back to the operator's defaults", () => {
    const e = effectiveSpec(sandbox({}), undefined, cfg);
    expect(e).toMatchObject({
      image: "registry.example/sandbox:1",
      language: "python",
      packages: [],
      env: {},
      limits: { cpu: "2", memory: "2Gi", ephemeralStorage: "4Gi" },
      storage: { size: "1Gi" },
      network: { egress: "Internet" },
      ttlSeconds: 3600,
      idleTimeoutSeconds: undefined,
      suspended: false,
      runtimeClassName: undefined,
    });
  });

  const pool = poolOf({
    maxActive: 3,
    defaultTtlSeconds: 7200,
    defaultIdleTimeoutSeconds: 600,
    template: {
      image: "pool-image:2",
      language: "typescript",
      packages: [{ name: "zod" }],
      env: [
        { name: "A", value: "pool" },
        { name: "B", value: "pool" },
      ],
      resources: { cpu: "500m", memory: "1Gi" },
      storage: { size: "10Gi", storageClassName: "fast" },
      network: { egress: "Deny" },
      runtimeClassName: "gvisor",
    },
  });

  it("takes the pool template over the operator's defaults", () => {
    const e = effectiveSpec(sandbox({ poolRef: "p" }), pool, cfg);
    expect(e).toMatchObject({
      image: "pool-image:2",
      language: "typescript",
      packages: [{ name: "zod" }],
      env: { A: "pool", B: "pool" },
      limits: { cpu: "500m", memory: "1Gi", ephemeralStorage: "4Gi" },
      storage: { size: "10Gi", storageClassName: "fast" },
      network: { egress: "Deny" },
      ttlSeconds: 7200,
      idleTimeoutSeconds: 600,
      runtimeClassName: "gvisor",
    });
  });

  it("takes the sandbox's own spec over the pool template, field by field", () => {
    const e = effectiveSpec(
      sandbox({
        poolRef: "p",
        image: "own:3",
        language: "python",
        packages: [{ name: "numpy", version: "2" }],
        env: [
          { name: "B", value: "own" },
          { name: "C", value: "own" },
        ],
        resources: { memory: "3Gi" },
        storage: { storageClassName: "slow" },
        network: { egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24", ports: [443] }] },
        lifecycle: { ttlSeconds: 120, idleTimeoutSeconds: 60, suspended: true },
        runtimeClassName: "kata",
      }),
      pool,
      cfg,
    );
    expect(e).toMatchObject({
      image: "own:3",
      language: "python",
      packages: [{ name: "numpy", version: "2" }],
      env: { A: "pool", B: "own", C: "own" }, // merged by name, the sandbox's value wins
      limits: { cpu: "500m", memory: "3Gi", ephemeralStorage: "4Gi" },
      storage: { size: "10Gi", storageClassName: "slow" },
      network: { egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24", ports: [443] }] },
      ttlSeconds: 120,
      idleTimeoutSeconds: 60,
      suspended: true,
      runtimeClassName: "kata",
    });
  });

  it("takes TTL and idle timeout from the template's lifecycle, then the pool's defaults, then the operator's", () => {
    const withLifecycle = poolOf({
      maxActive: 1,
      defaultTtlSeconds: 7200,
      defaultIdleTimeoutSeconds: 600,
      template: { lifecycle: { ttlSeconds: 900, idleTimeoutSeconds: 300 } },
    });
    expect(effectiveSpec(sandbox({}), withLifecycle, cfg)).toMatchObject({
      ttlSeconds: 900,
      idleTimeoutSeconds: 300,
    });
    const defaultsOnly = poolOf({ maxActive: 1, defaultTtlSeconds: 7200, template: {} });
    expect(effectiveSpec(sandbox({}), defaultsOnly, cfg)).toMatchObject({
      ttlSeconds: 7200,
      idleTimeoutSeconds: undefined,
    });
    const bare = poolOf({ maxActive: 1, template: {} });
    expect(effectiveSpec(sandbox({}), bare, cfg).ttlSeconds).toBe(3600);
  });
});

describe("pod", () => {
  const e = effectiveSpec(
    sandbox({
      runtimeClassName: "gvisor",
      resources: { cpu: "1500m" },
      env: [{ name: "K", value: "v" }],
    }),
    undefined,
    cfg,
  );
  const p = pod(meta, e, { token: { secret: "sbx-1-token" }, mounts: own("sbx-1-data") }, cfg);
  const container = at(p, "spec", "containers", 0);

  it("is ready on /healthz without a policy probe, on /readyz with one, which sandboxd is given", () => {
    expect(at(container, "readinessProbe")).toMatchObject({ httpGet: { path: "/healthz" } });
    expect(at(container, "env")).not.toContainEqual(
      expect.objectContaining({ name: "SANDBOXD_ISOLATION_PROBE" }),
    );
    const probed = pod(
      meta,
      e,
      { token: { secret: "t" }, mounts: own("c"), isolationProbe: "198.51.100.4:6443" },
      cfg,
    );
    const c = at(probed, "spec", "containers", 0);
    expect(at(c, "readinessProbe")).toMatchObject({ httpGet: { path: "/readyz" } });
    expect(at(c, "livenessProbe")).toMatchObject({ httpGet: { path: "/healthz" } });
    expect(at(c, "env")).toContainEqual({
      name: "SANDBOXD_ISOLATION_PROBE",
      value: "198.51.100.4:6443",
    });
  });

  it("runs restricted: non-root uid 1000, seccomp RuntimeDefault, no capabilities, read-only root", () => {
    expect(at(p, "spec", "securityContext")).toMatchObject({
      runAsNonRoot: true,
      runAsUser: 1000,
      runAsGroup: 1000,
      fsGroup: 1000,
      seccompProfile: { type: "RuntimeDefault" },
    });
    expect(at(container, "securityContext")).toEqual({
      allowPrivilegeEscalation: false,
      privileged: false,
      readOnlyRootFilesystem: true,
      runAsNonRoot: true,
      capabilities: { drop: ["ALL"] },
    });
    expect(at(p, "spec", "automountServiceAccountToken")).toBe(false);
    expect(at(p, "spec", "hostNetwork")).toBeUndefined();
    expect(at(p, "spec", "hostPID")).toBeUndefined();
  });

  it("is limited in CPU, memory and ephemeral storage", () => {
    expect(at(container, "resources", "limits")).toEqual({
      cpu: "1500m",
      memory: "2Gi",
      "ephemeral-storage": "4Gi",
    });
    expect(at(container, "resources", "requests")).toEqual({
      cpu: "50m",
      memory: "64Mi",
      "ephemeral-storage": "64Mi",
    });
  });

  it("gets only its token's digest from the Secret, never the token, and the environment", () => {
    const env = at(container, "env") as { name: string; value?: string; valueFrom?: unknown }[];
    expect(env.find((v) => v.name === "SANDBOXD_TOKEN_SHA256")).toEqual({
      name: "SANDBOXD_TOKEN_SHA256",
      valueFrom: { secretKeyRef: { name: "sbx-1-token", key: "token-sha256" } },
    });
    expect(env.find((v) => v.name === "SANDBOXD_TOKEN")).toBeUndefined();
    expect(JSON.parse(env.find((v) => v.name === "SANDBOXD_ENV")!.value!)).toEqual({ K: "v" });
  });

  it("a token Secret holds the token and its digest; one made before the digest keeps the token in the pod", () => {
    const owner = { apiVersion: "v1", kind: "X", metadata: { name: "o", uid: "u" } };
    const s = tokenSecret(
      { name: "t", namespace: "ns", owner, labels: {} },
      "a-token",
    ) as unknown as {
      data: Record<string, string>;
    };
    const digest = Buffer.from(s.data["token-sha256"]!, "base64").toString();
    expect(digest).toBe(createHash("sha256").update("a-token").digest("hex"));
    expect(legacyTokenSecret(s)).toBe(false);
    expect(legacyTokenSecret({ data: { token: s.data.token! } })).toBe(true);
  });

  it("mounts the PVC at /mnt/user-data and a writable /tmp", () => {
    expect(VIRTUAL_ROOT).toBe("/mnt/user-data");
    expect(at(container, "volumeMounts")).toContainEqual({
      name: "data",
      mountPath: "/mnt/user-data",
    });
    expect(at(p, "spec", "volumes")).toContainEqual({
      name: "data",
      persistentVolumeClaim: { claimName: "sbx-1-data" },
    });
    expect(at(container, "volumeMounts")).toContainEqual({ name: "tmp", mountPath: "/tmp" });
  });

  it("mounts /tmp as a tmpfs of 512Mi, or half the memory limit when that is smaller", () => {
    // Memory-backed: the kubelet sizes the tmpfs to sizeLimit, so a write past it fails at once
    // (a disk-backed emptyDir's sizeLimit is enforced only by a later eviction).
    const tmpOf = (memory: string) => {
      const e = effectiveSpec(sandbox({ resources: { memory } }), undefined, cfg);
      const q = pod(meta, e, { token: { secret: "t" }, mounts: own("c") }, cfg);
      const volumes = at(q, "spec", "volumes") as { name: string; emptyDir?: unknown }[];
      return volumes.find((v) => v.name === "tmp")!;
    };
    expect(at(p, "spec", "volumes")).toContainEqual({
      name: "tmp",
      emptyDir: { medium: "Memory", sizeLimit: "512Mi" },
    });
    expect(tmpOf("4Gi").emptyDir).toEqual({ medium: "Memory", sizeLimit: "512Mi" });
    expect(tmpOf("1Gi").emptyDir).toEqual({ medium: "Memory", sizeLimit: "512Mi" });
    expect(tmpOf("512Mi").emptyDir).toEqual({ medium: "Memory", sizeLimit: "256Mi" });
    expect(tmpOf("1000M").emptyDir).toEqual({ medium: "Memory", sizeLimit: "500000000" });
    // Warm pods made when /tmp was on the node's disk no longer match a sandbox's shape.
    expect(podShape(e)).toMatchObject({ tmp: "memory" });
  });

  it("mounts each of emptyDirs as its own empty volume, and changes the pod's shape only when set", () => {
    const dirs = ["/mnt/skills/custom", "/mnt/acp-workspace"];
    const withDirs = effectiveSpec(sandbox({ emptyDirs: dirs }), undefined, cfg);
    const q = pod(meta, withDirs, { token: { secret: "t" }, mounts: own("c") }, cfg);
    expect(at(q, "spec", "containers", 0, "volumeMounts")).toEqual(
      expect.arrayContaining([
        { name: "empty-0", mountPath: "/mnt/skills/custom" },
        { name: "empty-1", mountPath: "/mnt/acp-workspace" },
      ]),
    );
    expect(at(q, "spec", "volumes")).toEqual(
      expect.arrayContaining([
        { name: "empty-0", emptyDir: { sizeLimit: "512Mi" } },
        { name: "empty-1", emptyDir: { sizeLimit: "512Mi" } },
      ]),
    );
    const plain = effectiveSpec(sandbox({}), undefined, cfg);
    expect(podShape(plain)).not.toHaveProperty("emptyDirs"); // warm pods made before stay claimable
    expect(shapeHash(withDirs)).not.toBe(shapeHash(plain));
    const fromPool = effectiveSpec(
      sandbox({}),
      poolOf({ maxActive: 1, template: { emptyDirs: dirs } }),
      cfg,
    );
    expect(shapeHash(fromPool)).toBe(shapeHash(withDirs));
  });

  it("refuses emptyDirs outside /mnt, on the user-data volume, relative or repeated", () => {
    for (const bad of [
      ["/etc/x"],
      ["/mnt/user-data"],
      ["/mnt/user-data/workspace"],
      ["mnt/x"],
      ["/mnt/../etc"],
      ["/mnt/a", "/mnt/a"],
    ])
      expect(SandboxSpec.safeParse({ emptyDirs: bad }).success, bad.join(",")).toBe(false);
    expect(SandboxSpec.safeParse({ emptyDirs: ["/mnt/user-data-x/a"] }).success).toBe(true);
  });

  it("passes runtimeClassName through, and sets none when none is asked for", () => {
    expect(at(p, "spec", "runtimeClassName")).toBe("gvisor");
    const plain = pod(
      meta,
      effectiveSpec(sandbox({}), undefined, cfg),
      { token: { secret: "t" }, mounts: own("c") },
      cfg,
    );
    expect(at(plain, "spec")).not.toHaveProperty("runtimeClassName");
  });

  it("serves sandboxd on 8080 with probes, and carries labels and a controller ownerReference", () => {
    expect(at(container, "ports")).toEqual([
      { name: "sandboxd", containerPort: SANDBOXD_PORT, protocol: "TCP" },
    ]);
    expect(at(container, "readinessProbe", "httpGet")).toEqual({ path: "/healthz", port: 8080 });
    expect(p.metadata.labels).toMatchObject({
      "app.kubernetes.io/managed-by": "sandpit-operator",
      [LABEL.sandbox]: "sbx-1",
    });
    expect(p.metadata.ownerReferences).toEqual([
      {
        apiVersion: "sandpit.dev/v1alpha1",
        kind: "Sandbox",
        name: "sbx-1",
        uid: "uid-1",
        controller: true,
        blockOwnerDeletion: true,
      },
    ]);
  });

  it("applies the operator's node selector and tolerations", () => {
    const placed = readConfig({
      SANDPIT_POD_NODE_SELECTOR: '{"pool":"sandboxes"}',
      SANDPIT_POD_TOLERATIONS: '[{"key":"sandbox","operator":"Exists","effect":"NoSchedule"}]',
    });
    const q = pod(meta, e, { token: { secret: "t" }, mounts: own("c") }, placed);
    expect(at(q, "spec", "nodeSelector")).toEqual({ pool: "sandboxes" });
    expect(at(q, "spec", "tolerations")).toEqual([
      { key: "sandbox", operator: "Exists", effect: "NoSchedule" },
    ]);
    expect(at(p, "spec")).not.toHaveProperty("tolerations");
  });
});

describe("claim and secret", () => {
  it("makes the PVC with the effective size and class", () => {
    const e = effectiveSpec(
      sandbox({ storage: { size: "5Gi", storageClassName: "x" } }),
      undefined,
      cfg,
    );
    const c = dataClaim({ ...meta, name: "sbx-1-data" }, e);
    expect(c.spec).toEqual({
      accessModes: ["ReadWriteOnce"],
      resources: { requests: { storage: "5Gi" } },
      storageClassName: "x",
    });
    const noClass = dataClaim(meta, effectiveSpec(sandbox({}), undefined, cfg));
    expect(noClass.spec).not.toHaveProperty("storageClassName");
  });

  it("keeps the token base64-encoded in an immutable Secret", () => {
    const s = tokenSecret(meta, "s3cret");
    expect(s.immutable).toBe(true);
    expect(Buffer.from(at(s, "data", "token") as string, "base64").toString()).toBe("s3cret");
  });
});

describe("mounts", () => {
  const skills = { claimName: "skills", mountPath: "/mnt/skills", readOnly: true };
  const pool = poolOf({
    maxActive: 2,
    template: {
      mounts: [skills, { claimName: "ws", mountPath: "/mnt/acp-workspace" }],
      storage: {
        sharedClaim: { claimName: "deerflow", subPath: "users/{user}/threads/{thread}/user-data" },
      },
    },
  });

  it("adds a sandbox's mounts to its pool's, the sandbox's winning at the same path", () => {
    const e = effectiveSpec(
      sandbox({
        poolRef: "p",
        mounts: [
          { claimName: "ws-2", mountPath: "/mnt/acp-workspace", subPath: "{thread}" },
          { claimName: "tools", mountPath: "/opt/tools", readOnly: true },
        ],
      }),
      pool,
      cfg,
    );
    expect(e.mounts).toEqual([
      skills,
      { claimName: "ws-2", mountPath: "/mnt/acp-workspace", subPath: "{thread}" },
      { claimName: "tools", mountPath: "/opt/tools", readOnly: true },
    ]);
    expect(e.storage.sharedClaim).toEqual({
      claimName: "deerflow",
      subPath: "users/{user}/threads/{thread}/user-data",
    });
    expect(effectiveSpec(sandbox({}), undefined, cfg).mounts).toEqual([]);
  });

  it("renders {user} and {thread}; the user-data volume comes first, from the shared claim", () => {
    const e = effectiveSpec(sandbox({ poolRef: "p" }), pool, cfg);
    expect(podMounts(e, { userId: "u1", threadId: "t1" }, "own-data")).toEqual({
      mounts: [
        {
          claimName: "deerflow",
          mountPath: VIRTUAL_ROOT,
          readOnly: false,
          subPath: "users/u1/threads/t1/user-data",
        },
        { claimName: "skills", mountPath: "/mnt/skills", readOnly: true },
        { claimName: "ws", mountPath: "/mnt/acp-workspace", readOnly: false },
      ],
    });
  });

  it("refuses a subPath naming an id the sandbox lacks, or one that is not a plain segment", () => {
    const e = effectiveSpec(sandbox({ poolRef: "p" }), pool, cfg);
    expect(podMounts(e, { userId: "u1" }, "own-data")).toEqual({
      problem:
        "spec.storage.sharedClaim.subPath names {thread} but the sandbox has no spec.threadId",
    });
    expect(podMounts(e, { userId: "..", threadId: "t" }, "own-data")).toEqual({
      problem:
        "spec.storage.sharedClaim.subPath names {user} but spec.userId is not a plain path segment",
    });
    expect(podMounts(e, { userId: "a/b", threadId: "t" }, "own-data")).toHaveProperty("problem");
    const mount = effectiveSpec(
      sandbox({ mounts: [{ claimName: "c", mountPath: "/mnt/x", subPath: "u/{user}" }] }),
      undefined,
      cfg,
    );
    expect(podMounts(mount, {}, "own-data")).toEqual({
      problem: "the subPath of the mount at /mnt/x names {user} but the sandbox has no spec.userId",
    });
  });

  it("builds one volume per claim, read-only when every mount of it is, with subPaths", () => {
    const e = effectiveSpec(sandbox({ poolRef: "p" }), pool, cfg);
    const resolved = podMounts(
      {
        ...e,
        mounts: [...e.mounts, { claimName: "deerflow", mountPath: "/mnt/all", readOnly: true }],
      },
      { userId: "u1", threadId: "t1" },
      "own-data",
    );
    if ("problem" in resolved) throw new Error(resolved.problem);
    const p = pod(meta, e, { token: { secret: "t" }, mounts: resolved.mounts }, cfg);
    expect(at(p, "spec", "volumes")).toEqual([
      { name: "data", persistentVolumeClaim: { claimName: "deerflow" } },
      { name: "claim-1", persistentVolumeClaim: { claimName: "skills", readOnly: true } },
      { name: "claim-2", persistentVolumeClaim: { claimName: "ws" } },
      { name: "tmp", emptyDir: { medium: "Memory", sizeLimit: "512Mi" } },
    ]);
    expect(at(p, "spec", "containers", 0, "volumeMounts")).toEqual([
      { name: "data", mountPath: "/mnt/user-data", subPath: "users/u1/threads/t1/user-data" },
      { name: "claim-1", mountPath: "/mnt/skills", readOnly: true },
      { name: "claim-2", mountPath: "/mnt/acp-workspace" },
      { name: "data", mountPath: "/mnt/all", readOnly: true },
      { name: "tmp", mountPath: "/tmp" },
    ]);
    // Mounts change nothing of the pod's restrictions.
    expect(at(p, "spec", "securityContext")).toMatchObject({ runAsNonRoot: true, runAsUser: 1000 });
    expect(at(p, "spec", "containers", 0, "securityContext")).toMatchObject({
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
    });
  });

  it("makes warm pods only for what no user or thread decides, and keeps the shape of pods without mounts", () => {
    expect(warmable(effectiveSpec(sandbox({ poolRef: "p" }), pool, cfg))).toBe(false);
    const skillsOnly = effectiveSpec(sandbox({ mounts: [skills] }), undefined, cfg);
    expect(warmable(skillsOnly)).toBe(true);
    const perThread = effectiveSpec(
      sandbox({ mounts: [{ ...skills, subPath: "t/{thread}" }] }),
      undefined,
      cfg,
    );
    expect(warmable(perThread)).toBe(false);
    const plain = effectiveSpec(sandbox({}), undefined, cfg);
    expect(podShape(plain)).not.toHaveProperty("mounts");
    expect(shapeHash(skillsOnly)).not.toBe(shapeHash(plain));
  });

  it("rejects mounts that are relative, shadow sandboxd's or the system's paths, climb out, or repeat", () => {
    const bad = (mounts: unknown) => {
      const r = SandboxSpec.safeParse({ mounts });
      return r.success ? "" : r.error.issues.map((i) => i.message).join("\n");
    };
    const m = (mountPath: string, extra: object = {}) => [{ claimName: "c", mountPath, ...extra }];
    expect(bad(m("mnt/skills"))).toMatch(/absolute path/);
    expect(bad(m("/mnt/skills/"))).toMatch(/absolute path/);
    for (const path of [
      "/mnt/user-data",
      "/mnt/user-data/x",
      "/mnt",
      "/tmp/x",
      "/opt/sandpit",
      "/opt",
      "/usr/lib",
    ]) {
      expect(bad(m(path)), path).toMatch(/may not cover, lie under or contain/);
    }
    expect(bad(m("/mnt/a/../user-data"))).toMatch(/no '\.' or '\.\.' segments/);
    expect(bad(m("/mnt/x", { subPath: "../up" }))).toMatch(/no '\.' or '\.\.' segments/);
    expect(bad(m("/mnt/x", { subPath: "/abs" }))).toMatch(/relative path/);
    expect(bad(m("/mnt/x", { subPath: "u/{email}" }))).toMatch(/relative path/);
    expect(bad(m("/mnt/x", { claimName: "Not_A_Claim" }))).toMatch(/PersistentVolumeClaim name/);
    expect(bad([...m("/mnt/x"), ...m("/mnt/x")])).toMatch(/its own mountPath/);
    expect(bad(Array.from({ length: 17 }, (_, i) => m(`/mnt/m${i}`)[0]))).not.toBe("");
    expect(
      bad([
        ...m("/mnt/skills", { readOnly: true, subPath: "s/{user}" }),
        ...m("/home/sandpit/.lark"),
      ]),
    ).toBe("");
    const shared = SandboxSpec.safeParse({ storage: { sharedClaim: { claimName: "c" } } });
    expect(shared.success).toBe(false); // a shared claim always names its directory
  });
});

describe("a sandbox with allowDomains", () => {
  const network = { egress: "Allowlist", allowDomains: ["pypi.org", "*.npmjs.org"] };
  const proxied = readConfig({ SANDPIT_EGRESS_PROXY: "10.96.7.7:3128" });

  it("gets the proxy's address in its environment, over any proxy of its own", () => {
    const e = effectiveSpec(
      sandbox({ network, env: [{ name: "HTTPS_PROXY", value: "http://elsewhere:1" }] }),
      undefined,
      proxied,
    );
    expect(e.env).toEqual(proxyEnv("10.96.7.7:3128"));
    expect(e.env.HTTPS_PROXY).toBe("http://10.96.7.7:3128");
    expect(e.env.https_proxy).toBe("http://10.96.7.7:3128");
    expect(e.env.NODE_USE_ENV_PROXY).toBe("1");
  });

  it("from its pool's template too; other sandboxes get no proxy", () => {
    const pool = poolOf({ maxActive: 2, template: { network } });
    expect(effectiveSpec(sandbox({}), pool, proxied).env.HTTP_PROXY).toBe("http://10.96.7.7:3128");
    const internet = effectiveSpec(sandbox({ network: { egress: "Internet" } }), pool, proxied);
    expect(internet.env).toEqual({});
    const cidrs = { egress: "Allowlist", allow: [{ cidr: "203.0.113.0/24" }] };
    expect(effectiveSpec(sandbox({ network: cidrs }), undefined, proxied).env).toEqual({});
  });

  it("is not started where no egress proxy is configured, and says so", () => {
    const e = effectiveSpec(sandbox({ network }), undefined, cfg);
    expect(e.env).toEqual({});
    expect(notStartableReason(e, undefined, cfg)).toEqual({
      reason: "EgressProxyNotConfigured",
      message: expect.stringContaining("SANDPIT_EGRESS_PROXY") as string,
    });
    expect(
      notStartableReason(
        effectiveSpec(sandbox({ network }), undefined, proxied),
        undefined,
        proxied,
      ),
    ).toBeUndefined();
  });

  it("is an Allowlist: the CRD's schema refuses domains with any other egress", () => {
    expect(() => sandbox({ network: { egress: "Allowlist", allowDomains: ["10.0.0.1"] } })).toThrow(
      /a domain such as pypi.org/,
    );
  });
});
