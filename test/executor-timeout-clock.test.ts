/**
 * A command's timeout is decided by the precise monotonic clock, not only by the event loop's
 * (process-runner.ts): libuv fires timers by CLOCK_MONOTONIC_COARSE where that clock is fine
 * enough, as it is under gVisor, which computes it apart from the CLOCK_MONOTONIC that
 * `performance.now` reads. A timer that fires before the precise clock reached the deadline is
 * armed again. Tested on the runner itself,
 * with a clock the test holds still: no real clock can be made to jump on purpose here.
 */
import test, { type ExecutionContext } from "ava";
import { runProcess } from "../providers/executor/process-runner.ts";
import type { ExecExit } from "../providers/executor/types.ts";

/** What this process writes on its stderr during the test (still written through). */
function stderrOf(t: ExecutionContext): string[] {
  const said: string[] = [];
  const write = process.stderr.write.bind(process.stderr);
  process.stderr.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
    said.push(String(chunk));
    return (write as (c: string | Uint8Array, ...r: unknown[]) => boolean)(chunk, ...rest);
  }) as typeof process.stderr.write;
  t.teardown(() => {
    process.stderr.write = write;
  });
  return said;
}

for (const to of ["stderr", "warn"] as const) {
  test.serial(`a timeout timer that fires before the monotonic clock reached the deadline is armed again: the command runs on, and times out once the clock gets there (said on ${to})`, async (t) => {
    let frozen = true;
    const now = () => (frozen ? 0 : 1e9);
    const said = stderrOf(t);
    const warned: string[] = [];
    const warn = to === "warn" ? { warn: (line: string) => void warned.push(line) } : {};
    let out = "";
    let exit: ExecExit | undefined;
    // Its 400 ms timer fires twice while it sleeps a second: the clock says no time passed.
    for await (const ev of runProcess({ argv: ["sh", "-c", "sleep 1; echo alive; exec sleep 30"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", timeoutMs: 400, killGraceMs: 500, now, ...warn })) {
      if (ev.type === "stdout") {
        out += Buffer.from(ev.data).toString();
        if (out.includes("alive")) frozen = false;
      } else if (ev.type === "exited") {
        exit = ev.exit;
      }
    }
    t.is(out, "alive\n", "the command was stopped before the clock reached its deadline");
    t.true(exit?.timedOut, JSON.stringify(exit));
    t.is(exit?.signal, "SIGTERM");
    // Said once, however many times the timer was armed again, where the caller asked.
    const early = (to === "warn" ? warned : said).filter((s) => s.includes("timeout timer fired"));
    t.is(early.length, 1, said.join(""));
    t.regex(early[0], /a command's 400 ms timeout timer fired 400 ms before the monotonic clock reached its deadline; armed again/);
    if (to === "warn") t.deepEqual(said.filter((s) => s.includes("timeout timer fired")), []);
  });
}

test.serial("a timeout on time is not armed again: the command is stopped and nothing is said", async (t) => {
  const said = stderrOf(t);
  let exit: ExecExit | undefined;
  for await (const ev of runProcess({ argv: ["sleep", "30"], env: { PATH: "/usr/bin:/bin" }, cwd: "/", timeoutMs: 200, killGraceMs: 500 })) {
    if (ev.type === "exited") exit = ev.exit;
  }
  t.true(exit?.timedOut, JSON.stringify(exit));
  t.is(exit?.signal, "SIGTERM");
  t.deepEqual(said.filter((s) => s.includes("timeout timer fired")), []);
});
