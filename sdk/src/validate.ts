/** Argument checks every provider makes before its backend sees the call. */
import { PORT_RULE, isPort } from "@sandpit/sandboxd/protocol";
import { SandboxError } from "./errors.ts";

/** getHost's port: a TCP port, or INVALID_ARGUMENT saying what one is. */
export function checkPort(port: number): void {
  if (!isPort(port)) {
    throw new SandboxError(`port must be ${PORT_RULE}, got ${port}`, "INVALID_ARGUMENT");
  }
}
