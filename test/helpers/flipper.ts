/**
 * The directory flipper of the symlink-race tests: a Node script, run inside the workspace (the
 * sandbox's own Node on container providers), that renames each of its arguments in turn to
 * `race/d` and back, as fast as it can, so `race/d` keeps changing between a real directory and
 * links elsewhere while tools resolve paths through it. It prints "flipping" when it starts and
 * "flips N" when `race/stop` appears (looked for every `stopEvery` flips).
 */
export function flipperScript(stopEvery: number): string {
  return `const fs = require("fs");
const names = process.argv.slice(2);
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
    fs.renameSync("race/d", n);
    flips++;
  }
  if (flips % ${stopEvery} < names.length && fs.existsSync("race/stop")) break;
}
process.stdout.write("flips " + flips + "\\n");
`;
}
