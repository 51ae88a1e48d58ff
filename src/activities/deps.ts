/**
 * What the activities are given: the worker's injected dependencies, and what every activity derives from them
 * (defaults, the spec store, blob reads and writes, the redactor, the sandbox provider by name).
 */
import { ApplicationFailure } from '@temporalio/activity';
import type { ActionRegistry } from '../actions/index.js';
import type { AdapterRegistry } from '../adapters/registry.js';
import { LedgerBlobStore, claimCheck, resolveText, type BlobStore, type TextRef } from '../blobs/index.js';
import type { Catalog } from '../catalog/schema.js';
import type { CredentialStore } from '../credentials/index.js';
import type { ApprovalRecord, Ledger } from '../ledger/types.js';
import type { DecisionMode, OperatorDirectory } from '../operators/index.js';
import { ApprovalWakeups, type ApprovalBroker } from '../permissions/index.js';
import type { SandboxProvider } from '../sandbox/types.js';
import { SpecStore, type FrozenSpec } from '../spec/index.js';
import { FailureTypes } from '../contracts/failures.js';
import { mapped } from './failures.js';
import { waitForLedger } from './ledger-wait.js';
import { harnessRedactor, type Redactor } from './redaction.js';
import { GatewayRegistry } from './turn/door.js';
import { TurnStops } from './turn/stops.js';
import { HomeTemplates } from '../adapters/home-template.js';

/** Texts longer than this (characters) travel through workflow history by reference. */
export const DEFAULT_INLINE_TEXT_LIMIT = 16 * 1024;

/** Everything the activities need, injected by the worker (or a test). */
export interface ActivityDeps {
  /**
   * The current catalog; read when a run starts (its spec is frozen then), and by redaction, which must know
   * every secret the worker could hand any harness.
   */
  readonly catalog: () => Catalog;
  readonly adapters: AdapterRegistry;
  readonly sandboxes: Readonly<Record<string, SandboxProvider>>;
  readonly ledger: Ledger;
  readonly actions: ActionRegistry;
  readonly credentials: CredentialStore;
  /** Where large texts and frozen specs are kept (default: the ledger's blob table). */
  readonly blobs?: BlobStore;
  /** Texts longer than this travel through history by reference (default 16 KiB). */
  readonly inlineTextLimit?: number;
  /** The server environment credentials may fall back to (default: process.env). */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** How often a running turn checks whether its progress changed, to heartbeat it (ms; default 250). */
  readonly heartbeatIntervalMs?: number;
  /** How long a turn stopped by its run's cancel waits for Temporal's cancellation (ms; default 10 s). */
  readonly cancelConfirmMs?: number;
  /** How long a cancelled turn still waits for an unwritable ledger before giving its rows up to the log (ms). */
  readonly cancelledAccountingGraceMs?: number;
  /** Who answers permission requests the policy leaves open (default: the ledger, polled every `approvalPollMs`). */
  readonly approvals?: ApprovalBroker;
  readonly approvalPollMs?: number;
  /** Wakes a waiting turn when a decision is written on this process (default: one of this deps' own). */
  readonly approvalWakeups?: ApprovalWakeups;
  /** The turns running on this process, which the run's workflow stops at once on a cancel (default: one of this deps' own). */
  readonly turnStops?: TurnStops;
  /** This process's prepared CLI homes, for local sandboxes (default: one of this deps' own). */
  readonly homeTemplates?: HomeTemplates;
  /** Told when a request becomes pending (e.g. to show it on the workflow); errors are logged, never fatal. */
  readonly onPendingApproval?: (record: ApprovalRecord) => Promise<void>;
  /**
   * This worker's own task queue (`<queue>@<host id>`, which it also polls): recorded in the ref of every
   * host-bound sandbox it starts, so the run's later activities come back here (docs/multi-host.md).
   */
  readonly hostQueue?: string;
  /** The operators whose signed decisions this worker accepts (src/operators; default: none). */
  readonly operators?: () => OperatorDirectory;
  /** Whether operator decisions must be signed (default `signed`; `dev` runs `trusted-network`). */
  readonly decisionMode?: DecisionMode;
  /** The runs' egress gateways on this worker (default: a registry of this deps' own; the worker closes it at shutdown). */
  readonly gateways?: GatewayRegistry;
  /** Where the worker keeps repository mirrors and runs' git directories (docs/repositories.md; default under the OS temp dir). */
  readonly gitRoot?: string;
}

/** The deps with their defaults, and the helpers every activity shares. */
export interface Deps extends ActivityDeps {
  readonly gateways: GatewayRegistry;
  readonly approvalWakeups: ApprovalWakeups;
  readonly turnStops: TurnStops;
  readonly homeTemplates: HomeTemplates;
  readonly env: Readonly<Record<string, string | undefined>>;
  readonly blobs: BlobStore;
  readonly inlineTextLimit: number;
  readonly specs: SpecStore;
  /**
   * Redacts every secret the worker could hand any harness under the current catalog (see redaction.ts), plus
   * `extra` (the run's own).
   */
  readonly redactorFor: (extra?: readonly string[]) => Redactor;
  /** The sandbox provider of that name, or a non-retryable failure naming the ones this worker has. */
  readonly provider: (name: string) => SandboxProvider;
  readonly loadSpec: (hash: string) => Promise<FrozenSpec>;
  /** The text a ref stands for. */
  readonly text: (ref: TextRef) => Promise<string>;
  /** `value` inline, or by reference when it is long; a blob write is a ledger write: it waits for the ledger. */
  readonly checked: (value: string) => Promise<TextRef>;
}

export function withDefaults(deps: ActivityDeps): Deps {
  const env = deps.env ?? process.env;
  const blobs = deps.blobs ?? new LedgerBlobStore(deps.ledger);
  const specs = new SpecStore(blobs);
  const inlineTextLimit = deps.inlineTextLimit ?? DEFAULT_INLINE_TEXT_LIMIT;
  const redactors = new WeakMap<Catalog, Redactor>();

  /** Without a readable catalog: the credential store's values and `extra`. */
  function redactorFor(extra: readonly string[] = []): Redactor {
    let catalog: Catalog | undefined;
    try {
      catalog = deps.catalog();
    } catch {
      catalog = undefined;
    }
    const known = catalog ?? { agents: [], harnesses: [] };
    if (extra.length > 0 || !catalog) return harnessRedactor(known as Catalog, deps.credentials, env, extra);
    let base = redactors.get(catalog);
    if (!base) redactors.set(catalog, (base = harnessRedactor(catalog, deps.credentials, env)));
    return base;
  }

  function provider(name: string): SandboxProvider {
    const p = deps.sandboxes[name];
    if (!p) {
      throw ApplicationFailure.nonRetryable(
        `Sandbox provider "${name}" is not configured on this worker (available: ${Object.keys(deps.sandboxes).join(', ')}). Fix sandbox.provider in the catalog or start the worker with that provider.`,
        FailureTypes.SandboxProviderUnknown,
      );
    }
    return p;
  }

  return {
    ...deps,
    gateways: deps.gateways ?? new GatewayRegistry(),
    approvalWakeups: deps.approvalWakeups ?? new ApprovalWakeups(),
    turnStops: deps.turnStops ?? new TurnStops(),
    homeTemplates: deps.homeTemplates ?? new HomeTemplates({ warn: (message) => console.warn(message) }),
    env,
    blobs,
    inlineTextLimit,
    specs,
    redactorFor,
    provider,
    loadSpec: (hash) => mapped(() => specs.load(hash)),
    text: (ref) => mapped(() => resolveText(blobs, ref)),
    checked: (value) => waitForLedger(() => claimCheck(blobs, value, inlineTextLimit)),
  };
}
