/**
 * dev/go-build.sh's go_build_cached with the real Go toolchain: two callers that need the
 * same tool at once (two test files on a cold machine, which raced and failed before the
 * lock) build it once; the second waits and takes the first one's complete build.
 */
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { promisify } from 'node:util';

const run = promisify(execFile);
const goBuild = fileURLToPath(new URL('../../dev/go-build.sh', import.meta.url));

const dirs: string[] = [];
after(async () => {
  for (const d of dirs) await rm(d, { recursive: true, force: true });
});

test('two concurrent go_build_cached calls for one BIN_DIR build it once, and both get the finished tool', async () => {
  const dir = await mkdtemp(join(tmpdir(), 'leasehold-go-build-'));
  dirs.push(dir);
  const module = join(dir, 'mod');
  await run('mkdir', ['-p', module]);
  await writeFile(join(module, 'go.mod'), 'module example.test/hello\n\ngo 1.26\n');
  await writeFile(
    join(module, 'main.go'),
    'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello from the cache") }\n',
  );
  const bin = join(dir, 'cache', 'hello', 'v1');
  const build = () =>
    run('bash', ['-c', `. "$0"; go_build_cached "$1" "$2" "-s -w" hello=.`, goBuild, bin, module], {
      encoding: 'utf8',
    });
  const results = await Promise.all([build(), build()]);
  for (const r of results) assert.equal(r.stdout.trim(), bin, 'each caller prints the bin dir');
  const builds = results.map((r) => r.stderr.split('\n').filter((l) => l.includes('building into')).length);
  assert.deepEqual(
    builds.sort(),
    [0, 1],
    `one caller built, the other waited for it: ${JSON.stringify(results.map((r) => r.stderr))}`,
  );
  const { stdout } = await run(join(bin, 'hello'), [], { encoding: 'utf8' });
  assert.equal(stdout.trim(), 'hello from the cache');
  // A later call finds it complete and builds nothing.
  const again = await build();
  assert.equal(again.stdout.trim(), bin);
  assert.doesNotMatch(again.stderr, /building into/);
});
