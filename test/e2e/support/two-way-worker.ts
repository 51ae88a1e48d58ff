/**
 * A stand-in worker process for the "worker dies while a permission request waits" test: it drives one
 * two-way turn of a real CLI and SIGKILLs itself the moment the CLI asks, leaving the CLI without its parent.
 *
 *   node --import tsx test/e2e/support/two-way-worker.ts CLI WORKSPACE VENDOR_URL STATE_FILE
 *
 * STATE_FILE (outside the workspace) is where the executor records the turn's process, as the local provider's
 * runtime directory does: how the test finds the orphan, and how a retried attempt would kill it.
 */
import { LocalExecutor } from '../../../src/sandbox/local-executor.js';
import type { FakeVendor } from '../fake-vendor/server.js';
import type { CliName } from '../fake-vendor/tool-calls.js';
import { cliProfiles, cliSessionConfig } from './two-way.js';

const [cli, workspace, vendorUrl, stateFile] = process.argv.slice(2) as [CliName, string, string, string];
const adapter = cliProfiles[cli].create();
adapter.applyPermissionPolicy('strict');
await adapter.start(cliSessionConfig(cli, workspace, { url: vendorUrl } as FakeVendor, new LocalExecutor({ workspacePath: workspace, stateFile }), 'sk-worker-death'));
const gate = {
  interactive: true,
  decide: () => {
    process.stdout.write('asked\n', () => process.kill(process.pid, 'SIGKILL'));
    return new Promise<never>(() => undefined);
  },
};
for await (const _event of adapter.runTurn({ prompt: 'Run touch ran.txt, then write out.txt.', turn: 1, gate }));
process.stdout.write('turn ended without dying\n');
