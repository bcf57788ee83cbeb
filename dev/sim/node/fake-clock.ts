/**
 * A skewed machine clock for a simulated node's containers, with libfaketime
 * (Debian package libfaketime): `node.setContainerEnv(fakeClockEnv('+10m'))` makes
 * every process the node starts afterwards see the wall clock 10 minutes ahead.
 * The monotonic clock is left alone (FAKETIME_DONT_FAKE_MONOTONIC=1, and the older
 * name DONT_FAKE_MONOTONIC): only the offset of the
 * wall clock differs, as between two machines, not the rate.
 */
import { existsSync } from 'node:fs';
import { LeaseholdError } from '../../../lib/errors.ts';

const LIBFAKETIME = [
  '/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1',
  '/usr/lib/faketime/libfaketime.so.1',
];

/** `offset` in libfaketime's relative syntax: "+10m", "-600s", "+1h". */
export function fakeClockEnv(offset: string): Record<string, string> {
  if (!/^[+-]\d+(\.\d+)?[smhd]?$/.test(offset)) {
    throw new LeaseholdError(
      'E_SIM_CLOCK',
      `clock offset ${JSON.stringify(offset)}: expected a signed amount such as +10m, -600s or +1h`,
    );
  }
  const library = LIBFAKETIME.find((path) => existsSync(path));
  if (!library) {
    throw new LeaseholdError(
      'E_SIM_CLOCK',
      `libfaketime not found at ${LIBFAKETIME.join(' or ')}: install the libfaketime package`,
    );
  }
  return {
    LD_PRELOAD: library,
    FAKETIME: offset,
    FAKETIME_DONT_FAKE_MONOTONIC: '1',
    DONT_FAKE_MONOTONIC: '1',
  };
}
