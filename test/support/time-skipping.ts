/** Temporal's time-skipping test server (Java), installed by scripts/install-test-server.sh: missing FAILS the tests. */
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import proto from '@temporalio/proto';
import { TestWorkflowEnvironment } from '@temporalio/testing';
import { allSearchAttributes } from '../../src/workflows/search-attributes.js';
import { repoRoot } from './worker.js';

/** TEMPORAL_TEST_SERVER_PATH, else `.tools/test-server/temporal-test-server`. */
export function testServerPath(): string {
  const file = process.env.TEMPORAL_TEST_SERVER_PATH ?? path.join(repoRoot, '.tools', 'test-server', 'temporal-test-server');
  try {
    accessSync(file, constants.X_OK);
  } catch {
    throw new Error(`The time-skipping tests need Temporal's test server and found none at ${file}. Install it: bash scripts/install-test-server.sh (java 17+ and mvn; .ci/run does this).`);
  }
  return file;
}

/**
 * A time-skipping environment on the installed test server (the SDK's own download fails offline), with the run
 * search attributes registered (the test server has AddSearchAttributes but no ListSearchAttributes).
 */
export async function timeSkippingEnvironment(): Promise<TestWorkflowEnvironment> {
  const env = await TestWorkflowEnvironment.createTimeSkipping({ server: { executable: { type: 'existing-path', path: testServerPath() } } });
  const { IndexedValueType } = proto.temporal.api.enums.v1;
  const searchAttributes = Object.fromEntries(
    allSearchAttributes.map((key) => [key.name, key.type === 'DOUBLE' ? IndexedValueType.INDEXED_VALUE_TYPE_DOUBLE : IndexedValueType.INDEXED_VALUE_TYPE_KEYWORD]),
  );
  await env.connection.operatorService.addSearchAttributes({ namespace: 'default', searchAttributes });
  return env;
}
