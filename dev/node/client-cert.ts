/**
 * A node's client certificates, issued the way a cluster issues them: a
 * CertificateSigningRequest, approved with the admin credentials and signed by
 * kube-controller-manager's csrsigning controller. The key never leaves the node's dir.
 *  - the kubelet's: signer kubernetes.io/kube-apiserver-client-kubelet, subject
 *    O=system:nodes, CN=system:node:NAME (the Node authorizer and NodeRestriction apply);
 *  - kube-proxy's: signer kubernetes.io/kube-apiserver-client, CN=system:kube-proxy
 *    (the user the default ClusterRoleBinding system:node-proxier binds).
 *
 * Guarantees: resolves with the paths of a signed certificate and its key, or rejects
 * naming the CSR and what it waited for. Not guaranteed: rotation (the certificate
 * lasts the signer's default duration, a year; the testbed lives minutes).
 */
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { CertificatesV1Api, type KubeConfig } from '@kubernetes/client-node';
import { sleep } from '../../lib/clock.ts';
import { LeaseholdError } from '../../lib/errors.ts';

const run = promisify(execFile);

export const issueKubeletClientCert = (kubeConfig: KubeConfig, nodeName: string, dir: string) =>
  issueClientCert(kubeConfig, nodeName, dir, {
    file: 'kubelet-client',
    subject: `/O=system:nodes/CN=system:node:${nodeName}`,
    signerName: 'kubernetes.io/kube-apiserver-client-kubelet',
  });

export const issueKubeProxyClientCert = (kubeConfig: KubeConfig, nodeName: string, dir: string) =>
  issueClientCert(kubeConfig, nodeName, dir, {
    file: 'kube-proxy-client',
    subject: '/CN=system:kube-proxy',
    signerName: 'kubernetes.io/kube-apiserver-client',
  });

interface CertRequest {
  /** Base name of the key, request and certificate files in dir. */
  file: string;
  subject: string;
  signerName: string;
}

async function issueClientCert(
  kubeConfig: KubeConfig,
  nodeName: string,
  dir: string,
  want: CertRequest,
  timeoutMs = 60_000,
): Promise<{ cert: string; key: string }> {
  const key = join(dir, `${want.file}.key`);
  const cert = join(dir, `${want.file}.crt`);
  const csrPath = join(dir, `${want.file}.csr`);
  await run('openssl', ['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:P-256', '-out', key]);
  await run('openssl', ['req', '-new', '-key', key, '-subj', want.subject, '-out', csrPath]);
  const request = (await readFile(csrPath)).toString('base64');
  const api = kubeConfig.makeApiClient(CertificatesV1Api);
  const name = `leasehold-${want.file}-${nodeName}-${Date.now().toString(36)}`;
  const what = `CertificateSigningRequest ${name} (${want.subject}) for node ${nodeName}`;
  try {
    await api.createCertificateSigningRequest({
      body: {
        metadata: { name },
        spec: {
          request,
          signerName: want.signerName,
          usages: ['digital signature', 'client auth'],
        },
      },
    });
    // kube-controller-manager's CSR controllers may update the object meanwhile (409):
    // read it again and retry.
    for (let attempt = 1; ; attempt++) {
      const current = await api.readCertificateSigningRequest({ name });
      if (current.status?.conditions?.some((c) => c.type === 'Approved')) break;
      current.status = {
        ...current.status,
        conditions: [
          ...(current.status?.conditions ?? []),
          {
            type: 'Approved',
            status: 'True',
            reason: 'LeaseholdTestbed',
            message: 'approved by the testbed that starts this node',
          },
        ],
      };
      try {
        await api.replaceCertificateSigningRequestApproval({ name, body: current });
        break;
      } catch (err) {
        if ((err as { code?: number }).code !== 409 || attempt >= 5) throw err;
      }
    }
  } catch (err) {
    throw new LeaseholdError('E_NODE_CERT', `creating and approving ${what} failed`, { cause: err });
  }
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    const csr = await api.readCertificateSigningRequest({ name }).catch(() => undefined);
    const signed = csr?.status?.certificate;
    if (signed) {
      await writeFile(cert, Buffer.from(signed, 'base64'));
      await api.deleteCertificateSigningRequest({ name }).catch(() => {});
      return { cert, key };
    }
    await sleep(200);
  }
  throw new LeaseholdError(
    'E_NODE_CERT',
    `${what} was approved but not signed within ${timeoutMs / 1000}s (is kube-controller-manager running?)`,
  );
}
