/** Finding the cgroup v1 freezer hierarchy in a mountinfo text (dev/node/freezer.ts). */
import assert from 'node:assert/strict';
import { it } from 'node:test';
import { freezerMountIn } from '../../dev/node/freezer.ts';

const HYBRID = [
  '35 31 0:30 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu',
  '37 31 0:34 / /sys/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer',
  '41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw',
].join('\n');

it('finds the v1 cgroup mount whose options name freezer', () => {
  assert.equal(freezerMountIn(HYBRID), '/sys/fs/cgroup/freezer');
});

it('finds none on a pure cgroup v2 machine or where freezer is only a path', () => {
  assert.equal(freezerMountIn('30 1 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw,nsdelegate'), undefined);
  assert.equal(freezerMountIn('35 31 0:30 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,cpu'), undefined);
});
