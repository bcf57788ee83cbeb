/**
 * The process metrics prom-client's collectDefaultMetrics() exposes, with the same
 * names, types, HELP texts and labels, computed the same way (prom-client 15.1, Linux),
 * so that dashboards built on the manager's metrics read the agent's too:
 *   process_cpu_{user,system}_seconds_total, process_cpu_seconds_total,
 *   process_start_time_seconds, process_{resident,virtual}_memory_bytes,
 *   process_heap_bytes, process_open_fds, process_max_fds,
 *   nodejs_eventloop_lag{,_min,_max,_mean,_stddev,_p50,_p90,_p99}_seconds,
 *   nodejs_active_{resources,handles,requests}{type} and their _total,
 *   nodejs_heap_size_{total,used}_bytes, nodejs_external_memory_bytes,
 *   nodejs_heap_space_size_{total,used,available}_bytes{space},
 *   nodejs_version_info{version,major,minor,patch}, nodejs_gc_duration_seconds{kind}.
 *
 * As in the agent's prom-client set-up before (agent-metrics.ts), the event-loop delay
 * histogram samples once a second (10 ms sampling alone costs ~0.45 % of a core), so
 * its min/mean/percentiles include that 1 s period; `nodejs_eventloop_lag_seconds` is
 * the delay of a setImmediate scheduled at the previous scrape (0 before the second).
 * Counters are cumulative from process start; the lag histogram resets at each scrape.
 *
 * NB: node:fs, node:perf_hooks and node:v8 are loaded with require(): an ESM import of a
 * Node built-in reads every export, and some exports are lazy getters that load more.
 */
import { createRequire } from 'node:module';
import { type Family, Histogram, type Sample } from '../lib/prom-text.ts';

const require = createRequire(import.meta.url);
const { readdirSync, readFileSync } = require('node:fs') as typeof import('node:fs');
const GC_BUCKETS = [0.001, 0.01, 0.1, 1, 2, 5];

export class ProcessMetrics {
  private readonly startTimeSeconds = Math.round(Date.now() / 1000 - process.uptime());
  private readonly maxFds = readMaxFds();
  private readonly gc = new Histogram(GC_BUCKETS);
  private readonly loopDelay: ReturnType<typeof import('node:perf_hooks').monitorEventLoopDelay>;
  private lastLagSeconds = 0;
  private readonly v8: typeof import('node:v8');

  constructor(private readonly prefix: string) {
    const perf = require('node:perf_hooks') as typeof import('node:perf_hooks');
    this.v8 = require('node:v8') as typeof import('node:v8');
    this.loopDelay = perf.monitorEventLoopDelay({ resolution: 1000 });
    this.loopDelay.enable();
    const kinds: Record<number, string> = {
      [perf.constants.NODE_PERFORMANCE_GC_MAJOR]: 'major',
      [perf.constants.NODE_PERFORMANCE_GC_MINOR]: 'minor',
      [perf.constants.NODE_PERFORMANCE_GC_INCREMENTAL]: 'incremental',
      [perf.constants.NODE_PERFORMANCE_GC_WEAKCB]: 'weakcb',
    };
    new perf.PerformanceObserver((list) => {
      for (const entry of list.getEntries()) {
        const kind = kinds[(entry as { detail?: { kind?: number } }).detail?.kind ?? -1] ?? 'unknown';
        this.gc.observe(entry.duration / 1000, { kind });
      }
    }).observe({ entryTypes: ['gc'] });
  }

  /** Every family, read now; also starts the next event-loop lag measurement. */
  families(): Family[] {
    const p = this.prefix;
    const cpu = process.cpuUsage();
    const status = readStatus();
    const mem = process.memoryUsage();
    const loop = this.loopDelay;
    const g = (name: string, help: string, value: number | undefined): Family => ({
      name: p + name,
      help,
      type: 'gauge',
      samples: value === undefined ? [] : [{ value }],
    });
    const families: Family[] = [
      counter(`${p}process_cpu_user_seconds_total`, 'Total user CPU time spent in seconds.', cpu.user / 1e6),
      counter(
        `${p}process_cpu_system_seconds_total`,
        'Total system CPU time spent in seconds.',
        cpu.system / 1e6,
      ),
      counter(
        `${p}process_cpu_seconds_total`,
        'Total user and system CPU time spent in seconds.',
        (cpu.user + cpu.system) / 1e6,
      ),
      g(
        'process_start_time_seconds',
        'Start time of the process since unix epoch in seconds.',
        this.startTimeSeconds,
      ),
      g('process_resident_memory_bytes', 'Resident memory size in bytes.', status.VmRSS),
      g('process_virtual_memory_bytes', 'Virtual memory size in bytes.', status.VmSize),
      g('process_heap_bytes', 'Process heap size in bytes.', status.VmData),
      g('process_open_fds', 'Number of open file descriptors.', openFds()),
      g('process_max_fds', 'Maximum number of open file descriptors.', this.maxFds),
      g('nodejs_eventloop_lag_seconds', 'Lag of event loop in seconds.', this.lastLagSeconds),
      g('nodejs_eventloop_lag_min_seconds', 'The minimum recorded event loop delay.', loop.min / 1e9),
      g('nodejs_eventloop_lag_max_seconds', 'The maximum recorded event loop delay.', loop.max / 1e9),
      g('nodejs_eventloop_lag_mean_seconds', 'The mean of the recorded event loop delays.', loop.mean / 1e9),
      g(
        'nodejs_eventloop_lag_stddev_seconds',
        'The standard deviation of the recorded event loop delays.',
        loop.stddev / 1e9,
      ),
      g(
        'nodejs_eventloop_lag_p50_seconds',
        'The 50th percentile of the recorded event loop delays.',
        loop.percentile(50) / 1e9,
      ),
      g(
        'nodejs_eventloop_lag_p90_seconds',
        'The 90th percentile of the recorded event loop delays.',
        loop.percentile(90) / 1e9,
      ),
      g(
        'nodejs_eventloop_lag_p99_seconds',
        'The 99th percentile of the recorded event loop delays.',
        loop.percentile(99) / 1e9,
      ),
    ];
    loop.reset();
    const start = process.hrtime.bigint();
    setImmediate(() => {
      this.lastLagSeconds = Number(process.hrtime.bigint() - start) / 1e9;
    });

    const resources = process.getActiveResourcesInfo();
    const handles = (process as unknown as { _getActiveHandles(): object[] })._getActiveHandles();
    const requests = (process as unknown as { _getActiveRequests(): object[] })._getActiveRequests();
    families.push(
      byType(
        `${p}nodejs_active_resources`,
        'Number of active resources that are currently keeping the event loop alive, grouped by async resource type.',
        resources,
      ),
      g('nodejs_active_resources_total', 'Total number of active resources.', resources.length),
      byType(
        `${p}nodejs_active_handles`,
        'Number of active libuv handles grouped by handle type. Every handle type is C++ class name.',
        handles.map(className),
      ),
      g('nodejs_active_handles_total', 'Total number of active handles.', handles.length),
      byType(
        `${p}nodejs_active_requests`,
        'Number of active libuv requests grouped by request type. Every request type is C++ class name.',
        requests.map(className),
      ),
      g('nodejs_active_requests_total', 'Total number of active requests.', requests.length),
      g('nodejs_heap_size_total_bytes', 'Process heap size from Node.js in bytes.', mem.heapTotal),
      g('nodejs_heap_size_used_bytes', 'Process heap size used from Node.js in bytes.', mem.heapUsed),
      g('nodejs_external_memory_bytes', 'Node.js external memory size in bytes.', mem.external),
    );
    const spaces = this.v8.getHeapSpaceStatistics();
    const space = (s: (typeof spaces)[number]) => ({
      space: s.space_name.slice(0, s.space_name.indexOf('_space')),
    });
    for (const [kind, pick] of [
      ['total', (s: (typeof spaces)[number]) => s.space_size],
      ['used', (s: (typeof spaces)[number]) => s.space_used_size],
      ['available', (s: (typeof spaces)[number]) => s.space_available_size],
    ] as const) {
      families.push({
        name: `${p}nodejs_heap_space_size_${kind}_bytes`,
        help: `Process heap space size ${kind} from Node.js in bytes.`,
        type: 'gauge',
        samples: spaces.map((s) => ({ labels: space(s), value: pick(s) })),
      });
    }
    const [major, minor, patch] = process.version.slice(1).split('.');
    families.push(
      {
        name: `${p}nodejs_version_info`,
        help: 'Node.js version info.',
        type: 'gauge',
        samples: [
          {
            labels: { version: process.version, major: `${major}`, minor: `${minor}`, patch: `${patch}` },
            value: 1,
          },
        ],
      },
      {
        name: `${p}nodejs_gc_duration_seconds`,
        help: 'Garbage collection duration by kind, one of major, minor, incremental or weakcb.',
        type: 'histogram',
        samples: this.gc.samples(),
      },
    );
    return families;
  }
}

function counter(name: string, help: string, value: number): Family {
  return { name, help, type: 'counter', samples: [{ value }] };
}

function byType(name: string, help: string, types: readonly string[]): Family {
  const counts = new Map<string, number>();
  for (const t of types) counts.set(t, (counts.get(t) ?? 0) + 1);
  const samples: Sample[] = [...counts].map(([type, value]) => ({ labels: { type }, value }));
  return { name, help, type: 'gauge', samples };
}

function className(o: object): string {
  return (o as { constructor?: { name?: string } }).constructor?.name ?? 'Object';
}

/** VmRSS, VmSize, VmData of /proc/self/status in bytes (empty off Linux). */
function readStatus(): Partial<Record<'VmRSS' | 'VmSize' | 'VmData', number>> {
  const out: Partial<Record<'VmRSS' | 'VmSize' | 'VmData', number>> = {};
  try {
    for (const line of readFileSync('/proc/self/status', 'utf8').split('\n')) {
      const m = /^(VmRSS|VmSize|VmData):\s+(\d+) kB/.exec(line);
      if (m) out[m[1] as 'VmRSS'] = Number(m[2]) * 1024;
    }
  } catch {
    // not Linux: the gauges stay without a sample
  }
  return out;
}

function openFds(): number | undefined {
  try {
    return readdirSync('/proc/self/fd').length - 1; // minus the one readdirSync used
  } catch {
    return undefined;
  }
}

function readMaxFds(): number | undefined {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8')
      .split('\n')
      .find((l) => l.startsWith('Max open files'));
    return line === undefined ? undefined : Number(line.split(/ {2,}/)[1]);
  } catch {
    return undefined;
  }
}
