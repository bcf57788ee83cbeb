/**
 * The Linux kernels the kernel client runs, as User-Mode Linux: `6.1` is Debian 12's
 * `user-mode-linux` package (its NFS client as modules under /usr/lib/uml/modules);
 * `6.12` is built from Debian's `linux-source-6.12` with the NFS client built in
 * (build-uml.sh, cached by the package's version). Both run with the host-built
 * xstate shim preloaded (host/uml-xstate-shim.c: without it neither boots on a host
 * whose XSAVE area is larger than UML's buffer, such as this testbed's AMX CPUs).
 * Guarantees: umlKernel() resolves only with a kernel whose binary exists, building
 * what is missing first; it rejects naming the kernel and the failing build.
 */
import { execFile } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { LeaseholdError } from '../../lib/errors.ts';

const run = promisify(execFile);

export const KERNELS = ['6.1', '6.12'] as const;
export type KernelName = (typeof KERNELS)[number];

export interface UmlKernel {
  name: KernelName;
  /** The full version (uname -r inside). */
  release: string;
  binary: string;
  /** `modprobe -d` directory when the NFS client is modules; unset when built in. */
  moduleDir?: string;
  /** The LD_PRELOAD shim (host/uml-xstate-shim.c). */
  shim: string;
}

const DEBIAN_UML = '/usr/bin/linux.uml';
const DEBIAN_UML_MODULES = '/usr/lib/uml/modules';

async function buildOutput(script: string, what: string): Promise<string> {
  try {
    const { stdout } = await run('bash', [join(import.meta.dirname, script)], {
      maxBuffer: 16 << 20,
      timeout: 3_600_000,
    });
    return stdout.trim();
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr?.trim().split('\n').slice(-15).join('\n');
    throw new LeaseholdError(
      'E_KCLIENT_BUILD',
      `building ${what} (dev/kernel-client/${script}) failed:\n${stderr}`,
      {
        cause: err,
      },
    );
  }
}

/** The gcc-built parts (build.sh): lh-kload, the shim and the 6.1 module tree. */
export function builtParts(): Promise<string> {
  return buildOutput('build.sh', 'the kernel client parts');
}

export async function umlKernel(name: KernelName): Promise<UmlKernel> {
  const host = await builtParts();
  const shim = join(host, 'uml-xstate-shim.so');
  if (name === '6.1') {
    if (!existsSync(DEBIAN_UML))
      throw new LeaseholdError(
        'E_KCLIENT_KERNEL',
        `kernel 6.1: ${DEBIAN_UML} is missing: Debian's user-mode-linux is not installed (bash dev/debian-packages.sh)`,
      );
    const release = readdirSync(DEBIAN_UML_MODULES)[0];
    if (!release)
      throw new LeaseholdError(
        'E_KCLIENT_KERNEL',
        `kernel 6.1: no module directory under ${DEBIAN_UML_MODULES}`,
      );
    return { name, release, binary: DEBIAN_UML, moduleDir: join(host, 'modules-6.1'), shim };
  }
  const binary = await buildOutput('build-uml.sh', 'the 6.12 UML kernel');
  if (!existsSync(binary))
    throw new LeaseholdError(
      'E_KCLIENT_KERNEL',
      `kernel 6.12: build-uml.sh printed '${binary}', which does not exist`,
    );
  const { stdout } = await run('dpkg-query', ['-W', '-f', '$' + '{Version}', 'linux-source-6.12']);
  return { name, release: `6.12 (linux-source-6.12 ${stdout.trim()})`, binary, shim };
}
