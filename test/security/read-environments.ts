/**
 * What code in a sandbox runs to look for credentials in every environment it can read: its
 * own, every /proc/<pid>/environ (sandboxd's, PID 1's), /proc/self and `env`. Shared by the
 * token tests on Kubernetes (test/security/tokens.test.ts) and on Docker (test/docker).
 */
export /** Every environment the sandbox's code can read, as one text. */
const READ_EVERY_ENVIRONMENT = `
import os, subprocess
seen = ["\\n".join(f"{k}={v}" for k, v in os.environ.items())]
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            seen.append(open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace").replace("\\0", "\\n"))
        except OSError:
            pass
seen.append(open("/proc/self/environ", "rb").read().decode(errors="replace").replace("\\0", "\\n"))
seen.append(subprocess.run(["env"], capture_output=True, text=True).stdout)
print("\\n".join(seen))
`;
