import { below, driverHome, parseJsonLine, resumeFailedOnExit, usageOf, type HarnessDriver, type Mapped } from 'durable-harness/adapters';

/** How the driver names its CLI in messages (`resume-failed`). */
const names = { label: 'MyCli' };

/** One stdout line of `my-cli --json` as events; what it does not know is `unknown` (a new line type never breaks a run). */
function mapLine(line: string): Mapped {
  const v = parseJsonLine(line) as { type?: unknown; id?: unknown; text?: unknown; input?: unknown; output?: unknown } | undefined;
  if (v?.type === 'session' && typeof v.id === 'string') return { type: 'session', sessionId: v.id };
  if (v?.type === 'text' && typeof v.text === 'string') return { type: 'text', text: v.text };
  if (v?.type === 'done' && typeof v.text === 'string') {
    return [{ type: 'usage', usage: usageOf({ input: v.input, output: v.output }) }, { type: 'turn-complete', text: v.text }];
  }
  return { type: 'unknown', raw: line };
}

/** The MyCli driver: `my-cli --json [--resume ID]`, the prompt on stdin, its config in `<workspace>/.home/mycli`. */
export const myCli: HarnessDriver = {
  specificationVersion: 'v2',
  driverClass: 'MyCli',
  capabilities: { sessionResume: true, permissionHooks: false, systemPrompt: false },
  vendor: { api: 'any', baseUrl: { config: 'config.json:baseUrl' }, apiKey: { env: 'MYCLI_API_KEY' } },
  mcp: undefined,
  permissions: (posture) => ({ posture, enforced: false, note: 'MyCli has no permission modes: its tools always run.' }),
  prepare: async (fs, turn) => {
    const config = { model: turn.model ?? 'default', baseUrl: turn.baseUrl ?? null };
    await fs.writeFile(below(driverHome(turn, 'mycli'), 'config.json').rel, JSON.stringify(config), { createParents: true, mode: 0o600 });
  },
  command: (turn) => ({
    argv: [turn.executable, ...turn.baseArgs, '--json', ...(turn.resumeSessionId !== undefined ? ['--resume', turn.resumeSessionId] : [])],
    env: { MYCLI_HOME: driverHome(turn, 'mycli').path },
    stdin: turn.prompt,
  }),
  session: () => ({
    kind: 'one-way',
    start: (turn) => ({
      line: mapLine,
      // "no such session" on stderr: the runtime starts a fresh session and replays the conversation.
      exit: (code, stderrTail) => resumeFailedOnExit(names, /no such session/, turn, code, stderrTail),
    }),
  }),
};
