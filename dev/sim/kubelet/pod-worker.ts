/**
 * One pod on a simulated node, from admission to its end, as a kubelet runs it:
 *   1. volumes: PVC bound, CSI volumes reported in use and attached (VolumeAttachment);
 *   2. host ports for the pod, a TokenRequest token for its service account (bound
 *      to the pod) in a per-pod kubeconfig whose server is the node's proxy;
 *   3. its sandbox (own PID namespace and /run; the pod's rpcbind for an NFSv3 server:
 *      ../runtime/pod-rpcbind.ts); init containers in order: a native sidecar
 *      (restartPolicy Always) must pass its startup probe before the next starts
 *      (without one: once its process runs, as computeInitContainerActions has it), a
 *      plain init container must exit 0;
 *   4. main containers; status reported on every change; with restartPolicy Never the
 *      pod ends when its main containers have, and then its sidecars are stopped.
 * terminate(grace): main containers first, then sidecars in reverse order, all within
 * the grace period. kill(): everything at once with SIGKILL and no status (a force
 * delete, or the node crashed).
 * Each container runs as the user, groups and capabilities a real node gives it
 * (../runtime/container-identity.ts); the files it needs get a kubelet's owners and modes
 * (../runtime/container-files.ts). Every container exit goes to the exit log with its reason.
 */
import { join } from 'node:path';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { monotonicMs, sleep } from '../../../lib/clock.ts';
import type { k8s } from '../../../lib/kube-client.ts';
import { allocatePodIP } from '../node/pod-ip.ts';
import { containerNodePath, exposeTokenKubeconfig, preparePodDir } from '../runtime/container-files.ts';
import type { Launch } from '../runtime/container-launch.ts';
import { ContainerRunner, type ContainerView, type ExitReason } from '../runtime/container-runner.ts';
import { podNeedsRpcbind } from '../runtime/pod-rpcbind.ts';
import { type ContainerExit, PodSandbox } from '../runtime/pod-sandbox.ts';
import { allocatePorts, requestPodToken, resolvePodLaunches } from './pod-prepare.ts';
import { type PodRuntimeView, podStatusPatch, type TransitionMemory } from './pod-status.ts';
import { type CsiVolume, waitForVolumes } from './pod-volumes.ts';

export interface ContainerExitRecord {
  node: string;
  namespace: string;
  pod: string;
  container: string;
  image: string;
  monoMs: number;
  code: number | null;
  signal: string | null;
  /** Why it ended: on its own, killed by a failed liveness/startup probe, stopped, killed. */
  reason: ExitReason;
}

export interface PodWorkerContext {
  nodeName: string;
  simRoot: string;
  repoRoot: string;
  kubeConfig: k8s.KubeConfig;
  writeTokenKubeconfig(path: string, token: string): Promise<void>;
  reportStatus(pod: V1Pod, patch: { status: Record<string, unknown> }): void;
  volumesChanged(): void;
  recordExit(exit: ContainerExitRecord): void;
  /** Env the node adds to every container started from now on. */
  nodeEnv(): Readonly<Record<string, string>>;
  log(msg: string, extra?: Record<string, unknown>): void;
}

export class PodWorker {
  readonly key: string;
  csiVolumes: CsiVolume[] = [];
  readonly ports = new Map<number, number>();
  private sandbox: PodSandbox | undefined;
  private sidecars: ContainerRunner[] = [];
  private mains: ContainerRunner[] = [];
  private readonly aborted = new AbortController();
  private silent = false;
  private ended: Promise<void> | undefined;
  private running: Promise<void> = Promise.resolve();
  private readonly memory: TransitionMemory = new Map();
  readonly view: PodRuntimeView;

  constructor(
    private pod: V1Pod,
    private readonly ctx: PodWorkerContext,
  ) {
    this.key = `${pod.metadata?.namespace}/${pod.metadata?.name}`;
    const placeholder = (c: V1Container): ContainerView => ({
      name: c.name,
      image: c.image ?? '',
      phase: { kind: 'waiting', reason: 'ContainerCreating' },
      lastTerminated: undefined,
      restartCount: 0,
      started: false,
      ready: false,
      hostPid: undefined,
    });
    this.view = {
      podUid: pod.metadata?.uid ?? '',
      // Reported only (EndpointSlices reject loopback); processes listen on the host ports.
      podIP: allocatePodIP(),
      hostIP: '127.0.0.1',
      startTime: new Date(),
      phase: 'Pending',
      initialized: false,
      init: (pod.spec?.initContainers ?? []).map(placeholder),
      main: (pod.spec?.containers ?? []).map(placeholder),
    };
  }

  get uid(): string {
    return this.view.podUid;
  }

  get terminal(): boolean {
    return this.view.phase === 'Succeeded' || this.view.phase === 'Failed';
  }

  /** Host PIDs of the pod's processes (for fault switches and tests). */
  processes(): number[] {
    return this.sandbox?.processes() ?? [];
  }

  publish(): void {
    if (this.silent) return;
    this.ctx.reportStatus(this.pod, podStatusPatch(this.view, new Date(), this.memory));
  }

  /** Starts the pod; terminate() or kill() end it. */
  start(): void {
    this.running = this.run();
  }

  private async run(): Promise<void> {
    const signal = this.aborted.signal;
    this.publish();
    try {
      const hostDirs = await this.waitForVolumes(signal);
      if (!hostDirs) return;
      const podDir = preparePodDir(this.ctx.simRoot, this.uid);
      for (const [port, host] of await allocatePorts(this.pod)) this.ports.set(port, host);
      const kubeconfigPath = join(podDir, 'kubeconfig');
      await this.ctx.writeTokenKubeconfig(
        kubeconfigPath,
        await requestPodToken(this.ctx.kubeConfig, this.pod),
      );
      exposeTokenKubeconfig(kubeconfigPath, this.pod);
      const launches = this.resolveLaunches(hostDirs, kubeconfigPath, podDir);
      if (!launches || signal.aborted) return;
      this.sandbox = await PodSandbox.start(this.key, {
        rpcbind: podNeedsRpcbind([...launches.init, ...launches.main]),
      });
      if (signal.aborted) {
        await this.releaseSandbox();
        return;
      }
      await this.runInitContainers(launches, podDir, signal);
      if (signal.aborted || this.terminal) return;
      this.view.initialized = true;
      const policy = this.pod.spec?.restartPolicy ?? 'Always';
      const restart = policy === 'Always' ? 'always' : policy === 'OnFailure' ? 'on-failure' : 'never';
      this.mains = (this.pod.spec?.containers ?? []).map((c, i) =>
        this.runner(c, launches.main[i] as Launch & { kind: 'process' }, podDir, restart, this.view.main, i),
      );
      const finished = Promise.all(this.mains.map((r) => r.start()));
      this.publish();
      await finished;
      if (signal.aborted) return;
      const ok = this.mains.every((r) => r.view.phase.kind === 'terminated' && r.view.phase.exitCode === 0);
      this.view.phase = ok ? 'Succeeded' : 'Failed';
      this.ctx.log('pod ended: its main containers exited', { pod: this.key, phase: this.view.phase });
      await this.stopSidecars(this.graceMs());
      await this.releaseSandbox();
      this.publish();
    } catch (err) {
      if (signal.aborted) return;
      this.ctx.log('pod failed to start', { pod: this.key, error: String(err) });
      this.view.phase = 'Failed';
      this.view.reason = 'SimulatorError';
      this.view.message = String(err instanceof Error ? err.message : err);
      await this.releaseSandbox();
      this.publish();
    }
  }

  private graceMs(override?: number): number {
    return (
      1000 *
      (override ??
        this.pod.metadata?.deletionGracePeriodSeconds ??
        this.pod.spec?.terminationGracePeriodSeconds ??
        30)
    );
  }

  private async waitForVolumes(signal: AbortSignal): Promise<Map<string, string> | undefined> {
    const waitStart = monotonicMs();
    const hostDirs = await waitForVolumes(
      this.pod,
      this.ctx.kubeConfig,
      this.ctx.simRoot,
      this.ctx.nodeName,
      signal,
      {
        inUse: (csi) => {
          this.csiVolumes = csi;
          this.ctx.volumesChanged();
        },
        waiting: (message) => this.setWaiting('ContainerCreating', message),
      },
    );
    if (hostDirs && this.csiVolumes.length > 0) {
      this.ctx.log('volumes attached', { pod: this.key, waitedMs: Math.round(monotonicMs() - waitStart) });
    }
    return hostDirs;
  }

  private setWaiting(reason: string, message: string): void {
    let changed = false;
    for (const c of [...this.view.init, ...this.view.main]) {
      if (c.phase.kind === 'waiting' && c.phase.message !== message) {
        c.phase = { kind: 'waiting', reason, message };
        changed = true;
      }
    }
    if (changed) this.publish();
  }

  /** The launches of every container, or undefined (status published) when one cannot start. */
  private resolveLaunches(hostDirs: Map<string, string>, kubeconfigPath: string, podDir: string) {
    const launches = resolvePodLaunches(this.pod, {
      repoRoot: this.ctx.repoRoot,
      nodePath: containerNodePath(this.ctx.simRoot),
      podIP: this.view.podIP,
      hostIP: this.view.hostIP,
      kubeconfigPath,
      ports: this.ports,
      hostDirs,
      nodeEnv: this.ctx.nodeEnv(),
      podDir,
    });
    const all = [...launches.init, ...launches.main];
    for (const l of all) {
      if (l.kind === 'process' && l.identity.ignoredCaps.length > 0) {
        // As runc does: a warning, and the container runs without them.
        this.ctx.log('ignoring unknown or unavailable capabilities', {
          pod: this.key,
          script: l.script,
          ignored: l.identity.ignoredCaps,
        });
      }
    }
    if (!all.some((l) => l.kind === 'error')) return launches;
    all.forEach((l, i) => {
      const view = [...this.view.init, ...this.view.main][i] as ContainerView;
      if (l.kind === 'error') view.phase = { kind: 'waiting', reason: l.reason, message: l.message };
    });
    this.ctx.log('pod cannot start', { pod: this.key, problems: all.filter((l) => l.kind === 'error') });
    this.publish();
    return undefined;
  }

  private runner(
    container: V1Container,
    launch: Launch & { kind: 'process' },
    podDir: string,
    restart: 'always' | 'never' | 'on-failure',
    views: ContainerView[],
    index: number,
  ): ContainerRunner {
    const runner = new ContainerRunner({
      container,
      sandbox: this.sandbox as PodSandbox,
      launch,
      logPath: join(podDir, 'logs', `${container.name}.log`),
      restart,
      graceMs: this.graceMs(),
      resolvePort: (port) => this.resolvePort(port),
      onChange: () => this.onContainerChange(),
      log: (msg, extra) => this.ctx.log(msg, { pod: this.key, ...extra }),
      onExit: (exit: ContainerExit, view, reason) => {
        this.ctx.log('container exited', {
          pod: this.key,
          container: view.name,
          code: exit.code,
          signal: exit.signal,
          reason,
        });
        this.ctx.recordExit({
          node: this.ctx.nodeName,
          namespace: this.pod.metadata?.namespace ?? '',
          pod: this.pod.metadata?.name ?? '',
          container: view.name,
          image: view.image,
          monoMs: monotonicMs(),
          code: exit.code,
          signal: exit.signal,
          reason,
        });
      },
    });
    views[index] = runner.view;
    return runner;
  }

  private onContainerChange(): void {
    if (
      !this.terminal &&
      this.mains.length > 0 &&
      this.mains.every((r) => r.view.phase.kind !== 'waiting' || r.view.restartCount > 0)
    ) {
      this.view.phase = 'Running';
    }
    this.publish();
  }

  private async runInitContainers(
    launches: { init: Launch[] },
    podDir: string,
    signal: AbortSignal,
  ): Promise<void> {
    const inits = this.pod.spec?.initContainers ?? [];
    for (const [i, c] of inits.entries()) {
      const launch = launches.init[i] as Launch & { kind: 'process' };
      if (c.restartPolicy === 'Always') {
        const runner = this.runner(c, launch, podDir, 'always', this.view.init, i);
        this.sidecars.push(runner);
        void runner.start();
        while (!runner.view.started && !signal.aborted) await sleep(50);
      } else {
        const runner = this.runner(c, launch, podDir, 'never', this.view.init, i);
        await runner.start();
        const phase = runner.view.phase;
        if (phase.kind === 'terminated' && phase.exitCode !== 0) {
          this.view.phase = 'Failed';
          this.view.reason = 'InitContainerFailed';
          this.view.message = `init container ${c.name} exited with code ${phase.exitCode}`;
          await this.stopSidecars(this.graceMs());
          await this.releaseSandbox();
          this.publish();
          return;
        }
      }
      if (signal.aborted) return;
    }
  }

  resolvePort(port: number | string): number | undefined {
    if (typeof port === 'number' || /^\d+$/.test(port)) return this.ports.get(Number(port));
    const all = [...(this.pod.spec?.initContainers ?? []), ...(this.pod.spec?.containers ?? [])];
    const named = all.flatMap((c) => c.ports ?? []).find((p) => p.name === port);
    return named ? this.ports.get(named.containerPort) : undefined;
  }

  private async stopSidecars(graceMs: number): Promise<void> {
    for (const r of [...this.sidecars].reverse()) await r.stop(Math.max(2_000, graceMs));
  }

  private async releaseSandbox(): Promise<void> {
    await this.sandbox?.kill();
    this.sandbox = undefined;
    if (this.csiVolumes.length > 0) {
      this.csiVolumes = [];
      this.ctx.volumesChanged();
    }
  }

  /** Graceful stop for a pod deletion: mains, then sidecars, within the grace period. */
  terminate(graceSeconds?: number): Promise<void> {
    this.ended ??= (async () => {
      this.aborted.abort();
      const graceMs = this.graceMs(graceSeconds);
      const deadline = performance.now() + graceMs;
      await Promise.all(this.mains.map((r) => r.stop(graceMs)));
      await this.stopSidecars(Math.max(0, deadline - performance.now()));
      await this.releaseSandbox();
      await this.running;
      if (!this.terminal) {
        const ok = [...this.mains].every(
          (r) => r.view.phase.kind === 'terminated' && r.view.phase.exitCode === 0,
        );
        this.view.phase = this.mains.length > 0 && ok ? 'Succeeded' : 'Failed';
      }
      this.publish();
    })();
    return this.ended;
  }

  /** SIGKILL everything now, and report no status from here on (force delete, node crash). */
  async kill(): Promise<void> {
    this.silent = true;
    this.aborted.abort();
    for (const r of [...this.mains, ...this.sidecars]) r.abandon();
    await this.releaseSandbox();
    await this.running;
    await this.releaseSandbox();
  }

  freeze(): void {
    for (const r of [...this.mains, ...this.sidecars]) r.freeze();
    this.sandbox?.freeze();
  }

  thaw(): void {
    this.sandbox?.thaw();
    for (const r of [...this.mains, ...this.sidecars]) r.thaw();
  }

  update(pod: V1Pod): void {
    this.pod = pod;
  }
}
