// Docker HEALTHCHECK for sandboxd: exits 0 when GET /healthz answers 200 on sandboxd's own
// address (SANDBOXD_LISTEN, as the container was started with), 1 otherwise. Plain ESM with no
// dependencies: it is copied into the image as is and run with the image's Node.
import { request } from "node:http";

const listen = process.env.SANDBOXD_LISTEN || "0.0.0.0:8080";
const timeout = 2500;

function check() {
  if (listen.startsWith("unix:")) return viaSocket(listen.slice("unix:".length));
  const i = listen.lastIndexOf(":");
  const host = listen.slice(0, i).replace(/^\[|\]$/g, "");
  // A wildcard address is reached on loopback.
  const target =
    host === "0.0.0.0" || host === ""
      ? "127.0.0.1"
      : host === "::"
        ? "[::1]"
        : host.includes(":")
          ? `[${host}]`
          : host;
  return fetch(`http://${target}:${listen.slice(i + 1)}/healthz`, {
    signal: AbortSignal.timeout(timeout),
  }).then((r) => r.ok);
}

function viaSocket(socketPath) {
  return new Promise((resolve) => {
    const req = request({ socketPath, path: "/healthz", timeout }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("timeout", () => req.destroy());
    req.on("error", () => resolve(false));
    req.end();
  });
}

check().then(
  (ok) => process.exit(ok ? 0 : 1),
  () => process.exit(1),
);
