/**
 * The health and metrics endpoints every process serves: /healthz, /readyz, /metrics.
 * The checks are callbacks so that they reflect the loop itself (age of the last
 * successful renewal, caches synced), not merely that the process is up.
 *
 * NB: node:http is loaded with require(), not an ESM import: an ESM import of a Node
 * built-in reads every export, and node:http's lazy WebSocket/CloseEvent/MessageEvent
 * getters then load Node's bundled undici (measured on Node 24: 47 -> 60 MB of RSS for
 * the import alone). The agent pays for every MB (issue 14).
 */

import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import { createRequire } from 'node:module';
import type { AddressInfo } from 'node:net';

const { createServer } = createRequire(import.meta.url)('node:http') as typeof import('node:http');

/** What /metrics serves: a prom-client Registry, or the agent's hand-written exposition. */
export interface MetricsSource {
  contentType: string;
  metrics(): Promise<string>;
}

export interface Check {
  ok: boolean;
  detail: string;
}

/** A JSON answer of a POST route: its status and body. */
export interface JsonAnswer {
  status: number;
  body: unknown;
}

export interface EndpointOptions {
  host?: string;
  port: number;
  registry: MetricsSource;
  healthz: () => Check;
  readyz: () => Check;
  /** POST routes taking and answering JSON (the manager's witness); bodies up to 4 KiB. */
  routes?: Record<string, (body: unknown) => Promise<JsonAnswer>>;
}

const MAX_BODY_BYTES = 4096;

export interface Endpoints {
  port: number;
  close(): Promise<void>;
}

export async function serveEndpoints(opts: EndpointOptions): Promise<Endpoints> {
  const server: Server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0];
    const answer = (check: Check) => {
      res.writeHead(check.ok ? 200 : 503, { 'content-type': 'text/plain' });
      res.end(`${check.ok ? 'ok' : 'not ok'}: ${check.detail}\n`);
    };
    const route = path === undefined ? undefined : opts.routes?.[path];
    if (route && req.method === 'POST') return void serveJson(req, res, route);
    if (path === '/healthz') return answer(opts.healthz());
    if (path === '/readyz') return answer(opts.readyz());
    if (path === '/metrics') {
      opts.registry.metrics().then(
        (text) => {
          res.writeHead(200, { 'content-type': opts.registry.contentType });
          res.end(text);
        },
        (err: unknown) => {
          res.writeHead(500, { 'content-type': 'text/plain' });
          res.end(`collecting metrics failed: ${String(err)}\n`);
        },
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' });
    res.end('not found: try /healthz, /readyz or /metrics\n');
  });
  server.keepAliveTimeout = 5_000;
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(opts.port, opts.host ?? '0.0.0.0', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}

/** Reads a JSON body (at most MAX_BODY_BYTES) and answers with the route's JSON. */
async function serveJson(
  req: IncomingMessage,
  res: ServerResponse,
  route: (body: unknown) => Promise<JsonAnswer>,
): Promise<void> {
  const send = ({ status, body }: JsonAnswer) => {
    if (res.headersSent) return;
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(`${JSON.stringify(body)}\n`);
  };
  const chunks: Buffer[] = [];
  let size = 0;
  try {
    for await (const chunk of req as AsyncIterable<Buffer>) {
      size += chunk.length;
      if (size > MAX_BODY_BYTES) {
        send({ status: 413, body: { error: `request body over ${MAX_BODY_BYTES} bytes` } });
        req.destroy();
        return;
      }
      chunks.push(chunk);
    }
  } catch {
    return; // the client went away
  }
  let body: unknown;
  try {
    body = JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch (err) {
    return send({ status: 400, body: { error: `request body is not JSON: ${String(err)}` } });
  }
  try {
    send(await route(body));
  } catch (err) {
    send({ status: 500, body: { error: String(err) } });
  }
}
