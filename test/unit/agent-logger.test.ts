/**
 * The agent's hand-written logger writes the lines pino writes for the same calls (pino,
 * configured as lib/logger.ts configures it for the manager, is the reference): same
 * keys in the same order, same values, byte for byte once the timestamp is fixed.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { pino } from 'pino';
import { createAgentLogger } from '../../agent/agent-logger.ts';
import { KubeApiError } from '../../lib/errors.ts';
import { type Logger, type LogLevel, pinoOptions } from '../../lib/logger.ts';

const FIXED_MS = Date.UTC(2026, 11, 1, 8, 0, 0, 123);

/** Both loggers at `level`, and what each wrote. */
function pair(level: LogLevel = 'info') {
  const ours: string[] = [];
  const theirs: string[] = [];
  const agent = createAgentLogger('agent', level, {
    sink: { write: (l) => ours.push(l) },
    now: () => FIXED_MS,
  });
  const reference = pino(
    { ...pinoOptions('agent', level), timestamp: () => `,"time":"${new Date(FIXED_MS).toISOString()}"` },
    { write: (l: string) => theirs.push(l) },
  ) as unknown as Logger;
  return { agent, reference, ours, theirs };
}

function same(calls: (log: Logger) => void, level: LogLevel = 'info') {
  const { agent, reference, ours, theirs } = pair(level);
  calls(agent);
  calls(reference);
  assert.deepEqual(ours, theirs);
  return ours;
}

describe('agent logger, compared with pino', () => {
  it('messages, merging objects, child bindings, levels as labels', () => {
    const lines = same((log) => {
      const child = log.child({ lease: 'default/vol-1', pod: 'pod-a' });
      child.info('agent started');
      child.info({ httpPort: 8081, timings: { renewIntervalMs: 2000 }, fence: 'pod' }, 'agent started');
      child.child({ extra: true }).warn({ detail: 'x', consecutive: 2 }, 'server check failed');
      child.error(
        { reason: 'deadline-passed', detail: { kind: 'deadline-passed', sinceLastSuccessMs: 4001.5 } },
        'fenced',
      );
      child.fatal({ n: 1 }, 'unexpected error');
      child.info({ only: 'an object' });
    });
    assert.equal(lines.length, 6);
    const first = JSON.parse(lines[0] as string) as Record<string, unknown>;
    assert.deepEqual(Object.keys(first), ['level', 'time', 'component', 'pid', 'lease', 'pod', 'msg']);
    assert.equal(first.level, 'info');
    assert.equal(first.time, '2026-12-01T08:00:00.123Z');
    assert.equal(JSON.parse(lines[2] as string).level, 'warn');
  });

  it('drops lines below the level; debug and trace when asked; nothing when silent', () => {
    assert.equal(
      same((log) => {
        log.debug({ latencyMs: 3 }, 'lease renewed');
        log.trace('very detailed');
        log.info('kept');
      }).length,
      1,
    );
    assert.equal(
      same((log) => {
        log.debug({ latencyMs: 3 }, 'lease renewed');
        log.trace('very detailed');
      }, 'trace').length,
      2,
    );
    assert.equal(same((log) => log.fatal('gone'), 'silent').length, 0);
  });

  it('values: undefined and functions left out, non-finite numbers as null, strings escaped', () => {
    const lines = same((log) =>
      log.info(
        {
          u: undefined,
          f: () => 1,
          nan: Number.NaN,
          inf: Number.POSITIVE_INFINITY,
          s: 'quote " backslash \\ newline \n tab \t unicode é ✓ \u0001',
          b: false,
          arr: [1, 'two', null],
          nested: { deep: { x: [{ y: 1 }] } },
          date: new Date(FIXED_MS),
        },
        'line with "quotes"\n',
      ),
    );
    const parsed = JSON.parse(lines[0] as string) as Record<string, unknown>;
    assert.equal('u' in parsed, false);
    assert.equal(parsed.nan, null);
  });

  it('errors: err serialized with type, message and stack (causes included), own fields kept', () => {
    const inner = new Error('connect ECONNREFUSED');
    const err = Object.assign(new Error('outer', { cause: inner }), { code: 'E_X', status: 503 });
    const api = new KubeApiError('updating lease default/vol-1', 409, {
      cause: { body: '{"kind":"Status"}' },
    });
    const lines = same((log) => {
      log.fatal({ err }, 'could not start (kubeconfig or HTTP port)');
      log.error({ err: api });
      log.error(err);
      log.warn({ err: String(err) }, 'lease renewal failing; retrying until the renew deadline');
      log.error({ err: 'not an error object' }, 'odd');
    });
    const first = JSON.parse(lines[0] as string) as { err: Record<string, unknown> };
    assert.equal(first.err.type, 'Error');
    assert.equal(first.err.message, 'outer: connect ECONNREFUSED');
    assert.match(first.err.stack as string, /caused by: Error: connect ECONNREFUSED/);
    assert.equal(first.err.code, 'E_X');
    assert.equal(JSON.parse(lines[1] as string).msg, api.message, 'msg defaults to the error message');
    assert.equal(JSON.parse(lines[2] as string).err.type, 'Error');
  });

  it('a cycle does not throw and reads as pino reads it', () => {
    const cyclic: Record<string, unknown> = { name: 'a', list: [1, 2] };
    cyclic.self = cyclic;
    const { agent, reference, ours, theirs } = pair();
    agent.info({ cyclic }, 'cycle');
    reference.info({ cyclic }, 'cycle');
    // pino's fallback (safe-stable-stringify) sorts keys; the content is the same.
    assert.deepEqual(JSON.parse(ours[0] as string), JSON.parse(theirs[0] as string));
    assert.equal(JSON.parse(ours[0] as string).cyclic.self, '[Circular]');
  });

  it('writes one line per call, each ending in a newline', () => {
    const lines = same((log) => {
      log.info('a');
      log.info('b');
    });
    for (const line of lines) assert.ok(line.endsWith('}\n') && !line.slice(0, -1).includes('\n'), line);
  });
});
