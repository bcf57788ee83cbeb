/**
 * Container probes as a kubelet runs them: httpGet (2xx/3xx passes) and tcpSocket on
 * 127.0.0.1 at the pod's host port for the probe's port (number or named port), every
 * periodSeconds after initialDelaySeconds, each bounded by timeoutSeconds; the result
 * flips after successThreshold successes or failureThreshold failures in a row.
 * Exec probes are not supported: they fail with a message saying so.
 */
import { connect } from 'node:net';
import type { V1Probe } from '@kubernetes/client-node';

export type ProbeVerdict = 'success' | 'failure';

export async function probeOnce(
  probe: V1Probe,
  resolvePort: (port: number | string) => number | undefined,
): Promise<ProbeVerdict> {
  const timeoutMs = (probe.timeoutSeconds ?? 1) * 1000;
  if (probe.httpGet) {
    const port = resolvePort(probe.httpGet.port as number | string);
    if (port === undefined) return 'failure';
    try {
      const res = await fetch(`http://127.0.0.1:${port}${probe.httpGet.path ?? '/'}`, {
        signal: AbortSignal.timeout(timeoutMs),
      });
      await res.body?.cancel();
      return res.status >= 200 && res.status < 400 ? 'success' : 'failure';
    } catch {
      return 'failure';
    }
  }
  if (probe.tcpSocket) {
    const port = resolvePort(probe.tcpSocket.port as number | string);
    if (port === undefined) return 'failure';
    return new Promise((resolve) => {
      const socket = connect({ host: '127.0.0.1', port, timeout: timeoutMs });
      const done = (v: ProbeVerdict) => {
        socket.destroy();
        resolve(v);
      };
      socket.once('connect', () => done('success'));
      socket.once('timeout', () => done('failure'));
      socket.once('error', () => done('failure'));
    });
  }
  return 'failure';
}

export function probeKindProblem(probe: V1Probe): string | undefined {
  return probe.httpGet || probe.tcpSocket
    ? undefined
    : 'only httpGet and tcpSocket probes are supported by the simulated kubelet';
}

/**
 * Runs a probe periodically until stopped; calls onResult when the verdict changes.
 * pause() (the node frozen: its kubelet is frozen with it) skips probing and discards a
 * result that arrives meanwhile; resume() carries on with the counts as they were.
 */
export class ProbeLoop {
  private timer: NodeJS.Timeout | undefined;
  private stopped = false;
  private paused = false;
  private successes = 0;
  private failures = 0;
  verdict: ProbeVerdict | undefined;

  constructor(
    private readonly probe: V1Probe,
    private readonly resolvePort: (port: number | string) => number | undefined,
    private readonly onResult: (verdict: ProbeVerdict) => void,
  ) {}

  start(): void {
    this.schedule((this.probe.initialDelaySeconds ?? 0) * 1000);
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.timer);
  }

  pause(): void {
    this.paused = true;
  }

  resume(): void {
    this.paused = false;
  }

  private schedule(ms: number): void {
    if (this.stopped) return;
    this.timer = setTimeout(() => void this.tick(), ms);
  }

  private async tick(): Promise<void> {
    const period = (this.probe.periodSeconds ?? 10) * 1000;
    if (this.paused) return this.schedule(period);
    const result = await probeOnce(this.probe, this.resolvePort);
    if (this.stopped) return;
    if (this.paused) return this.schedule(period);
    if (result === 'success') {
      this.successes++;
      this.failures = 0;
      if (this.successes >= (this.probe.successThreshold ?? 1) && this.verdict !== 'success') {
        this.verdict = 'success';
        this.onResult('success');
      }
    } else {
      this.failures++;
      this.successes = 0;
      if (this.failures >= (this.probe.failureThreshold ?? 3) && this.verdict !== 'failure') {
        this.verdict = 'failure';
        this.onResult('failure');
      }
    }
    this.schedule(period);
  }
}
