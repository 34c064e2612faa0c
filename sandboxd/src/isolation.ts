/**
 * Whether this sandbox's network policy is in force yet. A NetworkPolicy is programmed by the
 * cluster's enforcer some time after the pod starts (seconds on a busy node), and until then the
 * pod's traffic is not filtered at all; a sandbox must not run anyone's code in that window.
 * The operator names a server that every sandbox's policy refuses and that answers when
 * reachable (the API server's endpoint by default): while a connection there succeeds, the
 * policy does not hold yet. Once connections fail, twice in a row (refused, as kube-router
 * rejects, or silent, as an enforcer that drops packets leaves them), the sandbox is isolated
 * for good: an enforcer only ever adds a policy's rules for a running pod.
 *
 * What it cannot tell: a probe target that is down looks like isolation. The operator picks an
 * address that answers (docs/security.md).
 */
import type { Logger } from "./log.ts";

const { connect } = process.getBuiltinModule("node:net");

/**
 * Between attempts while the target still answers: 200 ms for the first 2 s (an enforcer
 * programs a pod within seconds), then twice as long each time up to 5 s, so that many pods on
 * a cluster that never enforces a policy do not flood the target with connections.
 */
const FIRST_INTERVAL_MS = 200;
const FAST_ATTEMPTS = 10;
const MAX_INTERVAL_MS = 5_000;

function intervalAfter(attempts: number): number {
  if (attempts <= FAST_ATTEMPTS) return FIRST_INTERVAL_MS;
  return Math.min(MAX_INTERVAL_MS, FIRST_INTERVAL_MS * 2 ** (attempts - FAST_ATTEMPTS));
}
/** A connection not made in this long counts as refused (an enforcer that drops packets). */
const TIMEOUT_MS = 2_000;
/** Failed attempts in a row that make the sandbox isolated. */
const FAILURES = 2;

export class IsolationProbe {
  readonly #host: string;
  readonly #port: number;
  readonly #logger: Logger;
  #isolated = false;
  #failures = 0;
  #attempts = 0;
  #timer: NodeJS.Timeout | undefined;
  #stopped = false;
  readonly #started = performance.now();

  /** `target` is host:port, an IPv6 host in brackets (config.ts checks the form). */
  constructor(target: string, logger: Logger) {
    const i = target.lastIndexOf(":");
    this.#host = target.slice(0, i).replace(/^\[(.*)\]$/, "$1");
    this.#port = Number(target.slice(i + 1));
    this.#logger = logger;
  }

  get isolated(): boolean {
    return this.#isolated;
  }

  start(): void {
    this.#attempt();
  }

  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
  }

  #attempt(): void {
    if (this.#stopped || this.#isolated) return;
    this.#attempts++;
    const socket = connect({ host: this.#host, port: this.#port });
    let settled = false;
    const settle = (reached: boolean, why: string) => {
      if (settled) return;
      settled = true;
      socket.destroy();
      this.#failures = reached ? 0 : this.#failures + 1;
      if (this.#failures >= FAILURES) {
        this.#isolated = true;
        this.#logger.info(
          {
            probe: `${this.#host}:${this.#port}`,
            why,
            attempts: this.#attempts,
            ms: Math.round(performance.now() - this.#started),
          },
          "network policy in force: the probe target no longer answers",
        );
        return;
      }
      if (this.#stopped) return;
      this.#timer = setTimeout(() => this.#attempt(), reached ? intervalAfter(this.#attempts) : 0);
      this.#timer.unref();
    };
    socket.setTimeout(TIMEOUT_MS, () => settle(false, "timed out"));
    socket.once("connect", () => settle(true, "connected"));
    socket.once("error", (err: NodeJS.ErrnoException) => settle(false, err.code ?? err.message));
  }
}
