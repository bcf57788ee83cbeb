/**
 * How `kubectl leasehold` fails (pure): one message naming the input or the API server
 * and the rule, and the exit code: 2 for bad usage or a bad kubeconfig/context (nothing
 * was asked of the cluster), 1 when the cluster could not answer or has no such share.
 * Read failures arrive as lib/errors.ts's KubeApiError (operation and HTTP status) and
 * are told apart here: no answer (unreachable), 401, 403 (with the RBAC it needs).
 */
import { apiMessageOf, KubeApiError, LeaseholdError } from '../lib/errors.ts';

export class PluginError extends LeaseholdError {
  readonly exitCode: 1 | 2;
  constructor(code: string, message: string, exitCode: 1 | 2, options?: { cause?: unknown }) {
    super(code, message, options);
    this.exitCode = exitCode;
  }
}

/** Where the reads went, for the message. */
export interface TargetName {
  server: string;
  context: string;
}

export const RBAC_HINT =
  'kubectl leasehold needs get and list on sharemanagers.leasehold.dev, leases, pods and events, and get on pods/log: docs/operations.md, "kubectl leasehold", has the ClusterRole';

export function explainFailure(err: unknown, target: TargetName | undefined): PluginError {
  if (err instanceof PluginError) return err;
  const where = target ? `the API server ${target.server} (context ${target.context})` : 'the API server';
  if (err instanceof KubeApiError) {
    const api = apiMessageOf(err.cause);
    if (err.status === undefined)
      return new PluginError('E_UNREACHABLE', `cannot reach ${where}: ${err.message}`, 1, { cause: err });
    if (err.status === 401)
      return new PluginError(
        'E_UNAUTHORIZED',
        `${where} refused the kubeconfig's credentials (HTTP 401) for: ${err.operation}`,
        1,
        { cause: err },
      );
    if (err.status === 403)
      return new PluginError(
        'E_FORBIDDEN',
        `${err.operation}: forbidden (HTTP 403${api ? `: ${api}` : ''}); ${RBAC_HINT}`,
        1,
        { cause: err },
      );
    return new PluginError(`E_HTTP_${err.status}`, `${err.message} (${where})`, 1, { cause: err });
  }
  return new PluginError('E_FAILED', err instanceof Error ? err.message : String(err), 1, { cause: err });
}
