/**
 * A stand-in worker for the orphan test: starts `sleep` through the local sandbox (stdin, stdout and stderr all
 * unused, so nothing tells it its parent died), prints `started`, and waits to be SIGKILLed.
 *   node --import tsx test/multihost/orphan-host.ts WORKSPACE
 */
import { LocalExecutor } from '../../src/sandbox/local-executor.js';

const workspacePath = process.argv[2]!;
const executor = new LocalExecutor({ workspacePath, isolation: { containment: 'pid-namespace' } });
executor.exec({ argv: ['/bin/sh', '-c', 'exec sleep 300 >/dev/null 2>&1 </dev/null'] });
setTimeout(() => process.stdout.write('started\n'), 300);
setInterval(() => undefined, 1000);
