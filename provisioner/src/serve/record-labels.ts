/**
 * A serve sandbox's record as SDK labels, so it lives where the backend keeps the sandbox
 * (Docker: container labels; local: the sandbox's record in the state directory) and a
 * restarted serve finds it with `provider.list()`.
 *
 * SDK labels follow Kubernetes syntax (values: at most 63 of [A-Za-z0-9-_.], at most 32 labels),
 * which ids, DeerFlow's sandbox ids and JSON do not fit. So: a few plain labels to select by
 * (`docker ps --filter label=serve.sandpit.dev/tenant=default` works), and the whole record as
 * hex-encoded JSON split over `serve.sandpit.dev/r0`, `r1`, ... (hex is always a valid value).
 * Nothing secret is in a record: environment variables are not kept (the sandbox has them).
 */
const PREFIX = "serve.sandpit.dev";
/** Which serve state made the sandbox: the selector a restart lists by. */
export const STATE_LABEL = `${PREFIX}/state`;
const NAME_LABEL = `${PREFIX}/name`;
const TENANT_LABEL = `${PREFIX}/tenant`;
const CHUNK = 62; // an even number of hex digits per label
/** The SDK's limit, less the plain labels. */
const MAX_CHUNKS = 32 - 3;
/** The longest record (JSON bytes) the labels hold. */
export const MAX_RECORD_BYTES = (MAX_CHUNKS * CHUNK) / 2;

export function recordLabels<T extends { name: string; tenant: string }>(
  stateId: string,
  record: T,
): Record<string, string> | undefined {
  const hex = Buffer.from(JSON.stringify(record)).toString("hex");
  if (hex.length > MAX_CHUNKS * CHUNK) return undefined;
  const labels: Record<string, string> = {
    [STATE_LABEL]: stateId,
    [NAME_LABEL]: record.name,
    [TENANT_LABEL]: record.tenant,
  };
  for (let i = 0; i * CHUNK < hex.length; i++)
    labels[`${PREFIX}/r${i}`] = hex.slice(i * CHUNK, (i + 1) * CHUNK);
  return labels;
}

/** The record on a sandbox's labels, or undefined when they hold none (or a damaged one). */
export function recordOf(labels: Record<string, string>): unknown {
  let hex = "";
  for (let i = 0; i < MAX_CHUNKS && labels[`${PREFIX}/r${i}`] !== undefined; i++)
    hex += labels[`${PREFIX}/r${i}`];
  try {
    const r = JSON.parse(Buffer.from(hex, "hex").toString()) as { name?: unknown };
    return r.name === labels[NAME_LABEL] ? r : undefined;
  } catch {
    return undefined;
  }
}
