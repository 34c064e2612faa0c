/**
 * An ingress controller in front of the test cluster, the way a user's cluster has one: Traefik
 * (built by build.sh from its upstream module, test/cluster/tools/traefik) as a host process, like
 * CoreDNS and kube-router, watching the Ingresses of one namespace and one IngressClass with the
 * admin kubeconfig, serving HTTPS on port 443 of a loopback address of its own. A wildcard DNS
 * record points a zone at that address: a second CoreDNS (the cluster's binary) answers every
 * name under the zone with it, on port 53 of the same address.
 *
 * Programs reach the controller by name through `run`: it starts them in a mount namespace of
 * their own whose /etc/resolv.conf names that DNS server, so every resolver (glibc's, Node's, the
 * Rust one in the Python E2B SDK's HTTP client) finds `*.<zone>` as it would a real record, and
 * nothing is patched in the program. Both processes are stopped by PID.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { Resolver } from "node:dns/promises";
import { randomInt } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { NetworkingV1Api } from "@kubernetes/client-node";
import { clients, waitFor } from "./harness.ts";

/** The controller Traefik's Kubernetes Ingress provider claims IngressClasses for. */
const TRAEFIK_CONTROLLER = "traefik.io/ingress-controller";

export interface IngressController {
  /** The loopback address the controller (port 443) and the zone's DNS server (port 53) use. */
  address: string;
  /** Traefik's own `--version` line, for the report. */
  version: string;
  /**
   * Runs `cmd` with `env` only (plus PATH and HOME), resolving names through the zone's DNS
   * server; resolves with its exit code and output, killing it after `timeoutMs`.
   */
  run(
    cmd: string,
    args: string[],
    env: Record<string, string>,
    timeoutMs: number,
  ): Promise<{ code: number | null; stdout: string; stderr: string }>;
  /** Recent output of Traefik and of the DNS server. */
  logs(): string;
  /** Stops both processes (by PID) and deletes the IngressClass. */
  stop(): Promise<void>;
}

interface Proc {
  proc: ChildProcess;
  out: () => string;
  stop: () => Promise<void>;
}

function startProcess(bin: string, args: string[], env: Record<string, string>): Proc {
  const proc = spawn(bin, args, {
    env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/root", ...env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  const keep = (b: Buffer) => {
    out += b.toString();
    if (out.length > 1_000_000) out = out.slice(-500_000);
  };
  proc.stdout!.on("data", keep);
  proc.stderr!.on("data", keep);
  const exited = new Promise<void>((resolve) => proc.once("exit", () => resolve()));
  return {
    proc,
    out: () => out,
    stop: async () => {
      if (proc.exitCode !== null || proc.signalCode !== null) return;
      proc.kill("SIGTERM");
      const killed = setTimeout(() => proc.kill("SIGKILL"), 10_000);
      await exited;
      clearTimeout(killed);
    },
  };
}

/**
 * Starts Traefik for `ingressClass` (created here, as the controller's own install would) in
 * `namespace`, and DNS for `zone`. `bin` is build.sh's bin directory.
 */
export async function startIngressController(o: {
  bin: string;
  kubeconfig: string;
  namespace: string;
  ingressClass: string;
  zone: string;
}): Promise<IngressController> {
  const net = clients(o.kubeconfig).kc.makeApiClient(NetworkingV1Api);
  await net.createIngressClass({
    body: {
      metadata: { name: o.ingressClass, labels: { "sandpit.dev/test": "ingress" } },
      spec: { controller: TRAEFIK_CONTROLLER },
    },
  });
  // An address of its own in 127/8, so runs side by side never share port 443 or 53.
  const address = `127.${randomInt(64, 250)}.${randomInt(1, 250)}.${randomInt(1, 250)}`;
  const dir = mkdtempSync(join(tmpdir(), "sandpit-ingress-"));
  const resolvConf = join(dir, "resolv.conf");
  writeFileSync(resolvConf, `nameserver ${address}\n`);
  const upstream = /^nameserver\s+(\S+)/m.exec(readFileSync("/etc/resolv.conf", "utf8"))?.[1];
  writeFileSync(
    join(dir, "Corefile"),
    [
      `${o.zone}:53 {`,
      `  bind ${address}`,
      `  template IN A ${o.zone} {`,
      `    answer "{{ .Name }} 60 IN A ${address}"`,
      `  }`,
      // The zone has no IPv6 address: an empty answer, not a failure.
      `  template IN AAAA ${o.zone} {`,
      `    rcode NOERROR`,
      `  }`,
      `}`,
      // Any other name, as the machine resolves it.
      ...(upstream ? [`.:53 {`, `  bind ${address}`, `  forward . ${upstream}`, `}`] : []),
      "",
    ].join("\n"),
  );

  const procs: Proc[] = [];
  const logs = () =>
    procs.map((p, i) => `--- ${["traefik", "dns"][i]}\n${p.out().slice(-20_000)}`).join("\n");
  const stop = async () => {
    for (const p of procs) await p.stop();
    await net.deleteIngressClass({ name: o.ingressClass }).catch(() => undefined);
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const pingPort = 8082;
    procs.push(
      startProcess(
        join(o.bin, "traefik"),
        [
          "--global.checkNewVersion=false",
          "--global.sendAnonymousUsage=false",
          "--log.level=INFO",
          `--entryPoints.websecure.address=${address}:443`,
          // The 100 MiB uploads of the E2B suites take longer than the default 60 s on a busy
          // machine (docs/e2b.md, Behind an ingress controller).
          "--entryPoints.websecure.transport.respondingTimeouts.readTimeout=600s",
          `--entryPoints.ping.address=${address}:${pingPort}`,
          "--ping.entryPoint=ping",
          "--providers.kubernetesIngress=true",
          `--providers.kubernetesIngress.namespaces=${o.namespace}`,
          `--providers.kubernetesIngress.ingressClass=${o.ingressClass}`,
        ],
        { KUBECONFIG: o.kubeconfig },
      ),
    );
    procs.push(startProcess(join(o.bin, "coredns"), ["-conf", join(dir, "Corefile")], {}));
    const [traefik, dns] = procs as [Proc, Proc];
    await waitFor("Traefik's ping", 60_000, async () => {
      if (traefik.proc.exitCode !== null) throw new Error(`traefik exited:\n${traefik.out()}`);
      return (await fetch(`http://${address}:${pingPort}/ping`)).ok;
    });
    const resolver = new Resolver({ timeout: 1_000, tries: 1 });
    resolver.setServers([address]);
    await waitFor(`the DNS server answering for *.${o.zone}`, 30_000, async () => {
      if (dns.proc.exitCode !== null) throw new Error(`coredns exited:\n${dns.out()}`);
      return (await resolver.resolve4(`probe.${o.zone}`))[0] === address;
    });
    const version = await new Promise<string>((resolve) =>
      execFile(join(o.bin, "traefik"), ["version"], (_err, stdout) =>
        resolve(/^Version:\s+(\S+)/m.exec(stdout)?.[1] ?? "unknown"),
      ),
    );
    return {
      address,
      version,
      logs,
      stop,
      run: (cmd, args, env, timeoutMs) =>
        new Promise((resolve) => {
          // A private mount namespace: the bind mount of resolv.conf is this program's alone.
          const script = 'mount --bind "$1" /etc/resolv.conf && shift && exec "$@"';
          execFile(
            "unshare",
            [
              "--mount",
              "--propagation",
              "private",
              "sh",
              "-c",
              script,
              "sh",
              resolvConf,
              cmd,
              ...args,
            ],
            {
              env: { PATH: process.env.PATH ?? "", HOME: process.env.HOME ?? "/root", ...env },
              timeout: timeoutMs,
              killSignal: "SIGKILL",
              maxBuffer: 16 * 1024 * 1024,
            },
            (err, stdout, stderr) =>
              resolve({
                code: err ? (typeof err.code === "number" ? err.code : null) : 0,
                stdout,
                stderr,
              }),
          );
        }),
    };
  } catch (err) {
    const text = logs();
    await stop();
    throw new Error(`${String(err)}\n${text}`, { cause: err });
  }
}
