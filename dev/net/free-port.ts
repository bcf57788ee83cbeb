/**
 * Free loopback ports for the testbed's listeners (control-plane components, test
 * servers).
 *
 * Why not listen(0): that hands out a port from the kernel's ephemeral range, and between
 * our check and the component's own bind an outgoing connection (a probe, an API call, a
 * watch) may take the same number as its source port — on this testbed thousands of
 * connections a minute. So ports come from below the ephemeral range
 * (`/proc/sys/net/ipv4/ip_local_port_range`), where connect() never picks, at random (so
 * two test processes rarely try the same), each checked by a bind and never handed out
 * twice by one process.
 *
 * Not guaranteed: another process may still bind the port before the component does; the
 * component then fails at start with an error naming the port (the cluster start retries
 * once with new ports).
 */
import { readFileSync } from 'node:fs';
import { createServer } from 'node:net';

const LOWEST = 10_000;
const handedOut = new Set<number>();

function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > LOWEST + 1000 ? low : 32_768;
  } catch {
    return 32_768;
  }
}

function bindable(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const server = createServer();
    server.unref();
    server.once('error', () => resolve(false));
    server.listen(port, '127.0.0.1', () => server.close(() => resolve(true)));
  });
}

export async function freePort(): Promise<number> {
  const high = ephemeralLow();
  for (let attempt = 0; attempt < 200; attempt++) {
    const port = LOWEST + Math.floor(Math.random() * (high - LOWEST));
    if (handedOut.has(port)) continue;
    if (await bindable(port)) {
      handedOut.add(port);
      return port;
    }
  }
  throw new Error(`no free loopback port in ${LOWEST}-${high - 1} after 200 tries`);
}

export async function freePorts(n: number): Promise<number[]> {
  const ports: number[] = [];
  while (ports.length < n) ports.push(await freePort());
  return ports;
}
