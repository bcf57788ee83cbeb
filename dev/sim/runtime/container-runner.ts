/**
 * One container of a pod, as a kubelet runs it: start the process in the pod's
 * sandbox, run its startup, readiness and liveness probes, and restart it by its
 * restart rule (native sidecars and `Always` pods restart in place, restartCount++,
 * backoff 0, 0.5, 1, 2 ... 10 s, reset after 10 s of running).
 *
 * State: `started` turns true when the startup probe passes (at once without one);
 * `ready` follows the readiness probe once started (= started without one). A failed
 * startup or liveness probe kills the container (SIGTERM, then SIGKILL after the
 * probe's own terminationGracePeriodSeconds when it sets one, as kubelets >= 1.25 do,
 * else the pod's) and the restart rule decides what follows: with restart 'never' a
 * container killed by its liveness probe stays terminated.
 * `stop()` ends the container for good: SIGTERM, SIGKILL after the grace period.
 * Every exit is reported with why it ended (ExitReason): on its own, a failed probe,
 * a stop by the kubelet, or the sandbox killed under it.
 */
import type { V1Container, V1Probe } from '@kubernetes/client-node';
import { sleep } from '../../../lib/clock.ts';
import { ProbeLoop, probeKindProblem } from '../kubelet/probes.ts';
import type { ContainerIdentity } from './container-identity.ts';
import type { ContainerExit, ContainerProcess, PodSandbox } from './pod-sandbox.ts';

export type ContainerPhase =
  | { kind: 'waiting'; reason: string; message?: string }
  | { kind: 'running'; startedAt: Date }
  | {
      kind: 'terminated';
      exitCode: number;
      signal?: string;
      reason: string;
      startedAt: Date;
      finishedAt: Date;
    };

export interface ContainerView {
  name: string;
  image: string;
  phase: ContainerPhase;
  lastTerminated: ContainerPhase | undefined;
  restartCount: number;
  started: boolean;
  ready: boolean;
  hostPid: number | undefined;
}

/**
 * Why a container process ended: `exited` on its own; `liveness` / `startup` killed
 * after that probe failed; `stopped` by the kubelet (pod deletion, or a sidecar after
 * the main containers ended); `killed` with its sandbox (force delete, node crash).
 * NB: it is the kubelet's first decision to end the process, not proof of what ended
 * it: a server that a fence SIGTERMed while the kubelet was already killing it for a
 * failed liveness probe shows `liveness` (both races happen in sim-fence.test.ts).
 */
export type ExitReason = 'exited' | 'liveness' | 'startup' | 'stopped' | 'killed';

export interface ContainerRunnerOptions {
  container: V1Container;
  sandbox: PodSandbox;
  /** Resolved launch (command, args, env, identity) for the process. */
  launch: { command: string; args: string[]; env: Record<string, string>; identity: ContainerIdentity };
  logPath: string;
  restart: 'always' | 'never' | 'on-failure';
  graceMs: number;
  resolvePort: (port: number | string) => number | undefined;
  onChange(): void;
  /** Every process exit, restarted or not (the simulator's exit log). */
  onExit(exit: ContainerExit, view: ContainerView, reason: ExitReason): void;
  log(msg: string, extra?: Record<string, unknown>): void;
}

export class ContainerRunner {
  readonly view: ContainerView;
  private process: ContainerProcess | undefined;
  private probes: ProbeLoop[] = [];
  private frozen = false;
  private stopping = false;
  private finished: Promise<void> | undefined;
  private consecutiveQuickExits = 0;
  private readonly stopSignal = new AbortController();
  /** Why the running process is being ended, once the kubelet decided to end it. */
  private endReason: ExitReason | undefined;

  constructor(private readonly opts: ContainerRunnerOptions) {
    this.view = {
      name: opts.container.name,
      image: opts.container.image ?? '',
      phase: { kind: 'waiting', reason: 'ContainerCreating' },
      lastTerminated: undefined,
      restartCount: 0,
      started: false,
      ready: false,
      hostPid: undefined,
    };
  }

  /** Starts the container; the returned promise resolves when it will not run again. */
  start(): Promise<void> {
    this.finished ??= this.loop();
    return this.finished;
  }

  private async loop(): Promise<void> {
    for (;;) {
      if (this.stopping) return;
      const startedAt = new Date();
      const exit = await this.runOnce(startedAt);
      const finishedAt = new Date();
      const exitCode = exit.code ?? 128 + signalNumber(exit.signal);
      const phase: ContainerPhase = {
        kind: 'terminated',
        exitCode,
        ...(exit.signal ? { signal: exit.signal } : {}),
        reason: exitCode === 0 ? 'Completed' : 'Error',
        startedAt,
        finishedAt,
      };
      this.view.phase = phase;
      this.view.started = false;
      this.view.ready = false;
      this.view.hostPid = undefined;
      this.opts.onExit(exit, this.view, this.endReason ?? 'exited');
      this.endReason = undefined;
      const restart =
        !this.stopping &&
        (this.opts.restart === 'always' || (this.opts.restart === 'on-failure' && exitCode !== 0));
      if (!restart) {
        this.stopping = true;
        this.opts.onChange();
        return;
      }
      const ranMs = finishedAt.getTime() - startedAt.getTime();
      this.consecutiveQuickExits = ranMs > 10_000 ? 0 : this.consecutiveQuickExits + 1;
      const backoffMs =
        this.consecutiveQuickExits <= 1 ? 0 : Math.min(10_000, 250 * 2 ** (this.consecutiveQuickExits - 1));
      this.view.lastTerminated = phase;
      this.view.restartCount++;
      if (backoffMs > 0) {
        this.view.phase = {
          kind: 'waiting',
          reason: 'CrashLoopBackOff',
          message: `back-off ${backoffMs} ms restarting the container`,
        };
      }
      this.opts.onChange();
      await sleep(backoffMs, this.stopSignal.signal).catch(() => {});
    }
  }

  private async runOnce(startedAt: Date): Promise<ContainerExit> {
    const { command, args, env, identity } = this.opts.launch;
    const proc = this.opts.sandbox.run(command, args, env, this.opts.logPath, identity);
    this.process = proc;
    this.view.phase = { kind: 'running', startedAt };
    this.startProbes(proc);
    this.opts.onChange();
    void proc.hostPidKnown.then((pid) => {
      if (this.process === proc) this.view.hostPid = pid;
    });
    const exit = await proc.exited;
    for (const p of this.probes) p.stop();
    this.probes = [];
    this.process = undefined;
    return exit;
  }

  /** The node froze (its kubelet with it): probes neither run nor count until thaw(). */
  freeze(): void {
    this.frozen = true;
    for (const p of this.probes) p.pause();
  }

  thaw(): void {
    this.frozen = false;
    for (const p of this.probes) p.resume();
  }

  private startProbes(proc: ContainerProcess): void {
    const c = this.opts.container;
    const kill = (probe: V1Probe, reason: 'liveness' | 'startup') => {
      const graceMs =
        probe.terminationGracePeriodSeconds === undefined
          ? this.opts.graceMs
          : probe.terminationGracePeriodSeconds * 1000;
      this.opts.log(`container failed its ${reason} probe, killing it`, {
        container: c.name,
        graceMs,
        restart: this.opts.restart,
      });
      void this.kill(proc, graceMs, reason);
    };
    const setReady = (ready: boolean) => {
      if (this.view.ready !== ready) {
        this.view.ready = ready;
        this.opts.onChange();
      }
    };
    const readiness = () => {
      if (!c.readinessProbe || probeKindProblem(c.readinessProbe)) return setReady(!c.readinessProbe);
      const loop = new ProbeLoop(c.readinessProbe, this.opts.resolvePort, (v) => setReady(v === 'success'));
      this.probes.push(loop);
      if (this.frozen) loop.pause();
      loop.start();
    };
    const markStarted = () => {
      this.view.started = true;
      this.opts.onChange();
      readiness();
      const liveness = c.livenessProbe;
      if (liveness && !probeKindProblem(liveness)) {
        const loop = new ProbeLoop(liveness, this.opts.resolvePort, (v) => {
          if (v === 'failure') kill(liveness, 'liveness');
        });
        this.probes.push(loop);
        if (this.frozen) loop.pause();
        loop.start();
      }
    };
    const startup = c.startupProbe;
    if (startup && !probeKindProblem(startup)) {
      const loop = new ProbeLoop(startup, this.opts.resolvePort, (v) => {
        loop.stop();
        if (v === 'success') markStarted();
        else kill(startup, 'startup');
      });
      this.probes.push(loop);
      if (this.frozen) loop.pause();
      loop.start();
    } else {
      markStarted();
    }
  }

  /** SIGTERM, then SIGKILL after the grace period; resolves when the process is gone. */
  private async kill(proc: ContainerProcess, graceMs: number, reason: ExitReason): Promise<void> {
    // The first decision to end this process names it (a stop during a probe kill
    // does not rename it).
    if (this.process === proc) this.endReason ??= reason;
    proc.signal('SIGTERM');
    const timer = setTimeout(() => proc.signal('SIGKILL'), graceMs);
    await proc.exited;
    clearTimeout(timer);
  }

  /** Ends the container for good within graceMs. Idempotent. */
  async stop(graceMs = this.opts.graceMs): Promise<void> {
    this.stopping = true;
    this.stopSignal.abort();
    const proc = this.process;
    if (proc) await this.kill(proc, graceMs, 'stopped');
    await this.finished;
  }

  /** Forget the container without status (the node crashed): no restart. */
  abandon(): void {
    this.stopping = true;
    if (this.process) this.endReason ??= 'killed';
    for (const p of this.probes) p.stop();
  }

  /** True once stop() or a final exit ended it. */
  get done(): boolean {
    return this.stopping && this.process === undefined;
  }
}

function signalNumber(signal: NodeJS.Signals | null): number {
  const numbers: Record<string, number> = {
    SIGHUP: 1,
    SIGINT: 2,
    SIGKILL: 9,
    SIGTERM: 15,
    SIGABRT: 6,
    SIGSEGV: 11,
  };
  return signal ? (numbers[signal] ?? 1) : 0;
}
