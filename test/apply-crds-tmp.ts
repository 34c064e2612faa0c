import { clients, ensureCrds } from "./cluster/harness.ts";
await ensureCrds(clients("/root/.cache/sandpit/cluster-run/admin.kubeconfig"));
console.log("crds applied");
