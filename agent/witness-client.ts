/**
 * The agent's side of the witness protocol over HTTP: POST a JSON request to one witness
 * (a manager's /witness/promise or /witness/clearance) and read its JSON answer, cut at a
 * deadline. Keep-alive connections, one pool per process; no retries here (the callers ask
 * again every retry period).
 *
 * NB: node:http through require(), as in lib/http-endpoints.ts: an ESM import of it loads
 * Node's bundled undici (13 MB of RSS the agent does not otherwise pay).
 */
import type { Agent as HttpAgent } from 'node:http';
import { createRequire } from 'node:module';

const http = createRequire(import.meta.url)('node:http') as typeof import('node:http');
const pool: HttpAgent = new http.Agent({ keepAlive: true, maxSockets: 4 });

export class WitnessCallError extends Error {
  constructor(
    readonly witness: string,
    readonly path: string,
    message: string,
  ) {
    super(`witness ${witness} ${path}: ${message}`);
    this.name = 'WitnessCallError';
  }
}

/** Sends `body` to `baseUrl + path`; resolves with the parsed JSON of a 200 answer. */
export function callWitness(
  witness: string,
  baseUrl: string,
  path: string,
  body: unknown,
  timeoutMs: number,
): Promise<unknown> {
  const payload = JSON.stringify(body);
  return new Promise((resolve, reject) => {
    const fail = (message: string) => reject(new WitnessCallError(witness, path, message));
    const req = http.request(
      `${baseUrl}${path}`,
      {
        method: 'POST',
        agent: pool,
        headers: { 'content-type': 'application/json', 'content-length': Buffer.byteLength(payload) },
        signal: AbortSignal.timeout(Math.max(1, Math.floor(timeoutMs))),
      },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (c: Buffer) => chunks.push(c));
        res.on('error', (err) => fail(String(err)));
        res.on('end', () => {
          const text = Buffer.concat(chunks).toString('utf8');
          if (res.statusCode !== 200) return fail(`HTTP ${res.statusCode}: ${text.trim().slice(0, 200)}`);
          try {
            resolve(JSON.parse(text));
          } catch {
            fail(`answer is not JSON: ${text.slice(0, 200)}`);
          }
        });
      },
    );
    req.on('error', (err) =>
      fail(err.name === 'AbortError' ? `no answer within ${timeoutMs} ms` : String(err)),
    );
    req.end(payload);
  });
}
