/**
 * A warm pool attacked. Tenant A gets a sandbox adopted from a pool and, from code running
 * inside it, goes after the pool's next warm pods, which another tenant's sandbox will be: it
 * reads every environment and the filesystem for tokens, calls /v1/init and /v1/commands/run
 * on every warm pod's sandboxd with every token it found (its own old warm token's digest
 * included), and plants files in every path it can write. Tenant B then gets the next sandbox
 * from the pool, and nothing A did is there.
 *
 * Until warm tokens were per pod, every warm pod of a pool verified one token (the Secret
 * `<pool>-warm-token`): whoever learnt it opened every warm pod not yet adopted. The first test
 * proves, from the host (no NetworkPolicy in the way), that a warm pod's token opens that pod
 * and no other; it failed then.
 */
import { createHash, randomBytes } from "node:crypto";
import type { V1Pod } from "@kubernetes/client-node";
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import {
  type ProvisionerApi,
  type Stack,
  pools,
  provisionerCall,
  startStack,
  waitFor,
  warmTokenOfPod,
} from "../cluster/harness.ts";

const POOL = "prey";
const WARM = 3;
const KEY_A = "warm-pool-attacker-key-0123456789";
const KEY_B = "warm-pool-victim-key-0123456789ab";
const PORT = 8080; // sandboxd's
const MARKER = "planted-by-tenant-a";
/** The token A tries to give the warm pods it reaches with /v1/init: if one took it, A owns it. */
const ATTACKER_TOKEN = randomBytes(32).toString("hex");

let stack: Stack;
const api: ProvisionerApi = (...args) => provisionerCall(stack.prov.url, ...args);
const sha256 = (s: string) => createHash("sha256").update(s).digest("hex");

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "sec-warm",
    keys: [
      { key: KEY_A, tenant: "tenant-a", maxSandboxes: 5 },
      { key: KEY_B, tenant: "tenant-b", maxSandboxes: 5 },
    ],
    // Its default pool, there when it starts: it reserves warm pods of it from the start.
    env: { SANDPIT_DEFAULT_POOL: POOL },
    beforeProvisioner: (c, ns) =>
      pools.create(c, ns, POOL, { maxActive: 10, warm: WARM, template: {} }).then(() => undefined),
  });
  await readyWarmPods(WARM);
  // The provisioner holds two of them (its default reservation), so a create is handed one; a
  // create racing the reservations themselves may find every pod being reserved and start cold.
  await waitFor("warm pods reserved", 120_000, async () => {
    const pods = await readyWarmPods(WARM);
    return pods.filter((p) => p.metadata?.annotations?.["sandpit.dev/reserved-by"]).length >= 2;
  });
}, 300_000);

afterAll(async () => {
  await stack?.stop();
});

/** The pool's warm pods not yet adopted, serving: at least `n` of them, waited for. */
async function readyWarmPods(n: number): Promise<V1Pod[]> {
  return waitFor(`${n} warm pods ready`, 240_000, async () => {
    const pods = (
      await stack.c.core.listNamespacedPod({
        namespace: stack.ns,
        labelSelector: `sandpit.dev/pool=${POOL},sandpit.dev/warm=true`,
      })
    ).items.filter(
      (p) =>
        !p.metadata?.deletionTimestamp &&
        p.status?.podIP &&
        p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
    );
    return pods.length >= n ? pods : undefined;
  });
}

/** What sandboxd at `ip` answers a request authenticated with `token`: a status, or the error. */
async function call(ip: string, token: string, path: string, body?: unknown): Promise<number> {
  const res = await fetch(`http://${ip}:${PORT}${path}`, {
    method: body === undefined ? "GET" : "POST",
    headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
    ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    signal: AbortSignal.timeout(15_000),
  });
  await res.arrayBuffer();
  return res.status;
}

/** The Sandbox's pod name and address once the operator has reported them. */
async function placed(id: string): Promise<{ podName: string; endpoint: string }> {
  return waitFor(`sandbox ${id} placed`, 60_000, async () => {
    const s = (await stack.c.custom.getNamespacedCustomObject({
      group: "sandpit.dev",
      version: "v1alpha1",
      namespace: stack.ns,
      plural: "sandboxes",
      name: id,
    })) as { status?: { podName?: string; endpoint?: string; phase?: string } };
    const st = s.status;
    return st?.phase === "Ready" && st.podName && st.endpoint
      ? { podName: st.podName, endpoint: st.endpoint }
      : undefined;
  });
}

/**
 * What A runs in its sandbox. TARGETS is the other warm pods' addresses (an attacker would scan
 * the pod network for port 8080; handing them over makes the attack no weaker).
 */
const ATTACK = (targets: string[]) => `
import json, os, re, urllib.request, urllib.error
HEX = re.compile(rb"[0-9a-f]{64}")
found = {}
def scan(where, data):
    for m in HEX.findall(data):
        found.setdefault(m.decode(), where)
# Every process's environment and command line (sandboxd's, PID 1's, our own).
for pid in os.listdir("/proc"):
    if pid.isdigit():
        for f in ("environ", "cmdline"):
            try:
                scan(f"/proc/{pid}/{f}", open(f"/proc/{pid}/{f}", "rb").read())
            except OSError:
                pass
# The filesystem: every regular file up to 1 MiB outside the kernel's views and /usr (the image's
# read-only contents, the same in every pod and made before any token existed).
files = 0
for root, dirs, names in os.walk("/"):
    if root.startswith(("/proc", "/sys", "/dev", "/usr")):
        dirs[:] = []
        continue
    for n in names:
        p = os.path.join(root, n)
        try:
            if os.path.islink(p) or not os.path.isfile(p) or os.path.getsize(p) > (1 << 20):
                continue
            scan(p, open(p, "rb").read())
            files += 1
        except OSError:
            pass
# Plant a file in every place a later sandbox might share.
planted = []
for d in ["/tmp", "/var/tmp", "/dev/shm", "/mnt/user-data", os.getcwd(), os.path.expanduser("~"),
          "/run", "/home", "/opt", "/srv", "/etc", "/var", "/"]:
    try:
        with open(os.path.join(d, "${MARKER}"), "w") as f:
            f.write("${MARKER}")
        planted.append(d)
    except OSError:
        pass
def post(ip, path, token, body):
    req = urllib.request.Request(f"http://{ip}:${PORT}{path}", data=json.dumps(body).encode(),
                                 headers={"authorization": f"Bearer {token}",
                                          "content-type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=3) as r:
            return r.status
    except urllib.error.HTTPError as e:
        return e.code
    except Exception as e:
        return f"{type(e).__name__}: {getattr(e, 'reason', e)}"
attempts = []
for ip in ${JSON.stringify(targets)}:
    # Reachable at all? A connection that fails fails for every token alike.
    first = post(ip, "/v1/init", "0" * 64, {"token": "${ATTACKER_TOKEN}"})
    attempts.append([ip, "/v1/init", "probe", first])
    if not isinstance(first, int):
        continue
    for token in sorted(found):
        attempts.append([ip, "/v1/init", token, post(ip, "/v1/init", token, {"token": "${ATTACKER_TOKEN}"})])
        attempts.append([ip, "/v1/commands/run", token, post(ip, "/v1/commands/run", token,
            {"command": "echo ${MARKER} > /mnt/user-data/${MARKER}-by-command"})])
print(json.dumps({"found": found, "files": files, "planted": planted, "attempts": attempts}))
`;

interface Loot {
  found: Record<string, string>;
  files: number;
  planted: string[];
  attempts: [string, string, string, number | string][];
}

describe("a warm pool attacked", () => {
  test("a warm pod's token opens that pod and no other, and no Secret holds it", async () => {
    const pods = await readyWarmPods(WARM);
    const tokens = await Promise.all(pods.map((p) => warmTokenOfPod(stack.c, stack.ns, p)));
    const ips = pods.map((p) => p.status!.podIP!);
    // What each token opens, from the host: the NetworkPolicy does not stand in the way here.
    const opened = await Promise.all(
      tokens.map((t) => Promise.all(ips.map((ip) => call(ip, t, "/v1/files/stat?path=.")))),
    );
    expect(opened).toEqual(tokens.map((_, i) => ips.map((_, j) => (i === j ? 200 : 401))));
    // Each pod was given its own token's digest only, as a plain value.
    pods.forEach((p, i) => {
      const env = p.spec!.containers[0]!.env!;
      expect(env.find((e) => e.name === "SANDBOXD_TOKEN")).toBeUndefined();
      expect(env.find((e) => e.name === "SANDBOXD_TOKEN_SHA256")?.value).toBe(sha256(tokens[i]!));
    });
    // No pool-wide token is kept anywhere.
    const secrets = await stack.c.core.listNamespacedSecret({ namespace: stack.ns });
    expect(secrets.items.map((s) => s.metadata!.name)).not.toContain(`${POOL}-warm-token`);
  });

  test(
    "what tenant A does from inside its sandbox reaches none of the next warm pods, and B's sandbox is clean",
    { timeout: 600_000 },
    async () => {
      const before = await readyWarmPods(WARM);
      const madeA = await api("POST", "/v1/sandboxes", KEY_A, { language: "python", pool: POOL });
      expect(madeA.status, JSON.stringify(madeA.json)).toBe(201);
      const a = { id: madeA.json.id as string, token: madeA.json.token as string };
      const podA = await placed(a.id);
      // A's sandbox is one of the pool's warm pods, adopted.
      const warmA = before.find((p) => p.metadata!.name === podA.podName);
      expect(warmA, "A's sandbox was adopted from the pool").toBeDefined();
      const warmTokenA = await warmTokenOfPod(stack.c, stack.ns, warmA!);

      // The warm pods A goes after: those not yet adopted, one of which B will get.
      const prey = (await readyWarmPods(WARM - 1)).filter((p) => p.metadata!.name !== podA.podName);
      const preyTokens = await Promise.all(prey.map((p) => warmTokenOfPod(stack.c, stack.ns, p)));
      const run = await api("POST", `/v1/sandboxes/${a.id}/proxy/v1/code/execute`, KEY_A, {
        language: "python",
        code: ATTACK(prey.map((p) => p.status!.podIP!)),
      });
      expect(run.status, JSON.stringify(run.json)).toBe(200);
      expect(run.json.stderr, run.json.stderr).toBe("");
      const loot = JSON.parse(run.json.stdout as string) as Loot;

      // The attack ran: it read PID 1's environment (the digest of A's warm token is there),
      // walked the filesystem and planted files where it could.
      expect(Object.keys(loot.found)).toContain(sha256(warmTokenA));
      expect(loot.files).toBeGreaterThan(0);
      expect(loot.planted).toEqual(expect.arrayContaining(["/tmp", "/mnt/user-data"]));
      // It found no token: not its sandbox's, not its warm pod's, not any other warm pod's.
      for (const t of [a.token, warmTokenA, ...preyTokens])
        expect(loot.found).not.toHaveProperty(t);
      // From inside, every warm pod A went after was tried, and none answered but to refuse:
      // unreachable (the NetworkPolicy; then no token gets anywhere either), or 401 to every
      // token (the attack reached it before the policy was enforced).
      expect(loot.attempts.filter(([, , what]) => what === "probe").map(([ip]) => ip)).toEqual(
        prey.map((p) => p.status!.podIP!),
      );
      const answered = loot.attempts.filter(([, , , s]) => typeof s === "number" && s !== 401);
      expect(answered).toEqual([]);

      // What it found, tried from the host (past the NetworkPolicy), opens no warm pod either;
      // nor do A's own token, its warm pod's, or a digest (its old warm token's, the targets').
      const candidates = [
        ...new Set([
          ...Object.keys(loot.found),
          a.token,
          warmTokenA,
          sha256(warmTokenA),
          ...preyTokens.map(sha256),
        ]),
      ];
      for (const p of prey) {
        const ip = p.status!.podIP!;
        const statuses = await Promise.all(
          candidates.map(async (t) => [
            t,
            await call(ip, t, "/v1/commands/run", { command: `echo ${MARKER}` }),
          ]),
        );
        expect(statuses.filter(([, s]) => s !== 401)).toEqual([]);
      }

      // B gets the next sandbox from the pool: one of the pods A went after.
      const madeB = await api("POST", "/v1/sandboxes", KEY_B, { language: "python", pool: POOL });
      expect(madeB.status, JSON.stringify(madeB.json)).toBe(201);
      const b = { id: madeB.json.id as string, token: madeB.json.token as string };
      const podB = await placed(b.id);
      expect(prey.map((p) => p.metadata!.name)).toContain(podB.podName);
      const warmB = prey.find((p) => p.metadata!.name === podB.podName)!;
      expect(warmB.status!.podIP).toBe(podB.endpoint.split(":")[0]);

      // B's sandboxd answers B's token, and nothing A had or tried to give it.
      const ipB = warmB.status!.podIP!;
      expect(await call(ipB, b.token, "/v1/files/stat?path=.")).toBe(200);
      const refused = await Promise.all(
        [...candidates, ATTACKER_TOKEN, await warmTokenOfPod(stack.c, stack.ns, warmB)].map(
          async (t) => [t, await call(ipB, t, "/v1/files/stat?path=.")],
        ),
      );
      expect(refused.filter(([, s]) => s !== 401)).toEqual([]);

      // Nothing A planted is there, and B's commands give clean output.
      const look = await api("POST", `/v1/sandboxes/${b.id}/proxy/v1/commands/run`, KEY_B, {
        command: `find / -xdev \\( -path /proc -o -path /sys \\) -prune -o -name '${MARKER}*' -print 2>/dev/null; find /tmp /dev/shm /mnt/user-data -name '${MARKER}*' 2>/dev/null; echo done`,
      });
      expect(look.status, JSON.stringify(look.json)).toBe(200);
      expect(look.json.stdout).toBe("done\n");
      const echo = await api("POST", `/v1/sandboxes/${b.id}/proxy/v1/commands/run`, KEY_B, {
        command: "echo clean; ls -A /mnt/user-data",
      });
      expect(echo.status, JSON.stringify(echo.json)).toBe(200);
      expect(echo.json).toMatchObject({ exitCode: 0, stderr: "" });
      expect(echo.json.stdout).not.toContain(MARKER);
      expect((echo.json.stdout as string).split("\n")[0]).toBe("clean");

      // And A's sandbox still has its own files: the plant worked where A may write.
      const mine = await api("POST", `/v1/sandboxes/${a.id}/proxy/v1/commands/run`, KEY_A, {
        command: `cat /mnt/user-data/${MARKER}`,
      });
      expect(mine.json.stdout).toBe(MARKER);
    },
  );
});

describe("an upgrade from a pool-wide warm token", () => {
  test(
    "a warm pod made with the pool's Secret is replaced, and the Secret goes once no pod made with it is left",
    { timeout: 300_000 },
    async () => {
      const OLD = "legacy";
      const ns = stack.ns;
      await pools.create(stack.c, ns, OLD, { maxActive: 5, warm: 1, template: {} });
      const poolUid = (
        (await pools.get(stack.c, ns, OLD)) as unknown as { metadata: { uid: string } }
      ).metadata.uid;
      const owner = {
        apiVersion: "sandpit.dev/v1alpha1",
        kind: "SandboxPool",
        name: OLD,
        uid: poolUid,
        controller: true,
        blockOwnerDeletion: true,
      };
      const warmOf = async () =>
        (
          await stack.c.core.listNamespacedPod({
            namespace: ns,
            labelSelector: `sandpit.dev/pool=${OLD},sandpit.dev/warm=true`,
          })
        ).items.filter((p) => !p.metadata?.deletionTimestamp);
      const fresh = await waitFor("the new pool's warm pod ready", 180_000, async () =>
        (await warmOf()).find((p) =>
          p.status?.conditions?.some((c) => c.type === "Ready" && c.status === "True"),
        ),
      );

      // What an operator from before per-pod tokens made: the pool's Secret, and pods reading
      // their token's digest from it (one warm, one adopted since, as after an upgrade).
      const oldPod = (name: string, labels: Record<string, string>): V1Pod => {
        const spec = structuredClone(fresh.spec!);
        delete spec.nodeName;
        const env = spec.containers[0]!.env!;
        env[env.findIndex((e) => e.name === "SANDBOXD_TOKEN_SHA256")] = {
          name: "SANDBOXD_TOKEN_SHA256",
          valueFrom: { secretKeyRef: { name: `${OLD}-warm-token`, key: "token-sha256" } },
        };
        // Nor had it a network policy probe (it came later): ready on /healthz.
        spec.containers[0]!.env = env.filter((e) => e.name !== "SANDBOXD_ISOLATION_PROBE");
        spec.containers[0]!.readinessProbe!.httpGet!.path = "/healthz";
        // No volume of its own is needed for what is checked here.
        spec.volumes = spec.volumes!.map((v) =>
          v.persistentVolumeClaim ? { name: v.name, emptyDir: {} } : v,
        );
        const a = fresh.metadata!.annotations!;
        return {
          metadata: {
            name,
            labels,
            ownerReferences: [owner],
            annotations: {
              "sandpit.dev/template-hash": a["sandpit.dev/template-hash"]!,
              "sandpit.dev/shape-hash": a["sandpit.dev/shape-hash"]!,
            },
          },
          spec,
        };
      };
      const base = { ...fresh.metadata!.labels! };
      delete base["sandpit.dev/warm"];
      await stack.c.core.createNamespacedPod({
        namespace: ns,
        body: oldPod(`${OLD}-adopted0`, { ...base, "sandpit.dev/sandbox": "made-before" }),
      });
      await stack.c.core.createNamespacedPod({
        namespace: ns,
        body: oldPod(`${OLD}-warm000`, { ...base, "sandpit.dev/warm": "true" }),
      });

      // The Secret after its pods: an operator that sees the Secret with no pod using it
      // deletes it, as it does once the last such pod is gone.
      const token = randomBytes(32).toString("hex");
      await stack.c.core.createNamespacedSecret({
        namespace: ns,
        body: {
          metadata: {
            name: `${OLD}-warm-token`,
            // Labelled as the operator labelled it (it watches only Secrets it made).
            labels: {
              "app.kubernetes.io/managed-by": "sandpit-operator",
              "app.kubernetes.io/name": "sandpit-sandbox",
              "sandpit.dev/pool": OLD,
            },
            ownerReferences: [owner],
          },
          data: {
            token: Buffer.from(token).toString("base64"),
            "token-sha256": Buffer.from(sha256(token)).toString("base64"),
          },
        },
      });
      // The old pod verifies the pool's token, as before (read from the host).
      const adopted = await waitFor("the old adopted pod serving", 120_000, async () => {
        const p = await stack.c.core.readNamespacedPod({ name: `${OLD}-adopted0`, namespace: ns });
        return p.status?.podIP &&
          p.status.conditions?.some((c) => c.type === "Ready" && c.status === "True")
          ? p
          : undefined;
      });
      expect(await call(adopted.status!.podIP!, token, "/v1/files/stat?path=.")).toBe(200);

      // The warm one made with the pool's token is replaced (the pool has its new warm pod).
      await waitFor("the old warm pod replaced", 120_000, async () =>
        (await warmOf()).every((p) => p.metadata!.name !== `${OLD}-warm000`),
      );
      expect((await warmOf()).map((p) => p.metadata!.name)).toContain(fresh.metadata!.name);

      // The Secret stays while the adopted pod made with it lives: its container, restarted,
      // reads the digest from it again.
      const secretThere = async () =>
        (await stack.c.core.listNamespacedSecret({ namespace: ns })).items.some(
          (s) => s.metadata!.name === `${OLD}-warm-token` && !s.metadata!.deletionTimestamp,
        );
      await new Promise((r) => setTimeout(r, 6_000)); // a pool pass or two, every 5 s at most
      expect(await secretThere()).toBe(true);

      // That pod gone, the Secret goes.
      await stack.c.core.deleteNamespacedPod({
        name: `${OLD}-adopted0`,
        namespace: ns,
        gracePeriodSeconds: 0,
      });
      await waitFor("the pool's old Secret deleted", 60_000, async () => !(await secretThere()));
    },
  );
});
