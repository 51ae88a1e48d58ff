import { SqliteLedger } from '../../src/ledger/index.js';
import { approvalLedgerSuite } from './approval-ledger-suite.js';

approvalLedgerSuite('SqliteLedger', async () => SqliteLedger.open(':memory:'));
