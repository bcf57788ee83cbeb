/**
 * The local image build (dev/image) and the published Dockerfiles stay in step: each
 * recipe matches its Dockerfile's final-stage config (user, entrypoint, cmd, workdir,
 * env, exposed ports, stop signal), its build-stage sources and native builds, its COPYs
 * and its apt-get packages; and the check fails, naming the instruction, when a Dockerfile changes any
 * of them (or uses an instruction the reader does not know).
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { finalStageConfig, parseDockerfile, recipeProblems } from '../../dev/image/dockerfile.ts';
import { IMAGE_RECIPES, leaseholdImage, nfsGaneshaImage } from '../../dev/image/recipes.ts';

const NODE = '24.21.0';
const text = (file: string) => readFileSync(new URL(`../../${file}`, import.meta.url), 'utf8');

describe('dev/image recipes and the published Dockerfiles', () => {
  for (const recipe of IMAGE_RECIPES) {
    it(`${recipe.dockerfile} is in step with the ${recipe.name} recipe`, () => {
      assert.deepEqual(recipeProblems(recipe, text(recipe.dockerfile), NODE), []);
    });
  }

  const mutations: [string, typeof leaseholdImage, (t: string) => string, RegExp][] = [
    ['USER', leaseholdImage, (t) => t.replace('USER 65532:65532', 'USER 0:0'), /image config User.*"0:0"/],
    [
      'ENTRYPOINT',
      leaseholdImage,
      (t) => t.replace('dist/bin/leasehold.js', 'dist/bin/other.js'),
      /image config Entrypoint/,
    ],
    ['CMD', leaseholdImage, (t) => `${t}CMD ["agent"]\n`, /image config Cmd.*\["agent"\].*null/],
    ['WORKDIR', leaseholdImage, (t) => t.replace('WORKDIR /app\n', 'WORKDIR /opt\n'), /WorkingDir.*"\/opt"/],
    ['ENV', nfsGaneshaImage, (t) => `${t}ENV NODE_ENV=production\n`, /image config Env.*NODE_ENV=production/],
    ['EXPOSE', nfsGaneshaImage, (t) => t.replace('EXPOSE 2049/tcp 20048/tcp', 'EXPOSE 2049'), /ExposedPorts/],
    [
      'STOPSIGNAL',
      nfsGaneshaImage,
      (t) => t.replace('STOPSIGNAL SIGTERM', 'STOPSIGNAL SIGINT'),
      /StopSignal/,
    ],
    ['FROM', leaseholdImage, (t) => t.replace(':nonroot', ':latest'), /final stage FROM/],
    ['build COPY', leaseholdImage, (t) => t.replace('COPY bin bin\n', ''), /build stage sources/],
    [
      'final COPY',
      nfsGaneshaImage,
      (t) => t.replace('COPY --from=build /src/dist dist', 'COPY --from=build /src/dist lib'),
      /final stage COPY --from=build/,
    ],
    [
      'apt-get',
      nfsGaneshaImage,
      (t) => t.replace(' iproute2 \\', ' iproute2 nfs-common \\'),
      /apt-get install.*nfs-common/,
    ],
    [
      'native build',
      nfsGaneshaImage,
      (t) => t.replace(' && bash server/nfs-ganesha/native/build.sh dist/server/nfs-ganesha', ''),
      /build stage: no RUN runs `bash server\/nfs-ganesha\/native\/build.sh/,
    ],
    ['unknown instruction', leaseholdImage, (t) => `${t}VOLUME /data\n`, /VOLUME is not read/],
  ];
  for (const [what, recipe, mutate, expected] of mutations) {
    it(`fails when the Dockerfile's ${what} changes`, () => {
      const original = text(recipe.dockerfile);
      const changed = mutate(original);
      assert.notEqual(changed, original, 'the mutation must change the Dockerfile');
      const problems = recipeProblems(recipe, changed, NODE);
      assert.ok(
        problems.some((p) => expected.test(p)),
        `expected a problem matching ${expected}, got:\n${problems.join('\n')}`,
      );
    });
  }

  it('follows Docker: ENTRYPOINT resets the base CMD, relative WORKDIR, EXPOSE defaults to tcp', () => {
    const [stage] = parseDockerfile(
      'FROM x\nWORKDIR /a\nWORKDIR b\nEXPOSE 80 53/udp\nENTRYPOINT ["e"]\nUSER 1:1\nENV A=1 \\\n  2\n',
    );
    assert.ok(stage);
    const base = nfsGaneshaImage.baseConfig(NODE);
    assert.deepEqual(finalStageConfig(stage, base, 'x'), {
      ...base,
      WorkingDir: '/a/b',
      ExposedPorts: { '80/tcp': {}, '53/udp': {} },
      Entrypoint: ['e'],
      Cmd: null,
      User: '1:1',
      Env: [...base.Env, 'A=1 2'],
    });
  });
});
