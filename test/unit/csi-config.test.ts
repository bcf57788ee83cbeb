/**
 * The testbed's CSI wiring (dev/csi/config.ts): the node sockets sit where the kubelet
 * looks (plugins/<driver>/ and plugins_registry/), a socket path longer than a unix
 * socket's address is refused before anything starts, and the attacher runs with one
 * replica's flags against the driver's controller socket; the attach-less second name
 * has its own sockets, its node part is told it has no attach, and its CSIDriver says
 * attachRequired false (the fencing one's true).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import {
  attacherArgs,
  csiDriverObject,
  DRIVER_NAME,
  driverNodeArgs,
  MAX_SOCKET_PATH_BYTES,
  NOATTACH_DRIVER_NAME,
  nodePluginPaths,
  registrarArgs,
  registrationSocket,
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

test('the attach-less second name: its own sockets, no attach on the node, CSIDriver attachRequired false', () => {
  const root = '/tmp/leasehold-node-abc123/kubelet';
  const fenced = nodePluginPaths(root);
  const open = nodePluginPaths(root, NOATTACH_DRIVER_NAME);
  assert.equal(open.socket, `${root}/plugins/${NOATTACH_DRIVER_NAME}/csi.sock`);
  assert.notEqual(open.socket, fenced.socket);
  assert.equal(open.registrationDir, fenced.registrationDir, 'one plugin watcher directory');
  assert.equal(
    registrationSocket(open, NOATTACH_DRIVER_NAME),
    `${root}/plugins_registry/${NOATTACH_DRIVER_NAME}-reg.sock`,
  );
  assert.equal(registrationSocket(fenced), `${root}/plugins_registry/${DRIVER_NAME}-reg.sock`);
  assert.equal(socketPathProblem(open.socket), undefined, 'the longer name fits under /tmp');

  const openArgs = driverNodeArgs(open, 'real-1', '/b', NOATTACH_DRIVER_NAME);
  assert.ok(openArgs.includes(`-drivername=${NOATTACH_DRIVER_NAME}`));
  assert.ok(openArgs.includes('-attach-required=false'));
  const fencedArgs = driverNodeArgs(fenced, 'real-1', '/b');
  assert.ok(fencedArgs.includes(`-drivername=${DRIVER_NAME}`));
  assert.equal(
    fencedArgs.some((a) => a.startsWith('-attach-required')),
    false,
    'the fencing driver keeps its attach check (the flag defaults to true)',
  );
  // Both node parts have what the fencing controller finds a node's mount namespace by
  // (plugin/driver/fencing.go nodeMountNs): both are in it, so either is the right one.
  for (const a of ['-mode=node', '-node-id=real-1', '-backing-dir=/b']) assert.ok(openArgs.includes(a));

  assert.deepEqual(csiDriverObject().metadata, { name: DRIVER_NAME });
  assert.equal(csiDriverObject().spec.attachRequired, true);
  assert.deepEqual(csiDriverObject(NOATTACH_DRIVER_NAME).metadata, { name: NOATTACH_DRIVER_NAME });
  assert.equal(csiDriverObject(NOATTACH_DRIVER_NAME).spec.attachRequired, false);
});
