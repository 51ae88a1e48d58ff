/** The command line's usage text: `--help` prints it whole, `help COMMAND` its entries (help.ts). Light: no SDK. */
import { exitCodeTable } from './exit-codes.js';

export const usage = `durable-harness — run coding-agent CLIs as durable Temporal workflows

Usage:
  durable-harness dev [--demo] [--exit] [--port 7233] [--ui-port 8233]
                                      embedded Temporal dev server (state in <data>/temporal.db) + Web UI + worker;
                                      --demo starts the demo agent and follows it; --exit stops when it ends
  durable-harness worker              a worker on the task queue
  durable-harness run AGENT TASK [--wait] [--detach] [--json] [--id ID] [--tenant T] [--user U]
                         [--repo SOURCE] [--ref REF] [--branch NAME]
                                      start a run and follow it until it ends or needs a person
                                      (--wait: keep following while it waits; --json: JSON lines;
                                      --repo/--ref/--branch: the run's repository, docs/repositories.md)
  durable-harness status RUN_ID [--json]
  durable-harness logs RUN_ID [--follow] [--json] [--since CURSOR]
                                      the run's events (harness activity, tool use, usage, approvals, steps, its
                                      end) from the ledger; --follow: until the run ends (exit code as status);
                                      --since: after that event's cursor
  durable-harness list [--status S] [--agent A] [--tenant T] [--limit 20] [--json]
  durable-harness cancel RUN_ID [--reason TEXT]
  durable-harness retry RUN_ID        run the failed turn of an awaiting_operator run again
  durable-harness abandon RUN_ID [--reason TEXT]
                                      end an awaiting_operator run as failed
  durable-harness reply RUN_ID TEXT   answer a run that waits for a reply (or --file FILE, - for stdin; at most
                                      4 MiB, over 16 Ki characters it travels by reference through the ledger)
  durable-harness approvals [RUN_ID] [--json]
                                      permission requests waiting for an operator (of every open run, or of one)
  durable-harness network RUN_ID [--refused | --loopback] [--json] [--limit 100] [--after SEQ]
                                      the run's requests through its egress gateway, from the ledger (--refused:
                                      only the refused; --after: the page after that SEQ), and what it metered;
                                      --loopback: its reads through the MCP loopback (docs/mcp.md)
  durable-harness diff RUN_ID [--stat] [--json]
                                      what a run on a repository delivered: its patch from the ledger
                                      (--stat: the diff stat; --json: the deliverable's record)
  durable-harness approve RUN_ID REQUEST [--edit JSON] [--scope once|session] [--by NAME]
                                      allow it (--edit: fields replacing the tool input's, e.g. '{"command":"ls"}')
  durable-harness deny RUN_ID REQUEST [--reason TEXT] [--by NAME]
                                      deny it; the reason is shown to the harness
  durable-harness codec-server [--codec-port 8234] [--cors-origin URL]... [--allow-encode]
                                      decode encrypted payloads for the Web UI (keys and access tokens from the
                                      environment; --allow-encode also serves /encode)
  durable-harness codec-token         print a new random access token for the codec server
  durable-harness help [COMMAND]      a command's usage (or COMMAND --help); --version: the version
  durable-harness completion bash|zsh shell completion: eval "$(durable-harness completion bash)"
  durable-harness operator keygen --name NAME [--out FILE]
                                      a new operator key (Ed25519) and the entry for the workers' operators file
  durable-harness operator token [--key FILE] [--namespace NS] [--ttl 8h]
                                      a codec-server access token signed with your key (needs the role "read")

Operator decisions (approve, deny, reply, retry, abandon, cancel) are signed with --key FILE or
DURABLE_HARNESS_OPERATOR_KEY_FILE (or the key file's text in DURABLE_HARNESS_OPERATOR_KEY). Workers run with
DURABLE_HARNESS_DECISIONS=signed (the default of \`worker\`; operators from DURABLE_HARNESS_OPERATORS_FILE) or
trusted-network (the default of \`dev\`: unsigned decisions are taken and recorded as unauthenticated:<--by>).

Common options (or environment):
  --address HOST:PORT   TEMPORAL_ADDRESS            (default 127.0.0.1:7233)
  --namespace NAME      TEMPORAL_NAMESPACE          (default "default")
  --profile NAME        TEMPORAL_PROFILE            (default "default") a profile of the Temporal config file
  --config-file FILE    TEMPORAL_CONFIG_FILE        (default ~/.config/temporalio/temporal.toml, if present)
  --tls                 TEMPORAL_TLS=true           TLS with the system's CAs (implied by the flags below)
  --tls-ca-path FILE    TEMPORAL_TLS_SERVER_CA_CERT_PATH
  --tls-cert-path FILE  TEMPORAL_TLS_CLIENT_CERT_PATH   mTLS: the client certificate and its key
  --tls-key-path FILE   TEMPORAL_TLS_CLIENT_KEY_PATH
  --tls-server-name N   TEMPORAL_TLS_SERVER_NAME
                        TEMPORAL_API_KEY            an API key (implies TLS); from the environment or a profile only
  --task-queue NAME     DURABLE_HARNESS_TASK_QUEUE  (default "durable-harness")
  --catalog FILE        DURABLE_HARNESS_CATALOG     (default config/default.yaml)
  --data DIR            DURABLE_HARNESS_DATA        (default .data)

Encrypted payloads (off unless keys are set; workers, clients and the codec server need the same keys):
  DURABLE_HARNESS_PAYLOAD_KEYS="ID:BASE64KEY,..."   or DURABLE_HARNESS_PAYLOAD_KEYS_FILE=FILE
  DURABLE_HARNESS_PAYLOAD_KEY_ID=ID                  the key new payloads use (default: the first listed)
  DURABLE_HARNESS_CODEC_TOKENS="NAME=TOKEN[@NS|NS],..."  or DURABLE_HARNESS_CODEC_TOKENS_FILE=FILE
                                                     who may call the codec server (required by codec-server)
  \`dev\` then also starts the codec server (--codec-port, default 8234) and wires the Web UI to it with a token of
  its own (tokens you configure work beside it).

Telemetry (off unless set; dev and worker): see docs/observability.md
  OTEL_EXPORTER_OTLP_ENDPOINT / OTEL_EXPORTER_OTLP_TRACES_ENDPOINT   OTLP/HTTP traces (run, turn, activity spans)
  DURABLE_HARNESS_PROMETHEUS_ADDRESS=HOST:PORT                      Prometheus /metrics (or OTEL_EXPORTER_OTLP_METRICS_ENDPOINT)

Exit codes:
${exitCodeTable.map(([code, what]) => `  ${String(code).padStart(3)}  ${what}`).join('\n')}`;
