#!/usr/bin/env node
/**
 * Builds @durable-harness/client from the repository's own sources: tsc compiles src/client/index.ts and everything
 * it imports (types included) into a scratch directory, and dist/ keeps only what the entry reaches — through the
 * run-time imports of the .js files and through the .d.ts files. A package imported by a kept file that this package
 * does not depend on fails the build, naming the file: the client must never load the worker (its native bridge,
 * better-sqlite3, dockerode, swc), and a type must never name a package its users do not install. An optional peer
 * (`pg`, for following events in the PostgreSQL ledger) may only be imported dynamically, where it is used.
 */
import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { builtinModules, createRequire } from 'node:module';
import os from 'node:os';
import path from 'node:path';
import ts from 'typescript';

const here = import.meta.dirname;
const root = path.resolve(here, '..', '..');
const read = (file) => JSON.parse(readFileSync(file, 'utf8'));
const manifest = read(path.join(here, 'package.json'));
const mainManifest = read(path.join(root, 'package.json'));
const dependencies = manifest.dependencies;
const optionalPeers = Object.keys(manifest.peerDependencies ?? {}).filter((name) => manifest.peerDependenciesMeta?.[name]?.optional);
const entry = 'client/index';

/** A problem the build names; the scratch directory is removed before it is reported. */
class BuildProblem extends Error {}
function fail(message) {
  throw new BuildProblem(`${manifest.name} build: ${message}`);
}

const packageOf = (specifier) => specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
const isBuiltin = (specifier) => specifier.startsWith('node:') || builtinModules.includes(packageOf(specifier));
const sourceOf = (file) => `src/${file.replace(/\.d\.ts$|\.js$/, '.ts')}`;

/**
 * The files `start` reaches through relative imports, and the packages they import: package → its first importer
 * and whether every import of it is a dynamic `import()`.
 */
function reach(dir, start, toFile) {
  const files = new Set();
  const packages = new Map();
  const visit = (file) => {
    if (files.has(file)) return;
    if (!existsSync(path.join(dir, file))) fail(`${file} is imported but was not compiled (a file tsc does not emit): make the import type-only or keep it out of the client`);
    files.add(file);
    const text = readFileSync(path.join(dir, file), 'utf8');
    for (const { fileName: specifier, pos } of ts.preProcessFile(text, true, true).importedFiles) {
      if (specifier.startsWith('.')) {
        visit(toFile(path.posix.join(path.posix.dirname(file), specifier)));
      } else if (!isBuiltin(specifier)) {
        const dynamic = /import\s*\(\s*['"`]?$/.test(text.slice(Math.max(0, pos - 20), pos));
        const seen = packages.get(packageOf(specifier));
        packages.set(packageOf(specifier), { file: seen?.file ?? file, dynamic: dynamic && (seen?.dynamic ?? true) });
      }
    }
  };
  visit(start);
  return { files, packages };
}

function build(scratch) {
  // One version of each shared dependency: the client runs against what the main package is built and tested with.
  for (const [name, version] of Object.entries(dependencies)) {
    const main = mainManifest.dependencies[name];
    if (main !== version) fail(`${name} is ${version} in packages/client/package.json but ${main ?? 'absent'} in the main package.json: make them equal`);
  }
  for (const name of optionalPeers) {
    const main = mainManifest.dependencies[name];
    if (manifest.peerDependencies[name] !== `^${main}`) fail(`the optional peer ${name} must be ^${main ?? '(absent)'}, from the main package.json's version`);
  }
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  try {
    execFileSync(process.execPath, [tsc, '-p', path.join(here, 'tsconfig.json'), '--outDir', scratch], { stdio: 'inherit' });
  } catch {
    // The client's types reach the workflow's and so most of src/: it builds only when the whole tree typechecks.
    fail('tsc reported the errors above (in src/client/index.ts or a file its types reach): fix them, then build again');
  }
  const code = reach(scratch, `${entry}.js`, (file) => file);
  const types = reach(scratch, `${entry}.d.ts`, (file) => file.replace(/\.js$/, '.d.ts'));
  for (const [what, { packages }] of [['at run time', code], ['in its types', types]]) {
    for (const [name, { file, dynamic }] of packages) {
      if (name in dependencies || (optionalPeers.includes(name) && dynamic && what === 'at run time')) continue;
      if (optionalPeers.includes(name)) fail(`${sourceOf(file)} imports the optional peer "${name}" ${what} other than by a dynamic import(): load it where it is used, so the client loads without it`);
      fail(
        `${sourceOf(file)} imports "${name}" ${what}, which is not a dependency of ${manifest.name}: cut the import from the ` +
          `client's graph (make it type-only, or move the code), or add "${name}" to packages/client/package.json if it is small and has no native parts`,
      );
    }
  }
  const dist = path.join(here, 'dist');
  rmSync(dist, { recursive: true, force: true });
  for (const file of new Set([...code.files, ...types.files])) {
    mkdirSync(path.dirname(path.join(dist, file)), { recursive: true });
    copyFileSync(path.join(scratch, file), path.join(dist, file));
  }
}

const scratch = mkdtempSync(path.join(os.tmpdir(), 'dh-client-build-'));
try {
  build(scratch);
} catch (err) {
  if (!(err instanceof BuildProblem)) throw err;
  console.error(err.message);
  process.exitCode = 1;
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
