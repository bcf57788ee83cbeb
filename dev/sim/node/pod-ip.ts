/**
 * The pod IP a simulated kubelet reports for each pod (status.podIP/podIPs and the
 * downward-API `status.podIP`): a distinct, non-loopback address from 10.244.0.0/16
 * (the usual pod CIDR of a small cluster; the test cluster's Service range is
 * 10.0.0.0/24, so they never overlap).
 *
 * Why: EndpointSlice validation rejects loopback addresses ("may not be in the loopback
 * range"), so with 127.0.0.1 the EndpointSlice controller could never publish a
 * Service's endpoints for a simulated pod.
 *
 * NB: the address is only reported, never bound. Every pod still shares the host's
 * network namespace and listens on 127.0.0.1 (or all interfaces) at its own host ports
 * (see ../runtime/container-launch.ts); tests reach a pod through `sim.hostPort(...)`, never
 * through its pod IP. A container that dials its own status.podIP would fail: none of
 * the project's does. (As root, `ip addr add <ip>/32 dev lo` would make one reachable.)
 *
 * Guarantee: distinct within one simulator process for 65 024 pods (254 hosts x 256
 * subnets, never .0 or .255), then addresses are reused in order.
 */
const HOSTS_PER_SUBNET = 254;
const SUBNETS = 256;

let allocated = 0;

export function allocatePodIP(): string {
  allocated++;
  const n = allocated % (HOSTS_PER_SUBNET * SUBNETS);
  return `10.244.${Math.floor(n / HOSTS_PER_SUBNET)}.${(n % HOSTS_PER_SUBNET) + 1}`;
}
