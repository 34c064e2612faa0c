/**
 * Named crash points for the invariant tests (test/provisioner/fastpath.test.ts): with
 * SANDPIT_FAULT_AT=<step> the process SIGKILLs itself on reaching that step. Read once at
 * start; production pays one string comparison per step.
 */
const AT = process.env.SANDPIT_FAULT_AT;

export function faultPoint(step: string): void {
  if (AT === step) process.kill(process.pid, "SIGKILL");
}
