/**
 * The sandbox's one idle measure, kept where the work runs. A sandbox is busy while an
 * authenticated request or upgraded connection (a terminal's WebSocket, a port tunnel) is open,
 * and while anything it started runs on without a request: a background process, a terminal, a
 * code cell, a shell-session command. Idle time counts from the moment the last of those ended.
 *
 * Idle reapers (the operator's idle timeout, serve's) read it from /healthz: bytes through a
 * proxy cannot see a `sleep 3600` that prints nothing, this can.
 */
export class Activity {
  #open = 0;
  #last = Date.now();
  #draining = false;
  readonly #sources: (() => boolean)[] = [];
  readonly #sampler: NodeJS.Timeout;

  constructor(sampleMs = 1_000) {
    // Sources are sampled, not evented: a process that ends unobserved still moved `#last`
    // to within a sample of its end.
    this.#sampler = setInterval(() => this.idleMs(), sampleMs);
    this.#sampler.unref();
  }

  /** Marks work in progress until the returned function is called (later calls are no-ops). */
  begin(): () => void {
    this.#open++;
    let ended = false;
    return () => {
      if (ended) return;
      ended = true;
      this.#open--;
      this.#last = Date.now();
    };
  }

  /** Adds a source of work that runs without a request (true while some of it runs). */
  watch(busy: () => boolean): void {
    this.#sources.push(busy);
  }

  /** Milliseconds since the sandbox last did anything; 0 while it does. */
  idleMs(now = Date.now()): number {
    return this.#busy(now) ? 0 : Math.max(0, now - this.#last);
  }

  /**
   * Starts draining if nothing runs now and nothing has for at least `minIdleMs`; true if it
   * did (or had). Synchronous, so nothing can begin between the check and the switch; callers
   * refuse all work once `draining` (protocol.ts, DRAIN_PATH).
   */
  drain(minIdleMs: number, now = Date.now()): boolean {
    if (this.#draining) return true;
    if (this.#busy(now) || now - this.#last < minIdleMs) return false;
    this.#draining = true;
    return true;
  }

  get draining(): boolean {
    return this.#draining;
  }

  #busy(now: number): boolean {
    if (this.#open > 0 || this.#sources.some((busy) => busy())) {
      this.#last = now;
      return true;
    }
    return false;
  }

  stop(): void {
    clearInterval(this.#sampler);
  }
}
