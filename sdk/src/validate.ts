/** Argument checks every provider makes before its backend sees the call. */
import { PORT_RULE, PROCESS_SIGNALS, isPort } from "@sandpit/sandboxd/wire";
import { SandboxError } from "./errors.ts";
import type { ProcessSignal } from "./types.ts";

/** getHost's port: a TCP port, or INVALID_ARGUMENT saying what one is. */
export function checkPort(port: number): void {
  if (!isPort(port)) {
    throw new SandboxError(`port must be ${PORT_RULE}, got ${port}`, "INVALID_ARGUMENT");
  }
}

/** What a file write takes: text or bytes. */
export function checkContent(content: unknown): asserts content is string | Uint8Array {
  if (typeof content !== "string" && !(content instanceof Uint8Array))
    throw new SandboxError("content must be a string or a Uint8Array", "INVALID_ARGUMENT");
}

/** What `writeStream` takes: anything async-iterable (a web ReadableStream is one). */
export function checkSource(
  data: unknown,
): asserts data is ReadableStream<Uint8Array> | AsyncIterable<Uint8Array> {
  if (data == null || typeof (data as AsyncIterable<unknown>)[Symbol.asyncIterator] !== "function")
    throw new SandboxError(
      "data must be a ReadableStream or an async iterable of Uint8Array",
      "INVALID_ARGUMENT",
    );
}

/** A signal for a background process's group: one of sandboxd's, on every provider. */
export function checkSignal(signal: unknown): ProcessSignal {
  if (!(PROCESS_SIGNALS as readonly unknown[]).includes(signal))
    throw new SandboxError(
      `unknown signal ${JSON.stringify(signal)}: use one of ${PROCESS_SIGNALS.join(", ")}`,
      "INVALID_ARGUMENT",
    );
  return signal as ProcessSignal;
}
