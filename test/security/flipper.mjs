// Attacker for the symlink-race tests: flips `<dir>/d` between a real directory (holding `f`) and a symbolic
// link to each target in turn, in a tight loop, until `<dir>/.stop-flipping` appears or `maxMs` passes.
// Prints {"flips":N,"errors":M} every 4096 flips and when it stops (a SIGKILL leaves the last progress line).
// Runs on the host (local provider) and inside a container.
//   node flipper.mjs DIR TARGET[,TARGET...] MAX_MS
import fs from 'node:fs';

const [dir, targetList, maxMs] = process.argv.slice(2);
const targets = targetList.split(',');
const d = `${dir}/d`;
const real = `${dir}/d.real`;
const stop = `${dir}/.stop-flipping`;
const deadline = Date.now() + Number(maxMs);

function clear() {
  try {
    if (fs.lstatSync(d).isSymbolicLink()) fs.unlinkSync(d);
    else fs.rmSync(d, { recursive: true, force: true });
  } catch {
    // already gone
  }
}

let flips = 0;
let errors = 0;
for (;;) {
  if (flips % 64 === 0 && (Date.now() > deadline || fs.existsSync(stop))) break;
  for (const target of targets) {
    try {
      if (!fs.existsSync(real)) {
        fs.mkdirSync(real);
        fs.writeFileSync(`${real}/f`, 'inside');
      }
      clear(); // an action may have created d as a directory
      fs.renameSync(real, d); // d is a real directory ...
      fs.renameSync(d, real);
      fs.symlinkSync(target, d); // ... and now a link out
      fs.unlinkSync(d);
    } catch {
      errors += 1;
    }
    flips += 1;
    if (flips % 4096 === 0) process.stdout.write(`${JSON.stringify({ flips, errors })}\n`);
  }
}
clear();
process.stdout.write(`${JSON.stringify({ flips, errors })}\n`);
