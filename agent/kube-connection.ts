/**
 * Where and how the agent reaches the API server, without loading
 * @kubernetes/client-node on the usual paths (that package alone costs ~80 MB of RSS,
 * more than the agent's whole budget):
 *  - KUBECONFIG unset: the in-cluster service account (KUBERNETES_SERVICE_HOST/PORT, the
 *    mounted CA; the token file is re-read for every request, so kubelet's rotation of
 *    the projected token is picked up).
 *  - KUBECONFIG a JSON file (what dev/cluster writes) using a CA and a client certificate
 *    or a token: read here; relative paths are relative to the file.
 *  - anything else (YAML, exec or auth-provider plugins): resolved once by client-node
 *    (loaded lazily, so only then does it cost memory).
 * Errors name the file or variable and what was missing.
 *
 * Files are read synchronously: this runs once, at start, before anything else does.
 * NB: node:fs is loaded with require(): its ESM import reads every export, and the lazy
 * `promises` getter loads fs/promises and more (~1 MB of RSS the agent does not need).
 */
import { createRequire } from 'node:module';
import { dirname, isAbsolute, join } from 'node:path';
import { LeaseholdError } from '../lib/errors.ts';

const { readFileSync } = createRequire(import.meta.url)('node:fs') as typeof import('node:fs');

export interface KubeConnection {
  /** Base URL of the API server, e.g. https://10.0.0.1:443 */
  server: URL;
  ca: Buffer | undefined;
  cert: Buffer | undefined;
  key: Buffer | undefined;
  servername: string | undefined;
  rejectUnauthorized: boolean;
  /** The Authorization header for the next request, if any (re-read for rotating tokens). */
  authorization(): string | undefined;
  /** Where the settings came from, for the start-up log line. */
  source: string;
}

const SA_DIR = '/var/run/secrets/kubernetes.io/serviceaccount';

export async function resolveKubeConnection(
  env: Readonly<Record<string, string | undefined>>,
): Promise<KubeConnection> {
  const path = env.KUBECONFIG;
  if (!path) return inCluster(env);
  let text: string;
  try {
    text = readFileSync(path, 'utf8');
  } catch (err) {
    throw new LeaseholdError('E_KUBECONFIG', `reading KUBECONFIG=${path} failed: ${(err as Error).message}`, {
      cause: err,
    });
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    return viaClientNode(env, path);
  }
  return fromJsonKubeconfig(parsed as Kubeconfig, path) ?? viaClientNode(env, path);
}

function inCluster(env: Readonly<Record<string, string | undefined>>): KubeConnection {
  const host = env.KUBERNETES_SERVICE_HOST;
  const port = env.KUBERNETES_SERVICE_PORT;
  if (!host || !port) {
    throw new LeaseholdError(
      'E_KUBECONFIG',
      'KUBECONFIG is not set and KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT are not either: not running in a pod, so there is no API server to talk to',
    );
  }
  const tokenPath = `${SA_DIR}/token`;
  return {
    server: new URL(`https://${host.includes(':') ? `[${host}]` : host}:${port}`),
    ca: readFileSync(`${SA_DIR}/ca.crt`),
    cert: undefined,
    key: undefined,
    servername: undefined,
    rejectUnauthorized: true,
    authorization: () => `Bearer ${readFileSync(tokenPath, 'utf8').trim()}`,
    source: 'in-cluster service account',
  };
}

interface Kubeconfig {
  'current-context'?: string;
  contexts?: Array<{ name: string; context: { cluster: string; user: string } }>;
  clusters?: Array<{ name: string; cluster: Record<string, string | boolean | undefined> }>;
  users?: Array<{ name: string; user: Record<string, unknown> }>;
}

/** The connection described by a JSON kubeconfig, or undefined when it needs client-node. */
function fromJsonKubeconfig(config: Kubeconfig, path: string): KubeConnection | undefined {
  const context = config.contexts?.find((c) => c.name === config['current-context'])?.context;
  const cluster = config.clusters?.find((c) => c.name === context?.cluster)?.cluster;
  const user = config.users?.find((u) => u.name === context?.user)?.user ?? {};
  if (!context || !cluster || typeof cluster.server !== 'string') return undefined;
  const supported = new Set([
    'token',
    'client-certificate',
    'client-certificate-data',
    'client-key',
    'client-key-data',
  ]);
  if (Object.keys(user).some((k) => !supported.has(k))) return undefined;
  const dir = dirname(path);
  const file = (value: unknown) =>
    typeof value === 'string' ? readFileSync(isAbsolute(value) ? value : join(dir, value)) : undefined;
  const data = (value: unknown) => (typeof value === 'string' ? Buffer.from(value, 'base64') : undefined);
  const token = typeof user.token === 'string' ? user.token : undefined;
  return {
    server: new URL(cluster.server),
    ca: data(cluster['certificate-authority-data']) ?? file(cluster['certificate-authority']),
    cert: data(user['client-certificate-data']) ?? file(user['client-certificate']),
    key: data(user['client-key-data']) ?? file(user['client-key']),
    servername: typeof cluster['tls-server-name'] === 'string' ? cluster['tls-server-name'] : undefined,
    rejectUnauthorized: cluster['insecure-skip-tls-verify'] !== true,
    authorization: () => (token ? `Bearer ${token}` : undefined),
    source: `KUBECONFIG=${path}`,
  };
}

async function viaClientNode(
  env: Readonly<Record<string, string | undefined>>,
  path: string,
): Promise<KubeConnection> {
  const { loadKubeConfig } = await import('../lib/kube-client.ts');
  const kc = loadKubeConfig(env);
  const server = kc.getCurrentCluster()?.server;
  if (!server)
    throw new LeaseholdError('E_KUBECONFIG', `KUBECONFIG=${path} names no current cluster with a server`);
  const opts: {
    ca?: Buffer;
    cert?: Buffer;
    key?: Buffer;
    servername?: string;
    rejectUnauthorized?: boolean;
    headers?: Record<string, string>;
  } = {};
  await kc.applyToHTTPSOptions(opts as never);
  return {
    server: new URL(server),
    ca: opts.ca,
    cert: opts.cert,
    key: opts.key,
    servername: opts.servername,
    rejectUnauthorized: opts.rejectUnauthorized !== false,
    // NB: resolved once; exec plugins with short-lived tokens are not refreshed here.
    authorization: () => opts.headers?.Authorization,
    source: `KUBECONFIG=${path} (via client-node)`,
  };
}
