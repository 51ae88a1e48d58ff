// The failure converter of an encrypting data converter, loaded by path (Temporal's `failureConverterPath`) in the
// worker and in the workflow bundle. Plain CommonJS so it loads as-is from a checkout (tsx, vitest) and from dist/.
// It moves a failure's message and stack trace into an encoded payload, which the payload codec then encrypts:
// a run's failure reason is no more readable in history than its task.
'use strict';
// eslint-disable-next-line @typescript-eslint/no-require-imports -- loaded by require() from Temporal's loader
const { DefaultFailureConverter } = require('@temporalio/common');

exports.failureConverter = new DefaultFailureConverter({ encodeCommonAttributes: true });
