/**
 * The sandbox image every suite and benchmark uses: built to trust this machine's CA store, so
 * pip and npm inside sandboxes work behind a TLS-inspecting proxy. One variant for everyone, so
 * `sandpit-sandbox:latest` always names the image the tests ran.
 */
import { existsSync } from "node:fs";
import type Docker from "dockerode";
import { ensureSandboxImage } from "@sandpit/images/sandbox";

const MACHINE_TRUST_STORE = "/etc/ssl/certs/ca-certificates.crt";

export function ensureTestImage(o: { docker?: Docker; log?: (line: string) => void } = {}) {
  return ensureSandboxImage({
    ...o,
    ...(existsSync(MACHINE_TRUST_STORE) ? { caBundle: MACHINE_TRUST_STORE } : {}),
  });
}
