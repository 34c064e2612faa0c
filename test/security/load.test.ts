/**
 * Issue 18, "Load": 1,000 commands in flight at once through one provisioner replica, across 50
 * sandboxes (20 each), with nothing lost and nothing mixed. The real operator and one real
 * provisioner (the harness's processes), the SDK's kubernetes provider as the client, every
 * command through the replica's proxy (`/v1/sandboxes/:id/proxy/v1/commands/run`).
 *
 * Each command's answer can only be its own: it prints its pod's hostname, its sandbox's index
 * (from the sandbox's environment, set at create) and its sequence number (from the command's
 * own environment), a few KiB of lines derived from both on stdout and stderr interleaved, and
 * exits with a code of its own; it writes a file of its own too. Every command first records
 * that it started, then waits for a "go" file: the go files are written only once all 1,000
 * have started (and every streamed command's first line has reached its onStdout), so all 1,000
 * are provably in flight at the same moment, none answered yet.
 *
 * Then: every command answered, each with exactly its own stdout, stderr and exit code (a
 * streamed one's callbacks saw exactly that output too), the provisioner answered no 5xx (its
 * own request counter), it is still healthy and serving, and each command's file is there.
 */
import { afterAll, beforeAll, describe, expect, inject, test } from "vitest";
import { KubernetesProvider } from "@sandpit/sdk/kubernetes";
import type { SandboxExecutionResult, SandboxInstance } from "@sandpit/sdk";
import { type Stack, pools, provisionerCall, sandboxes, startStack } from "../cluster/harness.ts";

const SANDBOXES = 50;
const PER_SANDBOX = 20;
/** Every STREAM_EVERY-th command of a sandbox is streamed (onStdout/onStderr). */
const STREAM_EVERY = 4;
const KEY = "load-key-0123456789abcdef0123";
const DIR = "/mnt/user-data/workspace/load";
const SCRIPT = `${DIR}/command.sh`;
/** How long a command waits for its go file (100 ms ticks) before giving up with exit 254. */
const GO_TICKS = 1500;

/**
 * One command, run as `bash command.sh` with LOAD_INDEX (the sandbox's, from its create) and
 * SEQ (the command's own) in its environment. The wait for the go file costs no process per
 * tick: `read -t` on a FIFO nobody writes is a timed sleep inside bash.
 */
const script = `set -u
i=$LOAD_INDEX; n=$SEQ
printf 'host=%s sandbox=%s seq=%s\\n' "$HOSTNAME" "$i" "$n"
echo "$n" >> ${DIR}/started
fifo=/tmp/load-wait-$n
mkfifo "$fifo"; exec 9<>"$fifo"; rm -f "$fifo"
ticks=0
while [ ! -e ${DIR}/go ]; do
  ticks=$((ticks + 1))
  if [ "$ticks" -gt ${GO_TICKS} ]; then echo "no go file" >&2; exit 254; fi
  read -t 0.1 -u 9 || true
done
for ((k = 1; k <= 48; k++)); do
  printf '%s/%s/out/%03d/%s\\n' "$i" "$n" "$k" "$(( (i * 7919 + n * 104729 + k * 31) % 1000003 ))-abcdefghijklmnopqrstuvwxyz-0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ"
  if [ $((k % 2)) -eq 0 ]; then printf '%s/%s/err/%03d/%s\\n' "$i" "$n" "$k" "$(( (i * 31 + n * 17 + k) % 9973 ))-stderr-line" >&2; fi
done
printf 'file of sandbox %s command %s\\n' "$i" "$n" > ${DIR}/out-$n.txt
exit $(( (i * ${PER_SANDBOX} + n) % 256 ))
`;

/** What command `n` of sandbox `i`, in pod `host`, must answer, computed here as the script does. */
function expected(host: string, i: number, n: number): SandboxExecutionResult {
  let stdout = `host=${host} sandbox=${i} seq=${n}\n`;
  let stderr = "";
  for (let k = 1; k <= 48; k++) {
    const kk = String(k).padStart(3, "0");
    stdout += `${i}/${n}/out/${kk}/${(i * 7919 + n * 104729 + k * 31) % 1000003}-abcdefghijklmnopqrstuvwxyz-0123456789-ABCDEFGHIJKLMNOPQRSTUVWXYZ\n`;
    if (k % 2 === 0) stderr += `${i}/${n}/err/${kk}/${(i * 31 + n * 17 + k) % 9973}-stderr-line\n`;
  }
  return { exitCode: (i * PER_SANDBOX + n) % 256, stdout, stderr };
}

const fileOf = (i: number, n: number) => `file of sandbox ${i} command ${n}\n`;

let stack: Stack;
let provider: KubernetesProvider;
/** The sandboxes by index, and the pod each runs in. */
const boxes: { sandbox: SandboxInstance; pod: string }[] = [];
let createMs = 0;

beforeAll(async () => {
  stack = await startStack({
    kubeconfig: inject("kubeconfig"),
    image: inject("clusterSandboxImage"),
    prefix: "sec-load",
    keys: [{ key: KEY, tenant: "load", maxSandboxes: SANDBOXES + 10 }],
  });
  // What the replica answered while it started: its /readyz says 503 until its caches are
  // synced, by design, and the harness polls it until it says 200. Everything after counts.
  atStart = await requestCounts();
  // As small as a sandboxd with 20 commands runs in: the node has 2 cores, and the operator
  // requests 10m CPU, 64Mi of memory and 64Mi of ephemeral storage for each (harness settings).
  await pools.create(stack.c, stack.ns, "load", {
    maxActive: SANDBOXES + 10,
    warm: 0,
    template: {
      resources: { cpu: "250m", memory: "128Mi", ephemeralStorage: "64Mi" },
      storage: { size: "16Mi" },
    },
  });
  provider = new KubernetesProvider({
    provisionerUrl: stack.prov.url,
    apiKey: KEY,
    pool: "load",
    readyTimeoutMs: 300_000,
  });
  const started = performance.now();
  const created = await Promise.allSettled(
    Array.from({ length: SANDBOXES }, (_, i) =>
      provider.create({
        language: "python",
        threadId: `load-${i}`,
        userId: "load",
        envs: { LOAD_INDEX: String(i) },
      }),
    ),
  );
  createMs = performance.now() - started;
  for (const r of created) if (r.status === "fulfilled") boxes.push({ sandbox: r.value, pod: "" });
  const failed = created.filter((r) => r.status === "rejected");
  if (failed.length)
    throw new Error(
      `${failed.length} of ${SANDBOXES} creates failed: ${String((failed[0] as PromiseRejectedResult).reason)}`,
    );
  // Indexed by creation order: create() i got LOAD_INDEX i.
  for (const b of boxes) {
    const s = await sandboxes.get(stack.c, stack.ns, b.sandbox.sandboxId);
    b.pod = s.status!.podName ?? s.metadata.name;
  }
  await Promise.all(
    boxes.map(async ({ sandbox }) => {
      await sandbox.filesystem.mkdir(DIR);
      await sandbox.filesystem.write(SCRIPT, script);
    }),
  );
  console.log(`load: ${SANDBOXES} sandboxes created and Ready in ${Math.round(createMs)} ms`);
});

afterAll(async () => {
  await Promise.allSettled(boxes.map((b) => b.sandbox.kill()));
  await provider?.close();
  await stack?.stop();
});

/** The provisioner's request counter by status code. */
let atStart: Awaited<ReturnType<typeof requestCounts>> = [];

/** The replica's answers by code and route since it started serving (atStart), none at 0. */
async function requestCountsSinceStart() {
  const since = (c: { code: string; route: string }) =>
    atStart.find((a) => a.code === c.code && a.route === c.route)?.count ?? 0;
  return (await requestCounts())
    .map((c) => ({ ...c, count: c.count - since(c) }))
    .filter((c) => c.count > 0);
}

async function requestCounts(): Promise<{ code: string; route: string; count: number }[]> {
  const text = await (await fetch(stack.prov.metricsUrl)).text();
  const out: { code: string; route: string; count: number }[] = [];
  for (const line of text.split("\n")) {
    const m = /^sandpit_provisioner_requests_total\{(.*)\} (\d+)$/.exec(line);
    if (!m) continue;
    const labels = Object.fromEntries(
      [...m[1]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]),
    );
    out.push({ code: labels.code!, route: labels.route!, count: Number(m[2]) });
  }
  return out;
}

describe("1,000 commands in flight through one provisioner replica", () => {
  test(
    "every command answered with exactly its own output and exit code, no 5xx, files kept",
    { timeout: 600_000 },
    async () => {
      expect(boxes).toHaveLength(SANDBOXES);
      const t0 = performance.now();
      let settledBeforeGo = 0;
      let goWritten = false;
      /** Streamed commands whose first line reached onStdout, and what each callback saw. */
      const streamed = new Map<string, { stdout: string; stderr: string; firstLine: boolean }>();
      const runs = boxes.flatMap(({ sandbox }, i) =>
        Array.from({ length: PER_SANDBOX }, (_, n) => {
          const key = `${i}/${n}`;
          const stream = n % STREAM_EVERY === 0;
          const seen = { stdout: "", stderr: "", firstLine: false };
          if (stream) streamed.set(key, seen);
          const run = sandbox.commands.run(`bash ${SCRIPT}`, {
            envs: { SEQ: String(n) },
            timeoutMs: 200_000,
            ...(stream
              ? {
                  onStdout: (d: string) => {
                    seen.stdout += d;
                    if (seen.stdout.includes("\n")) seen.firstLine = true;
                  },
                  onStderr: (d: string) => {
                    seen.stderr += d;
                  },
                }
              : {}),
          });
          return run.then(
            (r) => {
              if (!goWritten) settledBeforeGo++;
              return { i, n, ok: true as const, r };
            },
            (err: unknown) => {
              if (!goWritten) settledBeforeGo++;
              return { i, n, ok: false as const, err };
            },
          );
        }),
      );

      // All 1,000 started (each wrote its line) and every stream delivered its first line.
      const deadline = performance.now() + 240_000;
      let started: number[];
      for (;;) {
        started = await Promise.all(
          boxes.map(async ({ sandbox }) =>
            (await sandbox.filesystem.exists(`${DIR}/started`))
              ? (await sandbox.filesystem.read(`${DIR}/started`)).split("\n").filter(Boolean).length
              : 0,
          ),
        );
        const firstLines = [...streamed.values()].filter((s) => s.firstLine).length;
        if (started.every((c) => c === PER_SANDBOX) && firstLines === streamed.size) break;
        if (settledBeforeGo > 0 || performance.now() > deadline) {
          throw new Error(
            `not all in flight: started ${started.reduce((a, b) => a + b, 0)}/${SANDBOXES * PER_SANDBOX}, ` +
              `streams with a first line ${firstLines}/${streamed.size}, answered early ${settledBeforeGo}`,
          );
        }
        await new Promise((r) => setTimeout(r, 500));
      }
      const inFlightMs = performance.now() - t0;
      expect(settledBeforeGo).toBe(0);
      goWritten = true;
      await Promise.all(boxes.map(({ sandbox }) => sandbox.filesystem.write(`${DIR}/go`, "go\n")));

      const results = await Promise.all(runs);
      const doneMs = performance.now() - t0;
      const failures = results.filter((x) => !x.ok);
      expect(
        failures.map((f) => `${f.i}/${f.n}: ${String((f as { err: unknown }).err)}`),
        "commands that failed",
      ).toEqual([]);
      const wrong: string[] = [];
      for (const x of results) {
        if (!x.ok) continue;
        const want = expected(boxes[x.i]!.pod, x.i, x.n);
        const got = { exitCode: x.r.exitCode, stdout: x.r.stdout, stderr: x.r.stderr };
        if (JSON.stringify(got) !== JSON.stringify(want)) {
          wrong.push(
            `${x.i}/${x.n}: exit ${got.exitCode} (want ${want.exitCode}), stdout ${got.stdout.length}/${want.stdout.length} bytes, stderr ${got.stderr.length}/${want.stderr.length} bytes`,
          );
          // The first few in full, for whoever reads the failure.
          if (wrong.length <= 2) console.log(`command ${x.i}/${x.n}:`, JSON.stringify(x.r));
        }
        const seen = streamed.get(`${x.i}/${x.n}`);
        if (seen && (seen.stdout !== want.stdout || seen.stderr !== want.stderr))
          wrong.push(`${x.i}/${x.n}: its onStdout/onStderr callbacks saw other output`);
      }
      expect(wrong, "commands with output or an exit code not their own").toEqual([]);
      expect(results).toHaveLength(SANDBOXES * PER_SANDBOX);

      // Every command's file, after all of them: 1,000 reads through the same replica.
      const files = await Promise.all(
        boxes.flatMap(({ sandbox }, i) =>
          Array.from({ length: PER_SANDBOX }, async (_, n) => ({
            i,
            n,
            text: await sandbox.filesystem.read(`${DIR}/out-${n}.txt`),
          })),
        ),
      );
      expect(files.filter((f) => f.text !== fileOf(f.i, f.n))).toEqual([]);

      // No 5xx from the replica, and the proxy answered every command.
      const counts = await requestCountsSinceStart();
      expect(counts.filter((c) => c.code.startsWith("5"))).toEqual([]);
      const proxied = counts
        .filter((c) => c.route.includes("proxy") && c.code === "200")
        .reduce((a, c) => a + c.count, 0);
      expect(proxied).toBeGreaterThanOrEqual(SANDBOXES * PER_SANDBOX * 2);

      // Still healthy, and still serving.
      expect((await fetch(`${stack.prov.url}/healthz`)).status).toBe(200);
      expect((await fetch(`${stack.prov.url}/readyz`)).status).toBe(200);
      const after = await boxes[SANDBOXES - 1]!.sandbox.commands.run("echo $LOAD_INDEX");
      expect(after).toMatchObject({ exitCode: 0, stdout: `${SANDBOXES - 1}\n` });
      const list = await provisionerCall(stack.prov.url, "GET", "/v1/sandboxes", KEY);
      expect(list.status).toBe(200);
      expect(list.json.sandboxes).toHaveLength(SANDBOXES);

      console.log(
        `load: create ${Math.round(createMs)} ms; all ${SANDBOXES * PER_SANDBOX} in flight after ${Math.round(inFlightMs)} ms; ` +
          `all answered ${Math.round(doneMs)} ms after the first was sent`,
      );
    },
  );
});
