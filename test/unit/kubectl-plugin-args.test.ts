/**
 * `kubectl leasehold`'s inputs before any request: the command line
 * (kubectl-plugin/plugin-args.ts), the kubeconfig and context (kube-target.ts, on real
 * files), the share a name means (share-snapshot.ts findShare), and how a failed read
 * is worded (plugin-error.ts). Each bad input is refused with one message naming it.
 *   node --import tsx --test test/unit/kubectl-plugin-args.test.ts
 */
import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import { loadKubeTarget } from '../../kubectl-plugin/kube-target.ts';
import { parseArgs } from '../../kubectl-plugin/plugin-args.ts';
import { explainFailure, PluginError } from '../../kubectl-plugin/plugin-error.ts';
import { claimOf, findShare } from '../../kubectl-plugin/share-snapshot.ts';
import { KubeApiError } from '../../lib/errors.ts';
import type { ShareManager } from '../../manager/share-model/share-manager-spec.ts';

describe('the command line', () => {
  test('each command with its SHARE and the flags, in either spelling and anywhere', () => {
    assert.deepEqual(parseArgs(['status']), { ok: true, args: { command: 'status' } });
    assert.deepEqual(parseArgs(['-n', 'apps', 'status']), {
      ok: true,
      args: { command: 'status', namespace: 'apps' },
    });
    assert.deepEqual(parseArgs(['why', 'vol-a', '-napps', '--kubeconfig=/k', '--context', 'prod']), {
      ok: true,
      args: { command: 'why', share: 'vol-a', namespace: 'apps', kubeconfig: '/k', context: 'prod' },
    });
    assert.deepEqual(parseArgs(['timeline', '--namespace=apps', 'vol-a', '-A']).ok, false);
    assert.deepEqual(parseArgs(['timeline', 'vol-a', '--all-namespaces']), {
      ok: true,
      args: { command: 'timeline', share: 'vol-a' },
    });
    assert.deepEqual(parseArgs(['why', '--help']), { ok: true, args: { command: 'help' } });
  });

  test('bad input: one message naming it and the rule', () => {
    const refused = (argv: string[]) => {
      const parsed = parseArgs(argv);
      assert.equal(parsed.ok, false, `${argv.join(' ')} accepted`);
      return parsed.ok ? '' : parsed.message;
    };
    assert.equal(refused([]), 'no command: expected one of status, timeline, why');
    assert.equal(refused(['stauts']), 'unknown command "stauts": expected one of status, timeline, why');
    assert.equal(refused(['why']), 'why needs a SHARE: the name of a ShareManager or of the claim it serves');
    assert.equal(refused(['why', 'a', 'b']), 'why takes one SHARE; unexpected "b"');
    assert.equal(
      refused(['status', 'vol-a']),
      'status takes no SHARE (got "vol-a"): it lists every share; use why vol-a',
    );
    assert.match(refused(['status', '--output=json']), /^unknown flag "--output=json": the flags are /);
    assert.equal(refused(['status', '-n']), 'flag -n needs a value');
    assert.equal(refused(['status', '--context', '--kubeconfig', 'x']), 'flag --context needs a value');
    assert.equal(refused(['status', '--context=']), 'flag --context needs a value');
    assert.equal(refused(['status', '-A', '-n', 'x']), '-A and -n x contradict each other: give one');
  });
});

describe('the kubeconfig and context, as kubectl picks them', () => {
  const dir = mkdtempSync(join(tmpdir(), 'leasehold-kubeconfig-'));
  const config = (current: string) =>
    JSON.stringify({
      apiVersion: 'v1',
      kind: 'Config',
      clusters: [
        { name: 'a', cluster: { server: 'https://a.example:6443' } },
        { name: 'b', cluster: { server: 'https://b.example:6443' } },
      ],
      users: [{ name: 'u', user: { token: 't' } }],
      contexts: [
        { name: 'ctx-a', context: { cluster: 'a', user: 'u' } },
        { name: 'ctx-b', context: { cluster: 'b', user: 'u' } },
        { name: 'broken', context: { cluster: 'missing', user: 'u' } },
      ],
      'current-context': current,
    });
  const file = join(dir, 'config');
  writeFileSync(file, config('ctx-a'));

  test('KUBECONFIG, --kubeconfig and --context choose the server', () => {
    const saved = process.env.KUBECONFIG;
    process.env.KUBECONFIG = file;
    try {
      assert.equal(loadKubeTarget({}).server, 'https://a.example:6443');
    } finally {
      if (saved === undefined) delete process.env.KUBECONFIG;
      else process.env.KUBECONFIG = saved;
    }
    const b = loadKubeTarget({ kubeconfig: file, context: 'ctx-b' });
    assert.deepEqual([b.server, b.context], ['https://b.example:6443', 'ctx-b']);
  });

  test('a missing file, an unknown context or a context without a cluster: exit 2, named', () => {
    const failure = (flags: { kubeconfig?: string; context?: string }) => {
      try {
        loadKubeTarget(flags);
      } catch (err) {
        assert.ok(err instanceof PluginError);
        assert.equal(err.exitCode, 2);
        return err.message;
      }
      assert.fail('accepted');
    };
    assert.equal(
      failure({ kubeconfig: join(dir, 'nope') }),
      `--kubeconfig ${join(dir, 'nope')}: no such file`,
    );
    assert.equal(
      failure({ kubeconfig: file, context: 'ctx-c' }),
      `--context ctx-c: no such context in --kubeconfig ${file} (its contexts: ctx-a, ctx-b, broken)`,
    );
    assert.match(
      failure({ kubeconfig: file, context: 'broken' }),
      /^context "broken" of --kubeconfig \S+ names no cluster/,
    );
    writeFileSync(join(dir, 'garbage'), '{ not yaml: [');
    assert.match(failure({ kubeconfig: join(dir, 'garbage') }), /: not a usable kubeconfig: /);
  });

  test.after(() => rmSync(dir, { recursive: true, force: true }));
});

describe('which share a name means', () => {
  const sm = (namespace: string, name: string, extra: Partial<ShareManager> = {}): ShareManager => ({
    metadata: { namespace, name, ...(extra.metadata ?? {}) },
    spec: { volume: { pvc: `data-${name}` }, ...(extra.spec ?? {}) },
  });
  const provisioned = sm('leasehold-system', 'pvc-1234', {
    metadata: { annotations: { 'leasehold.dev/provisioned-claim': 'apps/team-data' } },
  });
  const consumer = sm('web', 'site', {
    spec: { volume: { pvc: 'site-data' }, consumer: { claimName: 'site-rwx' } },
  });
  const all = [sm('apps', 'vol-a'), sm('other', 'vol-a'), sm('apps', 'vol-b'), provisioned, consumer];

  test('by the ShareManager name first, then by the claim it serves', () => {
    assert.equal(claimOf(provisioned), 'apps/team-data');
    assert.equal(claimOf(consumer), 'web/site-rwx');
    assert.equal(claimOf(all[0] as ShareManager), undefined);
    const found = (name: string, ns?: string) => {
      const r = findShare(all, name, ns);
      return r.kind === 'found' ? `${r.sm.metadata.namespace}/${r.sm.metadata.name}` : r.message;
    };
    assert.equal(found('vol-b'), 'apps/vol-b');
    assert.equal(found('vol-a', 'other'), 'other/vol-a');
    assert.equal(found('team-data'), 'leasehold-system/pvc-1234');
    assert.equal(
      found('team-data', 'apps'),
      'leasehold-system/pvc-1234',
      'the claim is in -n, the share elsewhere',
    );
    assert.equal(found('site-rwx', 'web'), 'web/site');
  });

  test('none, or several: refused with the candidates named', () => {
    assert.deepEqual(findShare(all, 'vol-a'), {
      kind: 'ambiguous',
      message: 'share "vol-a" fits 2 shares (apps/vol-a, other/vol-a): give -n NAMESPACE',
    });
    assert.deepEqual(findShare(all, 'team-data', 'web'), {
      kind: 'missing',
      message:
        'share "team-data": no ShareManager of that name, and none serving a claim of that name, in namespace web',
    });
  });
});

describe('how a failed read is said', () => {
  const target = { server: 'https://api.example:6443', context: 'prod' };
  const apiError = (status: number | undefined, message: string) =>
    new KubeApiError('list pods in every namespace (label leasehold.dev/share-manager)', status, {
      cause: Object.assign(
        new Error(message),
        status ? { code: status, body: JSON.stringify({ message }) } : {},
      ),
    });

  test('no answer: the server and context named, exit 1', () => {
    const e = explainFailure(apiError(undefined, 'connect ECONNREFUSED'), target);
    assert.equal(e.exitCode, 1);
    assert.equal(
      e.message,
      'cannot reach the API server https://api.example:6443 (context prod): list pods in every namespace (label leasehold.dev/share-manager) failed: connect ECONNREFUSED',
    );
  });

  test('403: the read refused and the RBAC it needs', () => {
    const e = explainFailure(
      apiError(403, 'pods is forbidden: User "bob" cannot list resource "pods"'),
      target,
    );
    assert.equal(e.exitCode, 1);
    assert.match(
      e.message,
      /^list pods in every namespace \(label leasehold.dev\/share-manager\): forbidden \(HTTP 403: pods is forbidden: User "bob" cannot list resource "pods"\); kubectl leasehold needs get and list on sharemanagers/,
    );
  });

  test('401, other statuses, other errors; a PluginError passes as it is', () => {
    assert.match(
      explainFailure(apiError(401, 'Unauthorized'), target).message,
      /refused the kubeconfig's credentials \(HTTP 401\)/,
    );
    assert.match(
      explainFailure(apiError(500, 'etcd down'), target).message,
      /HTTP 500 etcd down \(the API server https:\/\/api.example:6443 \(context prod\)\)$/,
    );
    const own = new PluginError('E_NO_SHARE', 'share "x": ...', 1);
    assert.equal(explainFailure(own, target), own);
    assert.equal(explainFailure(new Error('boom'), undefined).message, 'boom');
  });
});
