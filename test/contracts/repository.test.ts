/** The repository words of a run (src/contracts/repository.ts) and the catalog's checks of a `repository` block. */
import { describe, expect, it } from 'vitest';
import { CatalogError, parseCatalog } from '../../src/catalog/index.js';
import { deliverableLine, githubRepositoryOf, repositorySourceAllowed, repositorySourceProblem } from '../../src/contracts/repository.js';

describe('repository sources', () => {
  it('takes URLs, scp-like remotes and absolute paths', () => {
    for (const ok of ['https://github.com/acme/app.git', 'ssh://git@host/x.git', 'git://host/x', 'file:///srv/x.git', 'git@github.com:acme/app.git', '/srv/repos/app.git']) {
      expect(repositorySourceProblem(ok), ok).toBeUndefined();
    }
  });

  it('refuses a token in the URL, option-like text, remote helpers, unknown schemes and control characters, saying what to do', () => {
    expect(repositorySourceProblem('https://x-access-token:ghp_secret@github.com/acme/app.git')).toMatch(/password or token in its URL: remove it and name the credential in repository.credential/);
    expect(repositorySourceProblem('--upload-pack=touch /tmp/pwned')).toMatch(/starts with "-"/);
    expect(repositorySourceProblem('ext::sh -c touch% /tmp/pwned')).toMatch(/remote helper|neither a URL/);
    expect(repositorySourceProblem('fd::17')).toBeDefined();
    expect(repositorySourceProblem('ftp://host/x')).toMatch(/scheme "ftp" is not one the worker fetches/);
    expect(repositorySourceProblem('relative/path')).toMatch(/neither a URL/);
    expect(repositorySourceProblem('/srv/a\nb')).toMatch(/control characters/);
  });

  it('allows the agent\'s own source, exact sources and prefixes ending in "/", never a ".." out of a prefix', () => {
    const allowed = { source: '/srv/a.git', sources: ['https://github.com/acme/', '/srv/b.git'] };
    expect(repositorySourceAllowed('/srv/a.git', allowed)).toBe(true);
    expect(repositorySourceAllowed('/srv/b.git', allowed)).toBe(true);
    expect(repositorySourceAllowed('https://github.com/acme/app.git', allowed)).toBe(true);
    expect(repositorySourceAllowed('https://github.com/acme/../evil/app.git', allowed)).toBe(false);
    expect(repositorySourceAllowed('https://github.com/acmecorp/app.git', allowed)).toBe(false);
    expect(repositorySourceAllowed('/srv/c.git', allowed)).toBe(false);
  });

  it('reads owner/name of GitHub remotes only', () => {
    expect(githubRepositoryOf('https://github.com/acme/app.git')).toBe('acme/app');
    expect(githubRepositoryOf('git@github.com:acme/app')).toBe('acme/app');
    expect(githubRepositoryOf('ssh://git@github.com/acme/app.git')).toBe('acme/app');
    expect(githubRepositoryOf('https://gitlab.com/acme/app.git')).toBeUndefined();
    expect(githubRepositoryOf('/srv/app.git')).toBeUndefined();
  });

  it('sums a deliverable in one line', () => {
    expect(deliverableLine({ state: 'delivered', mode: 'pull-request', branch: 'dh/r1', base: 'a'.repeat(40), head: 'b'.repeat(40), files: 3, pullRequest: { url: 'https://github.com/acme/app/pull/7', number: 7 } })).toBe(
      `3 file(s) on dh/r1 @ ${'b'.repeat(12)} · https://github.com/acme/app/pull/7`,
    );
    expect(deliverableLine({ state: 'refused', mode: 'push', branch: 'dh/r1', base: 'a'.repeat(40), problem: 'the diff holds the value of credential grant K' })).toBe('refused: the diff holds the value of credential grant K');
  });
});

describe('a repository block in the catalog', () => {
  const catalog = (repository: Record<string, unknown>, sandbox: Record<string, unknown> = {}) => ({
    harnesses: [{ name: 'h', driverClass: 'StdioJson', executable: '/bin/true', vendor: 'v', model: 'm' }],
    agents: [{ name: 'a', harness: 'h', sandbox, repository }],
  });
  const problems = (raw: unknown): string[] => {
    try {
      parseCatalog(raw, 'mem');
    } catch (e) {
      if (e instanceof CatalogError) return [...e.problems];
      throw e;
    }
    return [];
  };

  it('takes a plain block with its defaults', () => {
    const agent = parseCatalog(catalog({ source: '/srv/a.git' }), 'mem').agents[0]!;
    expect(agent.repository).toMatchObject({ source: '/srv/a.git', branchPrefix: 'durable-harness', deliver: 'commit', deliverOn: ['succeeded'], sources: [] });
  });

  it('names each problem with its fix', () => {
    expect(problems(catalog({ source: 'https://u:tok@github.com/a/b' }))).toEqual([expect.stringMatching(/^agents\[0\]\.repository\.source: .*password or token/)]);
    expect(problems(catalog({ source: '/srv/a.git' }, { workspaceScope: 'agent' }))).toEqual([expect.stringContaining('needs a workspace of its own (sandbox.workspaceScope: run)')]);
    expect(problems(catalog({ source: '/srv/a.git', deliver: 'pull-request', credential: 'gh' }))).toEqual([expect.stringContaining('cannot be read from source "/srv/a.git"; set it')]);
    expect(problems(catalog({ source: 'https://github.com/a/b.git', deliver: 'pull-request' }))).toEqual([expect.stringContaining('needs a credential for the API')]);
    expect(problems(catalog({ source: '/srv/a.git', ref: '--output=/etc/x' })).join('\n')).toMatch(/repository\.ref/);
    expect(problems(catalog({ source: '/srv/a.git', sources: ['ftp://x/'] })).join('\n')).toMatch(/repository\.sources\[0\]: .*scheme "ftp"/);
  });
});
