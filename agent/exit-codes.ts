/**
 * The agent's exit codes: part of the contract with the pod spec and the manager.
 *
 *   0  released: a planned stop (SIGTERM/SIGINT) released the lease by CAS, or nothing was held
 *   1  fenced: the lease was lost, the renew deadline passed, the server check failed, or a
 *      planned stop could not release the lease (the lease then expires for the manager)
 *   2  bad configuration: the message names each env var, its value and the rule broken
 *   3  could not start or acquire: kubeconfig unusable, HTTP port taken, acquire timeout,
 *      or the lease names this pod but is marked delinquent (this incarnation was declared dead)
 */
export const EXIT_RELEASED = 0;
export const EXIT_FENCED = 1;
export const EXIT_CONFIG = 2;
export const EXIT_START_FAILED = 3;
