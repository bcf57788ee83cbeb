/**
 * The demo share server: while serving, it appends one numbered record every
 * `intervalMs` to the volume's records file and answers
 *   GET /records[?after=N]  -> { server, lastSeq, records: [...] } (records with seq > N)
 *   GET /healthz            -> 200 while serving
 *
 * Invariants: the `start` window event is written before the first append and before
 * the port is bound; `stop()` stops appending and closes the listener (and its open
 * connections) before the `stop` event is written. So the window log never shows a
 * server as stopped while it could still append or answer.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { monotonicMs } from '../../lib/clock.ts';
import type { ShareServerConfig } from './config.ts';
import { RecordFile } from './record-file.ts';
import { appendWindowEvent } from './serving-window-log.ts';

export interface RunningShareServer {
  readonly port: number;
  readonly lastSeq: number;
  stop(reason: string): Promise<void>;
}

export async function startShareServer(config: ShareServerConfig): Promise<RunningShareServer> {
  const records = new RecordFile(config.recordsPath, config.id);
  appendWindowEvent(config.windowLogPath, {
    event: 'start',
    id: config.id,
    pid: process.pid,
    monoMs: monotonicMs(),
    wall: new Date().toISOString(),
    firstSeq: records.lastSeq + 1,
  });
  let serving = true;
  const timer = setInterval(() => {
    if (serving) records.append();
  }, config.intervalMs);

  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://share');
    if (!serving) {
      res.writeHead(503).end('stopping\n');
      return;
    }
    if (url.pathname === '/healthz') {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ ok: true, server: config.id, lastSeq: records.lastSeq }));
      return;
    }
    if (url.pathname === '/records') {
      const after = Number(url.searchParams.get('after') ?? '0');
      if (!Number.isInteger(after) || after < 0) {
        res.writeHead(400).end(`after=${url.searchParams.get('after')}: must be a whole number >= 0\n`);
        return;
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ server: config.id, lastSeq: records.lastSeq, records: records.since(after) }));
      return;
    }
    res.writeHead(404).end('not found: try /records or /healthz\n');
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(config.port, '0.0.0.0', () => {
      server.off('error', reject);
      resolve();
    });
  });

  let stopping: Promise<void> | undefined;
  const stop = (reason: string): Promise<void> => {
    stopping ??= (async () => {
      serving = false;
      clearInterval(timer);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      records.close();
      appendWindowEvent(config.windowLogPath, {
        event: 'stop',
        id: config.id,
        pid: process.pid,
        monoMs: monotonicMs(),
        wall: new Date().toISOString(),
        lastSeq: records.lastSeq,
        reason,
      });
    })();
    return stopping;
  };
  return {
    port: (server.address() as AddressInfo).port,
    get lastSeq() {
      return records.lastSeq;
    },
    stop,
  };
}
