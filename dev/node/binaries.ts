/**
 * Where the node components are: $LEASEHOLD_NODE_BIN when set (`dev/toolchain.sh
 * --node` sets it), else whatever dev/node/build.sh prints (it builds on first use,
 * showing progress on stderr, and answers from the cache afterwards).
 */
import { execFile } from 'node:child_process';
import { access, constants, readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { LeaseholdError } from '../../lib/errors.ts';

export const NODE_BINARIES = [
  'kubelet',
  'kube-proxy',
  'containerd',
  'containerd-shim-runc-v2',
  'ctr',
  'runc',
  'leasehold-netns-relay',
  'pause',
  'api-probe',
  'cni/bridge',
  'cni/host-local',
  'cni/loopback',
  'cni/portmap',
] as const;

export interface NodeBinaries {
  dir: string;
  /** The pause image tarball (OCI layout) and the name it imports as. */
  pauseTar: string;
  pauseImage: string;
  /** The api-probe image (./api-probe: a pod's in-cluster call to the API server) and its name. */
  probeTar: string;
  probeImage: string;
}

const buildScript = join(dirname(fileURLToPath(import.meta.url)), 'build.sh');

export async function nodeBinaries(): Promise<NodeBinaries> {
  const dir = process.env.LEASEHOLD_NODE_BIN || (await build());
  for (const name of NODE_BINARIES) {
    try {
      await access(join(dir, name), constants.X_OK);
    } catch {
      throw new LeaseholdError(
        'E_NODE_BIN',
        `node binary ${name} is missing from ${dir}: run 'bash dev/node/build.sh' (or unset LEASEHOLD_NODE_BIN)`,
      );
    }
  }
  const pauseImage = (await readFile(join(dir, 'pause.image'), 'utf8')).trim();
  const probeImage = (await readFile(join(dir, 'api-probe.image'), 'utf8')).trim();
  return {
    dir,
    pauseTar: join(dir, 'pause.oci.tar'),
    pauseImage,
    probeTar: join(dir, 'api-probe.oci.tar'),
    probeImage,
  };
}

function build(): Promise<string> {
  return new Promise((resolve, reject) => {
    const child = execFile('bash', [buildScript], { maxBuffer: 1 << 20 }, (err, stdout) => {
      if (err)
        reject(
          new LeaseholdError(
            'E_NODE_BUILD',
            `building the node components failed (${buildScript}); see above`,
            {
              cause: err,
            },
          ),
        );
      else resolve(stdout.trim().split('\n').at(-1) ?? '');
    });
    child.stderr?.pipe(process.stderr);
  });
}
