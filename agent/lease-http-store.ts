/**
 * The LeaseStore port (lib/lease-store.ts) over plain node:https, for the agent.
 *
 * Why not lib's KubeLeaseStore: it is built on @kubernetes/client-node, which costs ~80 MB
 * of RSS once loaded and opens a new TLS connection for every request. The agent makes
 * one small request every 2 s for its whole life, in every share-manager pod, so it
 * talks to the three Lease endpoints it needs directly:
 *  - one keep-alive connection reused across requests (one TLS handshake, not one per renewal);
 *  - `fresh: true` (a hedge, renew-round.ts): the request gets a new connection of its own,
 *    never a pooled socket (which may be the stuck one), closed after its answer;
 *  - `signal`: the caller abandons a request (its round ended); its socket is destroyed;
 *  - each call is exactly one HTTP request, with a hard deadline (AbortSignal): connect,
 *    TLS, send and read included; an aborted request destroys its socket, so a dead
 *    connection is never reused;
 *  - 409 is an outcome ({kind:'conflict'}), 404 on get is `undefined`; every other failure
 *    throws KubeApiError naming the operation and the lease, with the HTTP status when an
 *    answer came back.
 * Wire conversion is lib/lease-record.ts (fromWire/toWire), shared with the manager.
 */
import { Agent, request } from 'node:https';
import { KubeApiError } from '../lib/errors.ts';
import { fromWire, type LeaseRecord, leaseKey, toWire } from '../lib/lease-record.ts';
import type { LeaseStore, WriteOutcome } from '../lib/lease-store.ts';
import type { KubeConnection } from './kube-connection.ts';

export interface RequestOptions {
  /** On a new connection of its own, never a pooled one. */
  fresh?: boolean;
  /** Aborts the request (and destroys its socket). */
  signal?: AbortSignal;
}

/** The LeaseStore port plus what hedged renewals need (renew-loop.ts). */
export interface HedgeableLeaseStore extends LeaseStore {
  get(
    namespace: string,
    name: string,
    deadlineMs: number,
    options?: RequestOptions,
  ): Promise<LeaseRecord | undefined>;
  update(record: LeaseRecord, deadlineMs: number, options?: RequestOptions): Promise<WriteOutcome>;
}

interface Answer {
  status: number;
  body: string;
}

export class HttpLeaseStore implements HedgeableLeaseStore {
  private readonly agent: Agent;
  /** For `fresh` requests: no keep-alive and no socket limit, so every request opens its own. */
  private readonly freshAgent: Agent;

  constructor(private readonly connection: KubeConnection) {
    const tls = {
      ca: connection.ca,
      cert: connection.cert,
      key: connection.key,
      servername: connection.servername,
      rejectUnauthorized: connection.rejectUnauthorized,
    };
    this.agent = new Agent({
      keepAlive: true,
      // Longer than any renew interval, so the renewal connection stays warm.
      keepAliveMsecs: 30_000,
      timeout: 0,
      maxSockets: 4,
      ...tls,
    });
    this.freshAgent = new Agent({
      keepAlive: false,
      timeout: 0,
      maxSockets: Number.POSITIVE_INFINITY,
      ...tls,
    });
  }

  async get(
    namespace: string,
    name: string,
    deadlineMs: number,
    options: RequestOptions = {},
  ): Promise<LeaseRecord | undefined> {
    const operation = `reading lease ${namespace}/${name}`;
    const answer = await this.send(
      operation,
      'GET',
      leasePath(namespace, name),
      undefined,
      deadlineMs,
      options,
    );
    if (answer.status === 404) return undefined;
    if (answer.status !== 200) throw apiError(operation, answer);
    return fromWire(JSON.parse(answer.body));
  }

  async create(record: LeaseRecord, deadlineMs: number): Promise<WriteOutcome> {
    const operation = `creating lease ${leaseKey(record)}`;
    const body = toWire({ ...record, resourceVersion: '' });
    const answer = await this.send(operation, 'POST', leasePath(record.namespace), body, deadlineMs);
    return this.writeOutcome(operation, answer);
  }

  async update(record: LeaseRecord, deadlineMs: number, options: RequestOptions = {}): Promise<WriteOutcome> {
    const operation = `updating lease ${leaseKey(record)}`;
    const answer = await this.send(
      operation,
      'PUT',
      leasePath(record.namespace, record.name),
      toWire(record),
      deadlineMs,
      options,
    );
    return this.writeOutcome(operation, answer);
  }

  /** Closes idle keep-alive connections (the process is about to exit). */
  close(): void {
    this.agent.destroy();
    this.freshAgent.destroy();
  }

  private writeOutcome(operation: string, answer: Answer): WriteOutcome {
    if (answer.status === 409) return { kind: 'conflict' };
    if (answer.status !== 200 && answer.status !== 201) throw apiError(operation, answer);
    return { kind: 'written', lease: fromWire(JSON.parse(answer.body)) };
  }

  private send(
    operation: string,
    method: string,
    path: string,
    body: unknown,
    deadlineMs: number,
    options: RequestOptions = {},
  ): Promise<Answer> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const url = new URL(path, this.connection.server);
    const headers: Record<string, string> = { accept: 'application/json' };
    const authorization = this.connection.authorization();
    if (authorization) headers.authorization = authorization;
    if (payload !== undefined) {
      headers['content-type'] = 'application/json';
      headers['content-length'] = String(Buffer.byteLength(payload));
    }
    return new Promise((resolve, reject) => {
      const req = request(
        url,
        {
          method,
          headers,
          agent: options.fresh ? this.freshAgent : this.agent,
          signal: withDeadline(deadlineMs, options.signal),
        },
        (res) => {
          const chunks: Buffer[] = [];
          res.on('data', (chunk: Buffer) => chunks.push(chunk));
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString('utf8') }),
          );
          res.on('error', (err) => reject(new KubeApiError(operation, undefined, { cause: err })));
        },
      );
      req.on('error', (err) => reject(new KubeApiError(operation, undefined, { cause: err })));
      req.end(payload);
    });
  }
}

function withDeadline(deadlineMs: number, signal: AbortSignal | undefined): AbortSignal {
  const timeout = AbortSignal.timeout(Math.max(1, Math.floor(deadlineMs)));
  return signal ? AbortSignal.any([timeout, signal]) : timeout;
}

function leasePath(namespace: string, name?: string): string {
  const base = `/apis/coordination.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/leases`;
  return name === undefined ? base : `${base}/${encodeURIComponent(name)}`;
}

function apiError(operation: string, answer: Answer): KubeApiError {
  return new KubeApiError(operation, answer.status, { cause: { body: answer.body } });
}
