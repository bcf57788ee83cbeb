/**
 * The repository stands on its own: every relative link in its Markdown files (README,
 * CONTRIBUTING, docs/, the folders' READMEs) points at a file of the repository that
 * exists, and a `#anchor` into a Markdown file names one of its headings (GitHub's
 * slugs). External links (http, https, mailto) are not followed.
 *
 * The checker is pure (file texts and an `exists` function in, problems out); the last
 * tests run it on the repository. Not checked: links inside code (fenced or inline),
 * reference-style links, anchors into files that are not Markdown.
 */
import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, normalize, relative, sep } from 'node:path';
import { describe, it } from 'node:test';
import { repoRoot } from '../support/tools.ts';

interface Link {
  target: string;
  line: number;
}

/** Text with fenced code blocks and inline code blanked out (line numbers kept). */
function withoutCode(text: string): string {
  let fenced = false;
  return text
    .split('\n')
    .map((line) => {
      if (/^\s*(```|~~~)/.test(line)) {
        fenced = !fenced;
        return '';
      }
      return fenced ? '' : line.replace(/`[^`]*`/g, '``');
    })
    .join('\n');
}

/** The inline links and images of a Markdown text, outside code. */
export function linksOf(text: string): Link[] {
  const links: Link[] = [];
  withoutCode(text)
    .split('\n')
    .forEach((line, i) => {
      for (const m of line.matchAll(/!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
        links.push({ target: m[1] ?? '', line: i + 1 });
      }
    });
  return links;
}

/** GitHub's anchor of a heading text: formatting dropped, lower case, punctuation gone, spaces to '-'. */
export function slugOf(heading: string): string {
  return heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/[`*]/g, '')
    .trim()
    .toLowerCase()
    .replace(/[^\p{L}\p{N}\s_-]/gu, '')
    .replace(/\s/g, '-');
}

/** Every anchor a Markdown text offers: its headings' slugs (repeats get -1, -2, ...). */
export function anchorsOf(text: string): Set<string> {
  const anchors = new Set<string>();
  const seen = new Map<string, number>();
  let fenced = false;
  for (const line of text.split('\n')) {
    if (/^\s*(```|~~~)/.test(line)) fenced = !fenced;
    const m = fenced ? null : /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (!m) continue;
    const slug = slugOf(m[1] ?? '');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    anchors.add(n === 0 ? slug : `${slug}-${n}`);
  }
  return anchors;
}

/**
 * The broken links of `files` (repository-relative path -> text), each as
 * "file:line: target: why". `exists` says whether a repository-relative path exists.
 */
export function brokenLinks(files: ReadonlyMap<string, string>, exists: (path: string) => boolean): string[] {
  const problems: string[] = [];
  for (const [file, text] of files) {
    for (const { target, line } of linksOf(text)) {
      if (/^[a-z][a-z0-9+.-]*:/i.test(target)) continue; // http:, https:, mailto:
      const hash = target.indexOf('#');
      const pathPart = decodeURIComponent(hash === -1 ? target : target.slice(0, hash));
      const anchor = hash === -1 ? '' : decodeURIComponent(target.slice(hash + 1));
      const where = `${file}:${line}: ${target}`;
      if (pathPart.startsWith('/')) {
        problems.push(`${where}: an absolute path (links must be relative to the file)`);
        continue;
      }
      const resolved =
        pathPart === ''
          ? file
          : normalize(join(dirname(file), pathPart))
              .split(sep)
              .join('/');
      if (resolved === '..' || resolved.startsWith('../')) {
        problems.push(`${where}: outside the repository`);
        continue;
      }
      const path = resolved.replace(/\/$/, '') || '.';
      if (!files.has(path) && !exists(path)) {
        problems.push(`${where}: ${path} does not exist`);
        continue;
      }
      if (anchor !== '' && path.endsWith('.md')) {
        const targetText = files.get(path);
        if (targetText !== undefined && !anchorsOf(targetText).has(anchor)) {
          problems.push(`${where}: ${path} has no heading with the anchor #${anchor}`);
        }
      }
    }
  }
  return problems;
}

const SKIP = new Set(['node_modules', 'dist', '.git']);

/** Every Markdown file of the repository, by repository-relative path. */
function repoMarkdown(): Map<string, string> {
  const files = new Map<string, string>();
  const walk = (dir: string) => {
    for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
      if (SKIP.has(entry.name)) continue;
      const path = dir === '' ? entry.name : `${dir}/${entry.name}`;
      if (entry.isDirectory()) walk(path);
      else if (entry.name.endsWith('.md')) files.set(path, readFileSync(join(repoRoot, path), 'utf8'));
    }
  };
  walk('');
  return files;
}

describe('the link checker', () => {
  const files = new Map([
    ['README.md', '# Title\n\nSee [design](docs/design.md#why-it-is-safe) and [ops](docs/ops.md).\n'],
    [
      'docs/design.md',
      '# Design\n\n## Why it is safe\n\n## Why it is safe\n\nBack to [README](../README.md#title).\n',
    ],
  ]);
  const exists = (path: string) => path === 'docs' || path === 'charts/leasehold';

  it('accepts links to existing files and headings', () => {
    const ok = new Map(files);
    ok.set(
      'README.md',
      '# Title\n\n[d](docs/design.md#why-it-is-safe-1), [c](charts/leasehold/), [here](#title)\n',
    );
    assert.deepEqual(brokenLinks(ok, exists), []);
  });

  it('reports a link to a missing file, naming file, line and target', () => {
    assert.deepEqual(brokenLinks(files, exists), ['README.md:3: docs/ops.md: docs/ops.md does not exist']);
  });

  it('reports a missing anchor', () => {
    const bad = new Map(files);
    bad.set('README.md', '# Title\n[d](docs/design.md#how-it-works)\n[self](#nothing)\n');
    assert.deepEqual(brokenLinks(bad, exists), [
      'README.md:2: docs/design.md#how-it-works: docs/design.md has no heading with the anchor #how-it-works',
      'README.md:3: #nothing: README.md has no heading with the anchor #nothing',
    ]);
  });

  it('reports links that leave the repository or are absolute', () => {
    const bad = new Map([
      ['README.md', '[d](../shared/DESIGN.md)\n[e](docs/../../x.md)\n[f](/etc/passwd)\n'],
    ]);
    assert.deepEqual(brokenLinks(bad, exists), [
      'README.md:1: ../shared/DESIGN.md: outside the repository',
      'README.md:2: docs/../../x.md: outside the repository',
      'README.md:3: /etc/passwd: an absolute path (links must be relative to the file)',
    ]);
  });

  it('ignores external links and links inside code', () => {
    const text =
      '[w](https://example.com/x) [m](mailto:a@b.c)\n`[c](nowhere.md)`\n```\n[c](nowhere.md)\n```\n';
    assert.deepEqual(brokenLinks(new Map([['README.md', text]]), exists), []);
  });

  it("makes GitHub's slugs", () => {
    assert.equal(slugOf('Events, conditions and logs'), 'events-conditions-and-logs');
    assert.equal(slugOf('The `pod` fence (default)'), 'the-pod-fence-default');
    assert.equal(slugOf('What to do — now'), 'what-to-do--now');
    assert.equal(slugOf('[Link](x.md) and **bold**'), 'link-and-bold');
  });
});

describe('the repository', () => {
  const files = repoMarkdown();

  it('has README, CONTRIBUTING and docs/ to check', () => {
    for (const path of [
      'README.md',
      'CONTRIBUTING.md',
      'docs/design.md',
      'docs/operations.md',
      'docs/testing.md',
    ])
      assert.ok(files.has(path), `${path} is missing`);
  });

  it('every relative link in its Markdown files resolves', () => {
    assert.deepEqual(
      brokenLinks(files, (path) => existsSync(join(repoRoot, path))),
      [],
    );
  });

  it('no file refers to the design notes kept outside the repository', () => {
    const outside = /\.\.\/shared\/|\bDESIGN\.md\b/;
    const offenders: string[] = [];
    const walk = (dir: string) => {
      for (const entry of readdirSync(join(repoRoot, dir), { withFileTypes: true })) {
        if (SKIP.has(entry.name)) continue;
        const path = dir === '' ? entry.name : `${dir}/${entry.name}`;
        if (entry.isDirectory()) walk(path);
        else if (
          /\.(ts|md|ya?ml|json|sh|tpl)$/.test(entry.name) &&
          entry.name !== 'package-lock.json' &&
          path !== relative(repoRoot, import.meta.filename)
        ) {
          const text = readFileSync(join(repoRoot, path), 'utf8');
          text.split('\n').forEach((line, i) => {
            if (outside.test(line)) offenders.push(`${path}:${i + 1}: ${line.trim()}`);
          });
        }
      }
    };
    walk('');
    assert.deepEqual(offenders, []);
  });
});
