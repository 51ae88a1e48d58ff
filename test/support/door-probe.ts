/**
 * A probe that runs INSIDE a sandbox with a gateway policy and reports, as one JSON line, what it reached: its door
 * (127.0.0.1:<gatewayPort>), TCP targets given by the test (the host's loopback services, host interfaces, a public
 * IP), a DNS lookup, a UDP datagram, and whether it could kill the forwarder (found by its name, so `not found` fails the test too). Shared by the local and Docker tests.
 */
export const doorProbe = `
const net = require('net'), dgram = require('dgram'), dns = require('dns'), fs = require('fs');
const [targetsJson, udpPort] = process.argv.slice(1);
const targets = JSON.parse(targetsJson);
const tcp = ([host, port]) => new Promise((resolve) => {
  const s = net.connect({ host, port, timeout: 3000 });
  let data = '';
  s.on('data', (d) => { data += d; });
  s.on('connect', () => setTimeout(() => { s.destroy(); resolve(data ? 'connected:' + data.trim() : 'connected'); }, 300));
  s.on('timeout', () => { s.destroy(); resolve('timeout'); });
  s.on('error', (e) => resolve(e.code || e.message));
});
(async () => {
  const out = {};
  for (const [name, target] of Object.entries(targets)) out[name] = await tcp(target);
  out.dns = await new Promise((r) => dns.lookup('exfiltrate.durable-harness.example', (e) => r(e ? e.code : 'resolved')));
  out.udp = await new Promise((r) => { const s = dgram.createSocket('udp4'); s.send('leak', Number(udpPort), '127.0.0.1', (e) => { s.close(); r(e ? e.code : 'sent'); }); });
  // Built at run time: the probe's own ancestors carry this source in their argv, and must not match.
  const mark = ['durable-harness', 'forwarder:'].join(' ');
  // The local sandbox's forwarder is the containment helper's (named dh-forwarder), a Docker sandbox's this script.
  const isForwarder = (p) => { try { return fs.readFileSync('/proc/' + p + '/comm', 'utf8').trim() === 'dh-forwarder' || fs.readFileSync('/proc/' + p + '/cmdline', 'utf8').includes(mark); } catch { return false; } };
  const forwarder = fs.readdirSync('/proc').filter((p) => /^\\d+$/.test(p)).filter((p) => p !== String(process.pid)).find(isForwarder);
  try { process.kill(Number(forwarder), 'SIGKILL'); out.killForwarder = forwarder ? 'killed' : 'not found'; } catch (e) { out.killForwarder = e.code; }
  console.log(JSON.stringify(out));
})();
`;
