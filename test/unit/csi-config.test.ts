/**
 * The testbed's CSI wiring (dev/csi/config.ts): the node sockets sit where the kubelet
 * looks (plugins/<driver>/ and plugins_registry/), a socket path longer than a unix
 * socket's address is refused before anything starts, and the attacher runs with one
 * replica's flags against the driver's controller socket.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  attacherArgs,
  DRIVER_NAME,
  MAX_SOCKET_PATH_BYTES,
  nodePluginPaths,
  registrarArgs,
  socketPathProblem,
} from '../../dev/csi/config.ts';

test('the node plugin sockets are where the kubelet finds them', () => {
  const paths = nodePluginPaths('/tmp/leasehold-node-abc123/kubelet');
  assert.equal(paths.socket, `/tmp/leasehold-node-abc123/kubelet/plugins/${DRIVER_NAME}/csi.sock`);
  assert.equal(paths.registrationDir, '/tmp/leasehold-node-abc123/kubelet/plugins_registry');
  assert.deepEqual(registrarArgs(paths), [
    `-csi-address=${paths.socket}`,
    '-registration-dir=/tmp/leasehold-node-abc123/kubelet/plugins_registry',
  ]);
  assert.equal(socketPathProblem(paths.socket), undefined, 'a node under /tmp fits');
});

test('a socket path past a unix socket address is refused, naming it', () => {
  const fits = `/${'a'.repeat(MAX_SOCKET_PATH_BYTES - 1)}`;
  assert.equal(socketPathProblem(fits), undefined);
  const long = `${fits}b`;
  assert.match(socketPathProblem(long) ?? '', new RegExp(`${long} is 108 bytes`));
  // Bytes, not characters.
  assert.ok(socketPathProblem(`/${'é'.repeat(60)}`));
});

test('the attacher runs alone against the controller socket with its own kubeconfig', () => {
  const args = attacherArgs('/c/controller.sock', '/c/attacher.kubeconfig');
  assert.ok(args.includes('--csi-address=/c/controller.sock'));
  assert.ok(args.includes('--kubeconfig=/c/attacher.kubeconfig'));
  assert.ok(args.includes('--leader-election=false'));
});
