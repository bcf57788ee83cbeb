/**
 * The NFS server entrypoint's exit codes (part of the contract with the pod spec), and
 * the one error class that ends a start.
 *
 *   0  stopped on request: SIGTERM or SIGINT was forwarded to ganesha as SIGTERM and
 *      ganesha exited 0 within LEASEHOLD_NFS_STOP_TIMEOUT
 *   1  ended while serving: ganesha exited or was killed without our request (for
 *      instance the agent's fence signalled ganesha.nfsd directly), or a requested stop
 *      failed (ganesha exited non-zero, or was killed after the stop timeout)
 *   2  bad configuration: the message names each env var, its value and the rule broken
 *   3  could not start: the export or recovery directory is missing, unwritable or on
 *      another file system, ganesha.nfsd cannot be run, ganesha exited before it served
 *      (port in use, bad export), or it did not answer within LEASEHOLD_NFS_START_TIMEOUT
 */
import { LeaseholdError } from '../../lib/errors.ts';

export const EXIT_STOPPED = 0;
export const EXIT_ENDED = 1;
export const EXIT_CONFIG = 2;
export const EXIT_START_FAILED = 3;

/** Why the server could not start; the message names the setting or ganesha's log line. */
export class ServerStartError extends LeaseholdError {
  constructor(message: string, options?: { cause?: unknown }) {
    super('E_NFS_START', message, options);
  }
}
