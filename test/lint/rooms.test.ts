// The room order of src/ (lint/rooms.js) as `npm run lint` enforces it: what a reviewer relies on when a PR adds an import.
import { ESLint } from 'eslint';
import tseslint from 'typescript-eslint';
import { describe, expect, it } from 'vitest';
import { rooms, roomsPlugin } from '../../lint/rooms.js';

const eslint = new ESLint({
  cwd: process.cwd(),
  overrideConfigFile: true,
  overrideConfig: [{ files: ['**/*.ts'], languageOptions: { parser: tseslint.parser }, plugins: { rooms: roomsPlugin }, rules: { 'rooms/order': 'error' } }],
});

async function problems(file: string, code: string): Promise<string[]> {
  const [result] = await eslint.lintText(code, { filePath: file });
  return result!.messages.map((m) => m.message);
}

describe('the room order', () => {
  it('refuses an import that runs up the order, and says where the word belongs', async () => {
    const found = await problems('src/ledger/rows.ts', "import type { TurnRequest } from '../workflows/types.js';\n");
    expect(found).toEqual([expect.stringContaining('src/ledger must not import src/workflows')]);
    expect(found[0]).toContain('src/contracts');
  });

  it('refuses re-exports and dynamic imports from above as well', async () => {
    expect(await problems('src/adapters/x.ts', "export { runTurn } from '../activities/index.js';\n")).toHaveLength(1);
    expect(await problems('src/sandbox/x.ts', "const m = await import('../cli/main.js');\nexport { m };\n")).toHaveLength(1);
    expect(await problems('src/contracts/x.ts', "import { x } from '../worker.js';\nexport { x };\n")).toHaveLength(1);
  });

  it('lets a room import the rooms below it, itself and packages', async () => {
    const code = "import { addUsage } from '../contracts/usage.js';\nimport { x } from './rows.js';\nimport { z } from 'zod';\nexport { addUsage, x, z };\n";
    expect(await problems('src/ledger/y.ts', code)).toEqual([]);
    expect(await problems('src/cli/y.ts', "import { createWorker } from '../worker.js';\nexport { createWorker };\n")).toEqual([]);
  });

  it('lets workflow code name its activities as types only', async () => {
    expect(await problems('src/workflows/x.ts', "import type { createActivities } from '../activities/index.js';\nexport type { createActivities };\n")).toEqual([]);
    expect(await problems('src/workflows/x.ts', "import { createActivities } from '../activities/index.js';\nexport { createActivities };\n")).toHaveLength(1);
  });

  it('names a new folder that is not in the order', async () => {
    expect(await problems('src/elsewhere/x.ts', 'export const x = 1;\n')).toEqual([expect.stringContaining('src/elsewhere is not in the room order')]);
    expect(rooms[0]).toBe('contracts');
  });
});
