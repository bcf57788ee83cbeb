/**
 * Prometheus metrics: one registry per process, with the process's default metrics
 * (CPU, memory, event loop) under the component prefix.
 */
import { collectDefaultMetrics, Registry } from 'prom-client';

export function createRegistry(prefix: 'leasehold_agent_' | 'leasehold_manager_'): Registry {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry, prefix });
  return registry;
}
