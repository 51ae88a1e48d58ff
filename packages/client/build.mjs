#!/usr/bin/env node
/**
 * Builds @durable-harness/client from the repository's own sources: tsc compiles src/client/index.ts and everything
 * it imports (types included) into a scratch directory, and dist/ keeps only what the entry reaches — through the
 * run-time imports of the .js files and through the .d.ts files. A package imported by a kept file that this package
 * does not depend on fails the build, naming the file: the client must never load the worker (its native bridge,
 * better-sqlite3, dockerode, pg, swc), and a type must never name a package its users do not install.
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
const entry = 'client/index';

function fail(message) {
  console.error(`${manifest.name} build: ${message}`);
  process.exit(1);
}

// One version of each shared dependency: the client runs against what the main package is built and tested with.
for (const [name, version] of Object.entries(manifest.dependencies)) {
  const main = mainManifest.dependencies[name];
  if (main !== version) fail(`${name} is ${version} in packages/client/package.json but ${main ?? 'absent'} in the main package.json: make them equal`);
}

const packageOf = (specifier) => specifier.split('/').slice(0, specifier.startsWith('@') ? 2 : 1).join('/');
const isBuiltin = (specifier) => specifier.startsWith('node:') || builtinModules.includes(packageOf(specifier));
const sourceOf = (file) => `src/${file.replace(/\.d\.ts$|\.js$/, '.ts')}`;

/** The files `start` reaches through relative imports, and the packages they import (package → first importer). */
function reach(dir, start, toFile) {
  const files = new Set();
  const packages = new Map();
  const visit = (file) => {
    if (files.has(file)) return;
    if (!existsSync(path.join(dir, file))) fail(`${file} is imported but was not compiled (a file tsc does not emit): make the import type-only or keep it out of the client`);
    files.add(file);
    for (const { fileName: specifier } of ts.preProcessFile(readFileSync(path.join(dir, file), 'utf8'), true, true).importedFiles) {
      if (specifier.startsWith('.')) visit(toFile(path.posix.join(path.posix.dirname(file), specifier)));
      else if (!isBuiltin(specifier) && !packages.has(packageOf(specifier))) packages.set(packageOf(specifier), file);
    }
  };
  visit(start);
  return { files, packages };
}

const scratch = mkdtempSync(path.join(os.tmpdir(), 'dh-client-build-'));
try {
  const tsc = createRequire(import.meta.url).resolve('typescript/bin/tsc');
  execFileSync(process.execPath, [tsc, '-p', path.join(here, 'tsconfig.json'), '--outDir', scratch], { stdio: 'inherit' });
  const code = reach(scratch, `${entry}.js`, (file) => file);
  const types = reach(scratch, `${entry}.d.ts`, (file) => file.replace(/\.js$/, '.d.ts'));
  for (const [what, { packages }] of [['at run time', code], ['in its types', types]]) {
    for (const [name, file] of packages) {
      if (!(name in manifest.dependencies)) {
        fail(
          `${sourceOf(file)} imports "${name}" ${what}, which is not a dependency of ${manifest.name}: cut the import from the ` +
            `client's graph (make it type-only, or move the code), or add "${name}" to packages/client/package.json if it is small and has no native parts`,
        );
      }
    }
  }
  const dist = path.join(here, 'dist');
  rmSync(dist, { recursive: true, force: true });
  for (const file of new Set([...code.files, ...types.files])) {
    mkdirSync(path.dirname(path.join(dist, file)), { recursive: true });
    copyFileSync(path.join(scratch, file), path.join(dist, file));
  }
  console.log(`${manifest.name}: dist/ holds ${code.files.size} modules and ${types.files.size} declaration files`);
} finally {
  rmSync(scratch, { recursive: true, force: true });
}
