/**
 * Which cluster and credentials `kubectl leasehold` uses: the user's kubeconfig, as
 * kubectl picks it. `--kubeconfig FILE` when given, else client-node's
 * loadFromDefault() ($KUBECONFIG, its files merged; else ~/.kube/config; else the
 * in-cluster service account); `--context NAME` when given, else the current context.
 * Guarantees: a missing or unreadable file, an unknown context or a context without a
 * cluster is a PluginError (exit 2) naming the file or context, raised before any
 * request is sent.
 */
import { existsSync } from 'node:fs';
import { KubeConfig } from '@kubernetes/client-node';
import { PluginError, type TargetName } from './plugin-error.ts';

export interface KubeTarget extends TargetName {
  kc: KubeConfig;
}

/** NB: reads process.env.KUBECONFIG, as client-node's loadFromDefault() does. */
export function loadKubeTarget(flags: { kubeconfig?: string; context?: string }): KubeTarget {
  const env = process.env;
  const kc = new KubeConfig();
  const source = flags.kubeconfig
    ? `--kubeconfig ${flags.kubeconfig}`
    : env.KUBECONFIG
      ? `KUBECONFIG=${env.KUBECONFIG}`
      : 'the default kubeconfig (~/.kube/config, else in-cluster)';
  if (flags.kubeconfig && !existsSync(flags.kubeconfig))
    throw new PluginError('E_KUBECONFIG', `${source}: no such file`, 2);
  try {
    if (flags.kubeconfig) kc.loadFromFile(flags.kubeconfig);
    else kc.loadFromDefault();
  } catch (err) {
    throw new PluginError(
      'E_KUBECONFIG',
      `${source}: not a usable kubeconfig: ${err instanceof Error ? err.message : String(err)}`,
      2,
      { cause: err },
    );
  }
  if (flags.context) {
    const names = kc.getContexts().map((c) => c.name);
    if (!names.includes(flags.context))
      throw new PluginError(
        'E_CONTEXT',
        `--context ${flags.context}: no such context in ${source} (its contexts: ${names.join(', ') || 'none'})`,
        2,
      );
    kc.setCurrentContext(flags.context);
  }
  const context = kc.getCurrentContext();
  const cluster = kc.getCurrentCluster();
  if (!cluster)
    throw new PluginError(
      'E_CONTEXT',
      `context ${JSON.stringify(context)} of ${source} names no cluster: pass --context or fix the kubeconfig`,
      2,
    );
  return { kc, server: cluster.server, context };
}
