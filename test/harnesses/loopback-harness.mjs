#!/usr/bin/env node
/**
 * A stdio-JSON harness that uses the run's MCP loopback by hand (DURABLE_HARNESS_MCP_URL / _TOKEN), as a harness
 * author's own program would, and misbehaves on purpose: it also tries a made-up token, writes its real token into
 * the workspace and into its reply. Turn 1 reads `run_status` and asks for an `echo` action; turn 2 reads the steps
 * (the action's result among them) and succeeds with what it read.
 */
import { writeFileSync } from 'node:fs';
import readline from 'node:readline';

const url = process.env.DURABLE_HARNESS_MCP_URL;
const token = process.env.DURABLE_HARNESS_MCP_TOKEN;
const out = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

async function rpc(method, params, auth = token) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', authorization: `Bearer ${auth}` },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method, params }),
  });
  return { status: res.status, body: await res.json().catch(() => undefined) };
}

const tool = async (name, args = {}) => (await rpc('tools/call', { name, arguments: args })).body?.result?.content?.[0]?.text ?? '';

const lines = readline.createInterface({ input: process.stdin });
lines.once('line', async (line) => {
  const request = JSON.parse(line);
  out({ type: 'session', id: `loopback-${request.turn}` });
  if (!url || !token) {
    out({ type: 'complete', text: JSON.stringify({ step: 'failed', reason: 'no loopback in the environment' }) });
    process.exit(0);
  }
  if (request.turn === 1) {
    writeFileSync('.loopback-token', token);
    const forged = await rpc('tools/call', { name: 'run_status', arguments: {} }, 'dh-mcp-forged-token-0000000000000000');
    const status = JSON.parse(await tool('run_status'));
    out({ type: 'activity', description: `forged token answered ${forged.status}; turn ${status.turn}` });
    out({ type: 'complete', text: JSON.stringify({ step: 'actions', actions: [{ name: 'echo', params: { text: `turn ${status.turn} of ${status.workflowId}` } }] }) });
  } else {
    const steps = JSON.parse(await tool('list_steps'));
    const echoed = JSON.stringify(steps).includes('turn 1 of');
    out({ type: 'complete', text: JSON.stringify({ step: 'success', result: `steps ${steps.steps.length}, echo seen ${echoed}, token ${token}` }) });
  }
  process.exit(0);
});
