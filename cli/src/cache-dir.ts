/** The CLI's cache directory: $XDG_CACHE_HOME/sandpit (~/.cache/sandpit). Everything in it may be deleted. */
import { homedir } from "node:os";
import { join } from "node:path";

export function cacheDir(...parts: string[]): string {
  return join(process.env.XDG_CACHE_HOME || join(homedir(), ".cache"), "sandpit", ...parts);
}
