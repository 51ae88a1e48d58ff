/**
 * The bare Temporal wrapper, the floor the project is measured against (issue 22): a workflow whose turn is one
 * regular activity that spawns the same stdio-JSON harness, writes its turn line, reads its stdout to the end and
 * returns the envelope's step — no sandbox, ledger, permissions, actions, heartbeats or accounting. What
 * durable-harness costs per turn is its turn over this one.
 */
import { spawn } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import path from 'node:path';
import { createInterface } from 'node:readline';

export interface BareTurnInput {
  readonly executable: string;
  readonly args: readonly string[];
  /** The run's workspace (the harness's cwd and its `workspace`). */
  readonly workspace: string;
  readonly prompt: string;
  readonly turn: number;
  readonly sessionId?: string;
  readonly model: string;
}

export interface BareTurnResult {
  readonly step: string;
  readonly sessionId?: string;
}

export function createBareActivities() {
  return {
    async bareTurn(input: BareTurnInput): Promise<BareTurnResult> {
      mkdirSync(input.workspace, { recursive: true });
      // A small environment, as a sandbox gives (an inherited NODE_EXTRA_CA_CERTS alone costs a node harness ~25 ms of CPU).
      const env = { PATH: process.env.PATH ?? '/usr/bin:/bin', HOME: input.workspace };
      const child = spawn(input.executable, [...input.args], { cwd: input.workspace, env, stdio: ['pipe', 'pipe', 'ignore'] });
      const exited = new Promise<number | null>((resolve, reject) => {
        child.once('error', reject);
        child.once('exit', (code) => resolve(code));
      });
      child.stdin.write(`${JSON.stringify({ type: 'turn', prompt: input.prompt, turn: input.turn, sessionId: input.sessionId ?? null, model: input.model, workspace: path.resolve(input.workspace), permissions: 'auto' })}\n`);
      let sessionId = input.sessionId;
      let text: string | undefined;
      for await (const line of createInterface({ input: child.stdout })) {
        if (!line.trim()) continue;
        const message = JSON.parse(line) as { type: string; id?: string; text?: string; message?: string };
        if (message.type === 'session') sessionId = message.id;
        if (message.type === 'complete') text = message.text;
        if (message.type === 'error') throw new Error(`the harness failed: ${message.message}`);
      }
      child.stdin.end();
      await exited;
      if (text === undefined) throw new Error('the harness ended without a complete line');
      // The envelope is the reply's JSON object (the demo harness wraps it in a fenced block).
      const step = (JSON.parse(text.slice(text.indexOf('{'), text.lastIndexOf('}') + 1)) as { step: string }).step;
      return { step, ...(sessionId ? { sessionId } : {}) };
    },
  };
}
