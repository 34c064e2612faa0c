/**
 * A signal that aborts after `ms`, or as soon as `parent` does, whose timer goes as soon as the
 * work it bounds is done (`clear`). AbortSignal.timeout keeps its timer, and with it the signal
 * and what listens to it, for its whole duration: the operator bounds every reconcile (11
 * minutes) and every API request (30 s) that way, and 1,000 sandboxes that are health-checked
 * every few seconds left 14,000 timers behind (a tenth of the operator's live heap).
 */
export interface Deadline {
  signal: AbortSignal;
  /** Drops the timer and the link to the parent; the signal stays as it is. */
  clear(): void;
}

export function deadline(ms: number, parent?: AbortSignal): Deadline {
  const controller = new AbortController();
  const timer = setTimeout(
    () => controller.abort(new DOMException(`timed out after ${ms} ms`, "TimeoutError")),
    ms,
  );
  timer.unref();
  const follow = () => controller.abort(parent!.reason);
  if (parent?.aborted) follow();
  else parent?.addEventListener("abort", follow, { once: true });
  return {
    signal: controller.signal,
    clear: () => {
      clearTimeout(timer);
      parent?.removeEventListener("abort", follow);
    },
  };
}
