/**
 * Certificates for one local control plane, made at start with the openssl CLI
 * (no hand-written ASN.1): a CA, the API server's serving certificate (loopback IP,
 * the `kubernetes` Service's ClusterIP, the control plane's address on the real nodes'
 * network and the in-cluster service names), client certificates for the admin, each
 * component and the API server's calls to kubelets, and the service-account signing
 * key. EC P-256 keys: fast to make.
 */
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { LeaseholdError } from '../../lib/errors.ts';
import { CONTROL_PLANE_IP } from './node-network.ts';

const run = promisify(execFile);

export interface ClientCert {
  cert: string;
  key: string;
}

export interface ClusterCerts {
  caCert: string;
  caKey: string;
  servingCert: string;
  servingKey: string;
  saKey: string;
  saPub: string;
  admin: ClientCert;
  controllerManager: ClientCert;
  scheduler: ClientCert;
  /** The API server's client certificate towards kubelets (system:masters, so their webhook authorization allows it). */
  kubeletClient: ClientCert;
}

async function openssl(args: string[], what: string): Promise<void> {
  try {
    await run('openssl', args, { timeout: 30_000 });
  } catch (err) {
    const e = err as { code?: string; stderr?: string };
    const reason =
      e.code === 'ENOENT'
        ? 'openssl is not installed (apt-get install openssl)'
        : (e.stderr ?? String(err)).trim();
    throw new LeaseholdError('E_CERTS', `making ${what} with openssl failed: ${reason}`, { cause: err });
  }
}

const ecKey = (path: string) => [
  'genpkey',
  '-algorithm',
  'EC',
  '-pkeyopt',
  'ec_paramgen_curve:P-256',
  '-out',
  path,
];

async function signed(
  dir: string,
  name: string,
  subject: string,
  ca: { cert: string; key: string },
  ext: string,
): Promise<ClientCert> {
  const key = join(dir, `${name}.key`);
  const csr = join(dir, `${name}.csr`);
  const cert = join(dir, `${name}.crt`);
  const extFile = join(dir, `${name}.ext`);
  await writeFile(extFile, ext);
  await openssl(ecKey(key), `the ${name} key`);
  await openssl(['req', '-new', '-key', key, '-subj', subject, '-out', csr], `the ${name} request`);
  await openssl(
    [
      'x509',
      '-req',
      '-in',
      csr,
      '-CA',
      ca.cert,
      '-CAkey',
      ca.key,
      // A random serial per certificate: -CAcreateserial makes parallel signings race
      // on one ca.srl file.
      '-set_serial',
      `0x${randomBytes(16).toString('hex')}`,
      '-days',
      '30',
      '-extfile',
      extFile,
      '-out',
      cert,
    ],
    `the ${name} certificate`,
  );
  return { cert, key };
}

export async function makeCerts(dir: string): Promise<ClusterCerts> {
  const caKey = join(dir, 'ca.key');
  const caCert = join(dir, 'ca.crt');
  await openssl(ecKey(caKey), 'the CA key');
  await openssl(
    [
      'req',
      '-x509',
      '-new',
      '-key',
      caKey,
      '-subj',
      '/CN=leasehold-local-ca',
      '-days',
      '30',
      '-addext',
      'basicConstraints=critical,CA:TRUE',
      '-addext',
      'keyUsage=critical,keyCertSign,cRLSign,digitalSignature',
      '-out',
      caCert,
    ],
    'the CA certificate',
  );
  const ca = { cert: caCert, key: caKey };
  const client =
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=clientAuth\n';
  const serving = await signed(
    dir,
    'kube-apiserver',
    '/CN=kube-apiserver',
    ca,
    'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n' +
      `subjectAltName=IP:127.0.0.1,IP:10.0.0.1,IP:${CONTROL_PLANE_IP},DNS:localhost,DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,DNS:kubernetes.default.svc.cluster.local\n`,
  );
  const [admin, controllerManager, scheduler, kubeletClient] = await Promise.all([
    signed(dir, 'admin', '/O=system:masters/CN=leasehold-admin', ca, client),
    signed(dir, 'kube-controller-manager', '/CN=system:kube-controller-manager', ca, client),
    signed(dir, 'kube-scheduler', '/CN=system:kube-scheduler', ca, client),
    signed(
      dir,
      'kube-apiserver-kubelet-client',
      '/O=system:masters/CN=kube-apiserver-kubelet-client',
      ca,
      client,
    ),
  ]);
  const saKey = join(dir, 'sa.key');
  const saPub = join(dir, 'sa.pub');
  await openssl(ecKey(saKey), 'the service-account signing key');
  await openssl(['pkey', '-in', saKey, '-pubout', '-out', saPub], 'the service-account public key');
  return {
    caCert,
    caKey,
    servingCert: serving.cert,
    servingKey: serving.key,
    saKey,
    saPub,
    admin,
    controllerManager,
    scheduler,
    kubeletClient,
  };
}
