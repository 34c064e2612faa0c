/**
 * serve's first sandbox (docs/serve.md): made once serve listens, through its own native API
 * with one of its keys, so what it shows (a line of Python, a line of TypeScript, the curl that
 * reaches it) is exactly what a user's client does next. It is a normal sandbox of that key's
 * tenant: listed by the API, paused when idle, deleted at its TTL. Its thread id makes the
 * create idempotent, so a restarted serve finds the same sandbox instead of making another.
 */

/** The thread of the first sandbox: one per tenant and serve state. */
export const FIRST_THREAD = "first-sandbox";
/** It lives an hour: a demo to try the APIs on, not a workspace to keep. */
export const FIRST_TTL_SECONDS = 3600;

const PYTHON = `import platform; print(f"Hello from Python {platform.python_version()}")`;
const TYPESCRIPT = `const lang: string = "TypeScript"; console.log(\`Hello from \${lang} on Node \${process.version}\`);`;

export interface FirstSandbox {
  id: string;
  /** The proxy URL: sandboxd's native API under it (docs/architecture.md). */
  url: string;
  expiresAt: string | undefined;
  /** False when a previous start of this serve made it. */
  created: boolean;
  python: string;
  typescript: string;
}

/**
 * Creates (or finds again) the first sandbox and runs one line in each language. Every call is
 * bounded by `timeoutMs`; an error says which step failed.
 */
export async function firstSandbox(
  url: string,
  key: string,
  timeoutMs = 180_000,
): Promise<FirstSandbox> {
  const call = async (step: string, path: string, body: unknown) => {
    const res = await fetch(`${url}${path}`, {
      method: "POST",
      headers: { authorization: `Bearer ${key}`, "content-type": "application/json" },
      body: JSON.stringify(body),
      signal: AbortSignal.timeout(timeoutMs),
    }).catch((err: unknown) => {
      throw new Error(`${step}: ${(err as Error).message}`);
    });
    const text = await res.text();
    let json: Record<string, unknown> = {};
    try {
      json = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // not JSON: the status line and text say what went wrong
    }
    if (!res.ok) {
      const e = json.error as { message?: string } | undefined;
      throw new Error(`${step}: ${res.status} ${e?.message ?? text.slice(0, 200)}`);
    }
    return { json, created: res.status === 201 };
  };
  const made = await call("create", "/v1/sandboxes", {
    threadId: FIRST_THREAD,
    ttlSeconds: FIRST_TTL_SECONDS,
  });
  const id = String(made.json.id);
  const run = async (language: "python" | "typescript", code: string) => {
    const { json } = await call(language, `/v1/sandboxes/${id}/proxy/v1/code/execute`, {
      language,
      code,
    });
    if (json.success !== true) {
      const e = json.error as { message?: string } | undefined;
      throw new Error(`${language}: ${e?.message ?? String(json.stderr)}`);
    }
    return String(json.stdout).trim();
  };
  return {
    id,
    url: String(made.json.url),
    expiresAt: made.json.expiresAt as string | undefined,
    created: made.created,
    python: await run("python", PYTHON),
    typescript: await run("typescript", TYPESCRIPT),
  };
}

/** What a person reads: the output and how to reach the sandbox (`keyRef` names the key). */
export function describeFirst(f: FirstSandbox, keyRef: string): string {
  const execute = `${f.url}/v1/code/execute`;
  return (
    `first sandbox: ${f.id}${f.created ? "" : " (made by an earlier start)"}` +
    `${f.expiresAt ? `, deleted at ${f.expiresAt}` : ""}\n` +
    `  python:     ${f.python}\n` +
    `  typescript: ${f.typescript}\n` +
    `  run code in it:\n` +
    `    curl -s -H "Authorization: Bearer ${keyRef}" -H 'content-type: application/json' \\\n` +
    `      -d '{"language":"python","code":"print(6*7)"}' ${execute}\n`
  );
}
