/**
 * Kubeconfig files for the local control plane. Written as JSON, which is YAML too,
 * so kubectl and client-node read them without a YAML writer here.
 */
import { writeFile } from 'node:fs/promises';

export type Credentials = { clientCert: string; clientKey: string } | { token: string };

export async function writeKubeconfig(
  path: string,
  server: string,
  caPath: string,
  creds: Credentials,
): Promise<void> {
  const user =
    'token' in creds
      ? { token: creds.token }
      : { 'client-certificate': creds.clientCert, 'client-key': creds.clientKey };
  const config = {
    apiVersion: 'v1',
    kind: 'Config',
    clusters: [{ name: 'leasehold', cluster: { server, 'certificate-authority': caPath } }],
    users: [{ name: 'leasehold', user }],
    contexts: [{ name: 'leasehold', context: { cluster: 'leasehold', user: 'leasehold' } }],
    'current-context': 'leasehold',
  };
  await writeFile(path, `${JSON.stringify(config, null, 2)}\n`, { mode: 0o600 });
}
