/**
 * The directory flipper of the symlink-race tests: a Node script, run inside the workspace (the
 * sandbox's own Node on container providers), that renames each of its arguments in turn to
 * `race/d` and back, over and over, so `race/d` keeps changing between a real directory and
 * links elsewhere while tools resolve paths through it. It prints "flipping" when it starts and
 * "flips N" when `race/stop` appears (looked for every `stopEvery` flips).
 *
 * With each argument in place as `race/d` it sleeps `pauseMs`: flat out, one flipper per
 * provider kept a host core each busy for a CI run's race tests (20 million flips in one of them,
 * 2 000 per operation), starving everything else on a 2-core host. With the pause a flip still
 * comes every few hundred microseconds, many times within one tool call's milliseconds (the
 * outcome counts in the tests' logs show the race stays live).
 */
export function flipperScript(stopEvery: number, pauseMs = 0.1): string {
  return `const fs = require("fs");
const names = process.argv.slice(2);
const nap = new Int32Array(new SharedArrayBuffer(4));
let flips = 0;
process.stdout.write("flipping\\n");
for (;;) {
  for (const n of names) {
    try {
      fs.renameSync(n, "race/d");
    } catch {
      // A write through race/d while it was absent made it a directory: clear it and go on.
      try {
        fs.rmSync("race/d", { recursive: true, force: true });
      } catch {
        // Writes keep landing in it; try again next round.
      }
      continue;
    }
    // race/d stays this state for a moment; the renames themselves are instants.
    if (${pauseMs} > 0) Atomics.wait(nap, 0, 0, ${pauseMs});
    fs.renameSync("race/d", n);
    flips++;
  }
  if (flips % ${stopEvery} < names.length && fs.existsSync("race/stop")) break;
}
process.stdout.write("flips " + flips + "\\n");
`;
}
