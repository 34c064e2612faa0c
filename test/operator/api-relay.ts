/**
 * Lets pods reach the test cluster's API server through the `kubernetes` Service, as they do in
 * any cluster. test/cluster/up runs kube-apiserver on 127.0.0.1 only, with
 * `--endpoint-reconciler-type none`, so that Service has no endpoints and in-cluster clients
 * (the service account, 10.96.0.1:443) get "connection refused".
 *
 * While a suite needs it, a TCP relay on the node address (which pods reach, as they reach the
 * cluster's DNS there) forwards to the API server, and an EndpointSlice of the `kubernetes`
 * Service points at the relay. TLS passes through untouched: the server certificate is valid
 * for 10.96.0.1, and the API server sees each pod's own credentials. Nothing happens when the
 * Service already has endpoints.
 */
import { createConnection, createServer, type Socket } from "node:net";
import { DiscoveryV1Api, type KubeConfig } from "@kubernetes/client-node";

const NODE_IP = "10.244.0.1";

export interface ApiRelay {
  /** Removes the EndpointSlice and stops the relay. */
  close(): Promise<void>;
}

export async function relayApiToPods(kc: KubeConfig, id: string): Promise<ApiRelay> {
  const discovery = kc.makeApiClient(DiscoveryV1Api);
  const slices = await discovery.listNamespacedEndpointSlice({
    namespace: "default",
    labelSelector: "kubernetes.io/service-name=kubernetes",
  });
  if (slices.items.some((s) => (s.endpoints ?? []).length > 0)) return { close: async () => {} };

  const upstream = new URL(kc.getCurrentCluster()!.server);
  const sockets = new Set<Socket>();
  const server = createServer((client) => {
    const api = createConnection({ host: upstream.hostname, port: Number(upstream.port || 443) });
    for (const s of [client, api]) {
      sockets.add(s);
      s.on("close", () => sockets.delete(s));
      s.on("error", () => {
        client.destroy();
        api.destroy();
      });
    }
    client.pipe(api).pipe(client);
  });
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, NODE_IP, () => resolve());
  });
  const port = (server.address() as { port: number }).port;
  const name = `kubernetes-relay-${id}`;
  await discovery.createNamespacedEndpointSlice({
    namespace: "default",
    body: {
      metadata: {
        name,
        labels: {
          "kubernetes.io/service-name": "kubernetes",
          "endpointslice.kubernetes.io/managed-by": "sandpit-test",
        },
      },
      addressType: "IPv4",
      endpoints: [{ addresses: [NODE_IP], conditions: { ready: true } }],
      ports: [{ name: "https", port, protocol: "TCP" }],
    },
  });
  return {
    async close() {
      await discovery
        .deleteNamespacedEndpointSlice({ name, namespace: "default" })
        .catch(() => undefined);
      for (const s of sockets) s.destroy();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    },
  };
}
