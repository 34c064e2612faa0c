/**
 * An unchanged E2B program (the official `e2b` package), run by test/chart/ingress.test.ts with
 * only E2B_DOMAIN and E2B_API_KEY set (and NODE_EXTRA_CA_CERTS, Node's own way to trust the
 * test's CA): every request goes to https://api.<domain> or https://<port>-<id>.<domain>, through
 * the ingress controller. Prints one JSON object with what it saw; the test judges it.
 */
import { createHash, randomBytes } from "node:crypto";
import { Sandbox } from "e2b";

const HOME = "/home/user";
const seen: Record<string, unknown> = {};
const sha = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

const sbx = await Sandbox.create({ timeoutMs: 600_000 });
seen.sandboxId = sbx.sandboxId;
try {
  const r = await sbx.commands.run("echo hello from $(uname -s)");
  seen.run = { stdout: r.stdout, exitCode: r.exitCode };

  await sbx.files.write(`${HOME}/note.txt`, "through the ingress");
  seen.read = await sbx.files.read(`${HOME}/note.txt`);

  const big = randomBytes(10 * 1024 * 1024);
  await sbx.files.write(
    `${HOME}/big.bin`,
    big.buffer.slice(big.byteOffset, big.byteOffset + big.length),
  );
  const inside = await sbx.commands.run(`sha256sum ${HOME}/big.bin`);
  const back = await sbx.files.read(`${HOME}/big.bin`, { format: "bytes" });
  seen.upload = { sent: sha(big), inside: inside.stdout.split(" ")[0], back: sha(back) };

  // Output must arrive as it is written, not when the command ends: each line's arrival time.
  const started = Date.now();
  const lines: { line: string; atMs: number }[] = [];
  await sbx.commands.run("for i in 1 2 3; do echo line$i; sleep 1; done", {
    onStdout: (line) => void lines.push({ line: line.trim(), atMs: Date.now() - started }),
  });
  seen.stream = { lines, endedMs: Date.now() - started };

  // A server in the sandbox, opened the way a browser opens getHost's URL.
  await sbx.files.write(`${HOME}/site/index.html`, "<h1>served from the sandbox</h1>");
  await sbx.commands.run(`python3 -m http.server 8000 --directory ${HOME}/site`, {
    background: true,
  });
  const url = `https://${sbx.getHost(8000)}/`;
  let page: { status: number; body: string } | undefined;
  for (let i = 0; i < 50 && page?.status !== 200; i++) {
    if (i) await new Promise((r) => setTimeout(r, 200));
    const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
    page = { status: res.status, body: await res.text() };
  }
  seen.browser = { url, ...page };
} finally {
  await sbx.kill();
}
seen.runningAfterKill = await sbx.isRunning();
process.stdout.write(`${JSON.stringify(seen)}\n`);
