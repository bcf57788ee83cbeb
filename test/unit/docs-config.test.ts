/**
 * The configuration a user reads is the configuration the code reads. The settings
 * tables live in one place, docs/operations.md; this checks that it documents every env
 * var the agent and the manager parse and every value the chart accepts (the leaves of
 * values.schema.json, which rejects any other), and that every env var the chart sets on
 * the manager is one the manager parses.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/tools.ts';

const SETTINGS_DOC = 'docs/operations.md';

const read = (path: string) => readFileSync(join(repoRoot, path), 'utf8');
/** Env var names used as string literals in code (quoted), not in comments. */
const quotedVars = (text: string) =>
  new Set([...text.matchAll(/['"`](LEASEHOLD_[A-Z0-9_]+)['"`]/g)].map((m) => m[1] ?? ''));
const mentionedVars = (text: string) => new Set([...text.matchAll(/LEASEHOLD_[A-Z0-9_]+/g)].map((m) => m[0]));

interface SchemaNode {
  type?: string;
  properties?: Record<string, SchemaNode>;
}

/** The dotted paths of a JSON schema's leaf values (objects with `properties` are walked into). */
export function valuePaths(schema: SchemaNode, prefix = ''): string[] {
  return Object.entries(schema.properties ?? {}).flatMap(([key, node]) => {
    const path = prefix ? `${prefix}.${key}` : key;
    return node.properties ? valuePaths(node, path) : [path];
  });
}

/** Chart value paths written as code (`manager.storm.window`) in a Markdown text. */
const mentionedValues = (text: string) =>
  new Set([...text.matchAll(/`([A-Za-z][\w.]*)`/g)].map((m) => m[1] ?? ''));

describe('configuration docs', () => {
  const doc = read(SETTINGS_DOC);

  for (const component of ['agent', 'manager']) {
    it(`${SETTINGS_DOC} documents every env var ${component}/config.ts reads`, () => {
      const vars = quotedVars(read(`${component}/config.ts`));
      assert.ok(vars.size >= 10, `found ${vars.size} variables in ${component}/config.ts`);
      const documented = mentionedVars(doc);
      const undocumented = [...vars].filter((v) => !documented.has(v));
      assert.deepEqual(undocumented, []);
    });
  }

  it(`${SETTINGS_DOC} documents every chart value`, () => {
    const paths = valuePaths(JSON.parse(read('charts/leasehold/values.schema.json')) as SchemaNode);
    assert.ok(paths.length >= 30, `found ${paths.length} values in values.schema.json`);
    const documented = mentionedValues(doc);
    const undocumented = paths.filter((p) => !documented.has(p));
    assert.deepEqual(undocumented, []);
  });

  it('the chart sets only env vars the manager reads', () => {
    const chartVars = mentionedVars(read('charts/leasehold/templates/manager-daemonset.yaml'));
    const managerVars = quotedVars(read('manager/config.ts'));
    assert.ok(chartVars.size >= 20, `found ${chartVars.size} variables in the chart`);
    const unknown = [...chartVars].filter((v) => !managerVars.has(v));
    assert.deepEqual(unknown, []);
  });
});

describe('valuePaths', () => {
  it('walks nested objects and stops at leaves', () => {
    const schema = {
      properties: {
        image: { type: 'object', properties: { repository: { type: 'string' }, tag: { type: 'string' } } },
        manager: {
          type: 'object',
          properties: { storm: { properties: { window: {} } }, resources: { type: 'object' } },
        },
        imagePullSecrets: { type: 'array' },
      },
    };
    assert.deepEqual(valuePaths(schema), [
      'image.repository',
      'image.tag',
      'manager.storm.window',
      'manager.resources',
      'imagePullSecrets',
    ]);
  });
});
