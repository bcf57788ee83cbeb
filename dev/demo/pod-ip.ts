/**
 * Pod IPs for simulated pods that Kubernetes accepts in EndpointSlices (proposed hook
 * for dev/sim; not wired yet). Today every simulated pod reports status.podIP
 * 127.0.0.1, which EndpointSlice validation rejects ("may not be in the loopback
 * range"), so the EndpointSlice controller cannot publish a share's Service endpoints.
 *
 * Hook (one line, dev/sim/pod-worker.ts, PodWorker constructor):
 *   podIP: allocatePodIP(),            // instead of '127.0.0.1'
 * Processes keep listening on the host (0.0.0.0 / their host ports), so nothing else
 * changes; only a container that dials its own status.podIP would need the address on
 * a local interface (as root: `ip addr add <ip>/32 dev lo`).
 *
 * Invariant: unique within one process (one simulator) for 65 000 pods.
 */
let allocated = 0;

export function allocatePodIP(): string {
  allocated++;
  const n = allocated % 65_024; // 254 hosts x 256 subnets
  return `10.244.${Math.floor(n / 254)}.${(n % 254) + 1}`;
}
