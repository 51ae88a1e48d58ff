import { execFileSync } from 'node:child_process';
import { mkdtemp, mkdir, readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import {
  ActionRegistry,
  createBuiltinRegistry,
  echoAction,
  listFilesAction,
  PathEscapeError,
  readFileAction,
  SandboxFsError,
  writeFileAction,
  type ActionContext,
} from '../../src/actions/index.js';
import { LocalWorkspaceFs } from '../../src/sandbox/index.js';

let root: string;
let outside: string;
let ctx: ActionContext;

beforeEach(async () => {
  root = await mkdtemp(path.join(tmpdir(), 'dh-actions-'));
  outside = await mkdtemp(path.join(tmpdir(), 'dh-outside-'));
  ctx = { workflowId: 'wf-1', agent: 'demo', fs: new LocalWorkspaceFs(root), settings: {} };
});

afterEach(async () => {
  await rm(root, { recursive: true, force: true });
  await rm(outside, { recursive: true, force: true });
});

describe('paths', () => {
  it('resolves relative paths inside the workspace, lexically', async () => {
    await writeFileAction.execute({ path: 'a/../b.txt', content: 'b' }, ctx);
    expect(await readFile(path.join(root, 'b.txt'), 'utf8')).toBe('b');
    expect(await readFileAction.execute({ path: './a/../b.txt' }, ctx)).toBe('b');
  });

  it('rejects escapes and absolute paths with workspace-relative messages only', async () => {
    for (const bad of ['../x', 'a/../../x', '/etc/passwd', `../${path.basename(root)}-other/x`]) {
      const error = await readFileAction.execute({ path: bad }, ctx).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(PathEscapeError);
      expect((error as Error).message).not.toContain(root);
      expect((error as Error).message).not.toContain(tmpdir());
    }
  });
});

describe('control characters in paths', () => {
  it('write_file, read_file and list_files refuse ESC, CR, LF, C1 and line separators in a path, naming them; nothing is created', async () => {
    for (const bad of ['evil\x1b[31m.txt', 'a\rb.txt', 'two\nlines.txt', 'dir\n/x.txt', 'c1\u009b.txt', 'sep\u2028.txt', 'nul\u0000.txt']) {
      await expect(writeFileAction.execute({ path: bad, content: 'x' }, ctx), JSON.stringify(bad)).rejects.toThrow(/contains control characters \(U\+[0-9A-F]{4}.*\); nothing was done: use a file name of printable characters/);
      await expect(readFileAction.execute({ path: bad }, ctx)).rejects.toThrow(/contains control characters/);
      await expect(listFilesAction.execute({ path: bad }, ctx)).rejects.toThrow(/contains control characters/);
    }
    expect(await readdir(root)).toEqual([]);
    // The message shows the character escaped, so it cannot forge a line where it is printed.
    const error = (await writeFileAction.execute({ path: 'a\x1b[2Kb\n', content: 'x' }, ctx).catch((e: unknown) => e)) as Error;
    expect(error.message).toBe('path "a\\u001b[2Kb\\u000a" contains control characters (U+001B, U+000A); nothing was done: use a file name of printable characters');
    // Printable names, unicode included, still work.
    await writeFileAction.execute({ path: 'ünï code ✓.txt', content: 'ok' }, ctx);
    expect(await readdir(root)).toEqual(['ünï code ✓.txt']);
  });
});

describe('write_file', () => {
  it('writes and creates directories', async () => {
    const result = await writeFileAction.execute({ path: 'a/b/c.txt', content: 'héllo' }, ctx);
    expect(await readFile(path.join(root, 'a/b/c.txt'), 'utf8')).toBe('héllo');
    expect(result).toEqual({ path: 'a/b/c.txt', bytes: 6 });
  });

  it('rejects ../x', async () => {
    await expect(writeFileAction.execute({ path: '../x', content: 'no' }, ctx)).rejects.toThrow(/leaves the workspace/);
  });

  it('rejects /etc/passwd', async () => {
    await expect(writeFileAction.execute({ path: '/etc/passwd', content: 'no' }, ctx)).rejects.toThrow(/absolute/);
  });

  it('refuses writing through a symlinked directory that points outside', async () => {
    await symlink(outside, path.join(root, 'escape'));
    await expect(writeFileAction.execute({ path: 'escape/x.txt', content: 'no' }, ctx)).rejects.toThrow(/"escape" is a symbolic link/);
    await expect(writeFileAction.execute({ path: 'escape/deeper/x.txt', content: 'no' }, ctx)).rejects.toMatchObject({ code: 'SymlinkRefused' });
    expect(await readdir(outside)).toEqual([]);
  });

  it('refuses overwriting a symlinked file (outside or inside), and dangling links', async () => {
    await writeFile(path.join(outside, 'target.txt'), 'original');
    await symlink(path.join(outside, 'target.txt'), path.join(root, 'link.txt'));
    await expect(writeFileAction.execute({ path: 'link.txt', content: 'no' }, ctx)).rejects.toBeInstanceOf(SandboxFsError);
    expect(await readFile(path.join(outside, 'target.txt'), 'utf8')).toBe('original');
    await symlink(path.join(outside, 'missing.txt'), path.join(root, 'dangling.txt'));
    await expect(writeFileAction.execute({ path: 'dangling.txt', content: 'no' }, ctx)).rejects.toMatchObject({ code: 'SymlinkRefused' });
    expect(await readdir(outside)).toEqual(['target.txt']);
    await writeFile(path.join(root, 'real.txt'), 'inside');
    await symlink('real.txt', path.join(root, 'inner-link.txt'));
    await expect(writeFileAction.execute({ path: 'inner-link.txt', content: 'no' }, ctx)).rejects.toMatchObject({ code: 'SymlinkRefused' });
  });

  it('refuses a FIFO without blocking', async () => {
    execFileSync('mkfifo', [path.join(root, 'pipe')]);
    await expect(writeFileAction.execute({ path: 'pipe', content: 'x' }, ctx)).rejects.toMatchObject({ code: 'NotAFile' });
    await expect(readFileAction.execute({ path: 'pipe' }, ctx)).rejects.toMatchObject({ code: 'NotAFile' });
  });

  it('validates its parameters', () => {
    expect(writeFileAction.parameters.safeParse({ path: 'x' }).success).toBe(false);
    expect(writeFileAction.parameters.safeParse({ path: 'x', content: '', extra: 1 }).success).toBe(false);
  });
});

describe('read_file', () => {
  it('reads text', async () => {
    await writeFile(path.join(root, 'f.txt'), 'content');
    expect(await readFileAction.execute({ path: 'f.txt' }, ctx)).toBe('content');
  });

  it('truncates past maxBytes with a note', async () => {
    await writeFile(path.join(root, 'big.txt'), 'x'.repeat(100));
    const text = (await readFileAction.execute({ path: 'big.txt', maxBytes: 10 }, ctx)) as string;
    expect(text.startsWith('xxxxxxxxxx\n[truncated: showed 10 of 100 bytes')).toBe(true);
  });

  it('truncates at 64 KiB by default', async () => {
    await writeFile(path.join(root, 'huge.txt'), 'y'.repeat(70 * 1024));
    const text = (await readFileAction.execute({ path: 'huge.txt' }, ctx)) as string;
    expect(text).toContain(`showed ${64 * 1024} of ${70 * 1024} bytes`);
  });

  it('rejects escapes', async () => {
    await expect(readFileAction.execute({ path: '../x' }, ctx)).rejects.toThrow(PathEscapeError);
    await expect(readFileAction.execute({ path: '/etc/passwd' }, ctx)).rejects.toThrow(PathEscapeError);
    await symlink(tmpdir(), path.join(root, 'tmp'));
    await expect(readFileAction.execute({ path: 'tmp/anything' }, ctx)).rejects.toThrow(/symbolic link/);
    await symlink('/etc/hostname', path.join(root, 'host'));
    await expect(readFileAction.execute({ path: 'host' }, ctx)).rejects.toThrow(/symbolic link/);
  });

  it('says a directory is one, and a missing file is missing, with relative paths', async () => {
    await mkdir(path.join(root, 'd'));
    await expect(readFileAction.execute({ path: 'd' }, ctx)).rejects.toThrow('"d" is a directory; use list_files');
    await expect(readFileAction.execute({ path: 'd/none.txt' }, ctx)).rejects.toThrow('"d/none.txt" does not exist in the workspace.');
  });
});

describe('list_files', () => {
  it('lists names, suffixes dirs and hides harness state', async () => {
    await mkdir(path.join(root, 'src'));
    await mkdir(path.join(root, '.home'));
    await mkdir(path.join(root, '.durable-harness'));
    await writeFile(path.join(root, 'b.txt'), '');
    await writeFile(path.join(root, 'a.txt'), '');
    const params = listFilesAction.parameters.parse({});
    expect(await listFilesAction.execute(params, ctx)).toEqual(['a.txt', 'b.txt', 'src/']);
  });

  it('rejects escapes and links', async () => {
    await expect(listFilesAction.execute({ path: '..' }, ctx)).rejects.toThrow(PathEscapeError);
    await symlink(outside, path.join(root, 'out'));
    await expect(listFilesAction.execute({ path: 'out' }, ctx)).rejects.toMatchObject({ code: 'SymlinkRefused' });
    await expect(listFilesAction.execute({ path: '.' }, ctx)).resolves.toEqual(['out']);
  });
});

describe('registry', () => {
  it('registers, gets and lists; unknown is undefined', () => {
    const reg = createBuiltinRegistry();
    expect(reg.names()).toEqual(['echo', 'list_files', 'read_file', 'write_file']);
    expect(reg.get('echo')).toBe(echoAction);
    expect(reg.get('nope')).toBeUndefined();
    expect(() => reg.register(echoAction)).toThrow(/already registered/);
    expect(new ActionRegistry().list()).toEqual([]);
  });

  it('echo returns its text', async () => {
    expect(await echoAction.execute({ text: 'hi' }, ctx)).toBe('hi');
  });
});

describe('missing workspace', () => {
  it('says the workspace does not exist', async () => {
    const gone = { ...ctx, fs: new LocalWorkspaceFs(path.join(root, 'not-there')) };
    await expect(writeFileAction.execute({ path: 'a.txt', content: '' }, gone)).rejects.toThrow(/does not exist/);
  });
});
