/** Shared setup for tests on the real Docker engine. A missing engine or image FAILS: nothing is skipped. */
import { existsSync } from 'node:fs';
import Dockerode from 'dockerode';
import { ciDockerSocket } from '../../src/sandbox/docker-client.js';

/** The offline test image built by `scripts/build-sandbox-image.sh`. */
export const testImage = process.env.SANDBOX_IMAGE ?? 'durable-harness-sandbox:test';

/** dockerode for DOCKER_HOST, defaulting to the socket `.ci/docker-engine.sh` starts. */
export function testDocker(): Dockerode {
  if (!process.env.DOCKER_HOST && existsSync(ciDockerSocket)) process.env.DOCKER_HOST = `unix://${ciDockerSocket}`;
  return new Dockerode();
}

/** Throws a clear error unless the engine answers and the test image is there. */
export async function requireEngineAndImage(docker: Dockerode): Promise<void> {
  try {
    await docker.ping();
  } catch (error) {
    throw new Error(
      `No Docker engine answers (DOCKER_HOST=${process.env.DOCKER_HOST ?? 'unset'}): ${(error as Error).message}. ` +
        'Start one with `eval "$(.ci/docker-engine.sh)"`.',
    );
  }
  try {
    await docker.getImage(testImage).inspect();
  } catch {
    throw new Error(`The test image ${testImage} is missing; build it with scripts/build-sandbox-image.sh.`);
  }
}
