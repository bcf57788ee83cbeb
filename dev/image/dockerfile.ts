/**
 * Reads a published Dockerfile and holds an image recipe (recipes.ts) against it: the
 * check that the local build and the Dockerfile users build stay in step.
 *
 * Pure: text in, problems out. `recipeProblems` returns one line per difference, naming
 * the Dockerfile, the instruction and both values; an empty list means in step.
 * What it reads: stages (FROM ... AS name), line continuations and comments, and the
 * instructions FROM, WORKDIR, COPY, RUN (only `apt-get install` package names),
 * USER, ENV, EXPOSE, STOPSIGNAL, ENTRYPOINT and CMD (exec form; the shell form is
 * refused, as the recipes never use it). The image config follows Docker's rules: a
 * relative WORKDIR is resolved against the previous one, an ENTRYPOINT resets the CMD
 * inherited from the base image, EXPOSE adds `<port>/tcp` unless a protocol is given.
 * Not read (a problem if present): ARG, ADD, ONBUILD, VOLUME, HEALTHCHECK, SHELL, LABEL.
 */
import { posix } from 'node:path';
import type { ImageConfig, ImageRecipe } from './recipes.ts';

export interface Instruction {
  keyword: string;
  args: string;
  line: number;
}

export interface Stage {
  from: string;
  name: string | undefined;
  instructions: Instruction[];
}

/** Splits a Dockerfile into stages of instructions (continuations joined, comments dropped). */
export function parseDockerfile(text: string): Stage[] {
  const stages: Stage[] = [];
  let pending = '';
  let startLine = 0;
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const raw = lines[i] ?? '';
    const trimmed = raw.trim();
    if (pending === '' && (trimmed === '' || trimmed.startsWith('#'))) continue;
    if (pending !== '' && trimmed.startsWith('#')) continue;
    if (pending === '') startLine = i + 1;
    if (trimmed.endsWith('\\')) {
      pending += `${trimmed.slice(0, -1).trimEnd()} `;
      continue;
    }
    const full = (pending + trimmed).trim();
    pending = '';
    const m = /^(\S+)\s*(.*)$/.exec(full);
    if (!m) continue;
    const keyword = (m[1] ?? '').toUpperCase();
    const args = m[2] ?? '';
    if (keyword === 'FROM') {
      const f = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(args);
      stages.push({ from: f?.[1] ?? args, name: f?.[2], instructions: [] });
      continue;
    }
    const stage = stages.at(-1);
    if (!stage) throw new Error(`line ${startLine}: ${keyword} before any FROM`);
    stage.instructions.push({ keyword, args, line: startLine });
  }
  return stages;
}

function execForm(ins: Instruction, file: string): string[] {
  try {
    const v: unknown = JSON.parse(ins.args);
    if (Array.isArray(v) && v.every((s) => typeof s === 'string')) return v;
  } catch {
    // fall through
  }
  throw new Error(`${file}:${ins.line}: ${ins.keyword} must be in exec form (a JSON array of strings)`);
}

/** The image config `docker build` gives the final stage, starting from its base's config. */
export function finalStageConfig(stage: Stage, base: ImageConfig, file: string): ImageConfig {
  const c: ImageConfig = structuredClone(base);
  let cmdSetHere = false;
  for (const ins of stage.instructions) {
    switch (ins.keyword) {
      case 'WORKDIR':
        c.WorkingDir = posix.resolve(c.WorkingDir || '/', ins.args);
        break;
      case 'USER':
        c.User = ins.args;
        break;
      case 'ENV': {
        const m = /^([A-Za-z_][A-Za-z0-9_]*)[= ](.*)$/.exec(ins.args);
        if (!m) throw new Error(`${file}:${ins.line}: ENV must be KEY=value`);
        const key = m[1] as string;
        c.Env = [...c.Env.filter((e) => !e.startsWith(`${key}=`)), `${key}=${m[2]}`];
        break;
      }
      case 'EXPOSE':
        for (const p of ins.args.split(/\s+/).filter(Boolean))
          c.ExposedPorts[p.includes('/') ? p : `${p}/tcp`] = {};
        break;
      case 'STOPSIGNAL':
        c.StopSignal = ins.args;
        break;
      case 'ENTRYPOINT':
        c.Entrypoint = execForm(ins, file);
        if (!cmdSetHere) c.Cmd = null;
        break;
      case 'CMD':
        c.Cmd = execForm(ins, file);
        cmdSetHere = true;
        break;
      case 'COPY':
      case 'RUN':
        break;
      default:
        throw new Error(`${file}:${ins.line}: ${ins.keyword} is not read by dev/image/dockerfile.ts`);
    }
  }
  return c;
}

/** Package names of every `apt-get install` in the stage's RUNs. */
export function aptInstalls(stage: Stage): string[] {
  const out: string[] = [];
  for (const ins of stage.instructions) {
    if (ins.keyword !== 'RUN') continue;
    for (const cmd of ins.args.split(/&&|;/)) {
      const words = cmd.trim().split(/\s+/);
      const at = words.indexOf('install');
      if (at < 0 || !words.includes('apt-get')) continue;
      out.push(...words.slice(at + 1).filter((w) => !w.startsWith('-')));
    }
  }
  return out;
}

/** `COPY [--from=x] src... dest` of a stage, as { from, srcs, dest }. */
export function copies(stage: Stage): { from: string | undefined; srcs: string[]; dest: string }[] {
  return stage.instructions
    .filter((i) => i.keyword === 'COPY')
    .map((i) => {
      const words = i.args.split(/\s+/).filter(Boolean);
      const from = words.find((w) => w.startsWith('--from='))?.slice('--from='.length);
      const paths = words.filter((w) => !w.startsWith('--'));
      return { from, srcs: paths.slice(0, -1), dest: paths.at(-1) ?? '' };
    });
}

/** Files the build needs besides the sources tsc compiles. */
const BUILD_SCAFFOLD = new Set(['package.json', 'package-lock.json', 'tsconfig.json', 'tsconfig.build.json']);

/** Every difference between the recipe and its Dockerfile's text; [] when in step. */
export function recipeProblems(recipe: ImageRecipe, dockerfileText: string, nodeVersion: string): string[] {
  const file = recipe.dockerfile;
  const problems: string[] = [];
  const differ = (what: string, dockerfile: unknown, recipeValue: unknown) => {
    const a = JSON.stringify(dockerfile);
    const b = JSON.stringify(recipeValue);
    if (a !== b) problems.push(`${file}: ${what}: the Dockerfile has ${a}, dev/image/recipes.ts has ${b}`);
  };
  let stages: Stage[];
  try {
    stages = parseDockerfile(dockerfileText);
  } catch (err) {
    return [`${file}: ${(err as Error).message}`];
  }
  const final = stages.at(-1);
  const build = stages.find((s) => s.name === 'build');
  if (!final || !build || final === build)
    return [`${file}: expected a stage named "build" and a final stage after it`];
  differ('final stage FROM', final.from, recipe.dockerfileFrom);
  try {
    const config = finalStageConfig(final, recipe.baseConfig(nodeVersion), file);
    for (const key of Object.keys(config) as (keyof ImageConfig)[])
      differ(`image config ${key}`, config[key], recipe.config(nodeVersion)[key]);
  } catch (err) {
    problems.push((err as Error).message);
  }
  const sources = copies(build)
    .flatMap((c) => c.srcs)
    .filter((s) => !BUILD_SCAFFOLD.has(s));
  differ('build stage sources (COPY)', sources, recipe.buildSources);
  const buildRuns = build.instructions.filter((i) => i.keyword === 'RUN').map((i) => i.args);
  for (const command of recipe.nativeBuilds)
    if (!buildRuns.some((r) => r.split(/&&|;/).some((c) => c.trim() === command)))
      problems.push(`${file}: build stage: no RUN runs \`${command}\` (dev/image/recipes.ts nativeBuilds)`);
  const appCopies = copies(final).map((c) => ({
    from: c.from,
    src: posix.resolve('/src', ...c.srcs),
    dest: c.dest,
  }));
  differ(
    'final stage COPY --from=build',
    appCopies,
    recipe.appCopies.map((c) => ({ from: 'build', src: c.src, dest: c.dest })),
  );
  differ('final stage apt-get install', aptInstalls(final), recipe.aptPackages);
  return problems;
}
