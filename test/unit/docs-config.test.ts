/**
 * The configuration a user reads is the configuration the code reads: every env var
 * the agent and the manager parse is documented in README, and every env var the Helm
 * chart sets on the manager is one the manager parses.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/tools.ts';

const read = (path: string) => readFileSync(join(repoRoot, path), 'utf8');
/** Env var names used as string literals in code (quoted), not in comments. */
const quotedVars = (text: string) =>
  new Set([...text.matchAll(/['"`](LEASEHOLD_[A-Z0-9_]+)['"`]/g)].map((m) => m[1] ?? ''));
const mentionedVars = (text: string) => new Set([...text.matchAll(/LEASEHOLD_[A-Z0-9_]+/g)].map((m) => m[0]));

describe('configuration docs', () => {
  const readme = mentionedVars(read('README.md'));

  for (const component of ['agent', 'manager']) {
    it(`README documents every env var ${component}/config.ts reads`, () => {
      const vars = quotedVars(read(`${component}/config.ts`));
      assert.ok(vars.size >= 10, `found ${vars.size} variables in ${component}/config.ts`);
      const undocumented = [...vars].filter((v) => !readme.has(v));
      assert.deepEqual(undocumented, []);
    });
  }

  it('the chart sets only env vars the manager reads', () => {
    const chartVars = mentionedVars(read('charts/leasehold/templates/manager-daemonset.yaml'));
    const managerVars = quotedVars(read('manager/config.ts'));
    assert.ok(chartVars.size >= 20, `found ${chartVars.size} variables in the chart`);
    const unknown = [...chartVars].filter((v) => !managerVars.has(v));
    assert.deepEqual(unknown, []);
  });
});
