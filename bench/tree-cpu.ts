/**
 * The CPU time of a process's live descendants (user + system, each one's own, not what its
 * reaped children used), from /proc. For the server, those are its helpers: the local provider's
 * executors and the workspaces' launchers, which do part of a call's work in other processes. A
 * command the helpers started is counted only while it is alive, and a no-op command is not alive
 * when this is read, so the sum is the helpers' own.
 */
import { execFileSync } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";

let ticksPerSecond: number | undefined;
function clockTicks(): number {
  if (ticksPerSecond === undefined) {
    try {
      ticksPerSecond = Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
    } catch {
      ticksPerSecond = 100;
    }
  }
  return ticksPerSecond;
}

/** Microseconds of CPU used so far by the live descendants of `root` (not `root` itself). */
export function descendantsCpuUs(root: number): number {
  const children = new Map<number, number[]>();
  const ticks = new Map<number, number>();
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let stat: string;
    try {
      stat = readFileSync(`/proc/${entry}/stat`, "latin1");
    } catch {
      continue;
    }
    // After the command name in parentheses: state, ppid (field 4), …, utime (14), stime (15).
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    const pid = Number(entry);
    const ppid = Number(f[1]);
    ticks.set(pid, Number(f[11]) + Number(f[12]));
    const list = children.get(ppid);
    if (list) list.push(pid);
    else children.set(ppid, [pid]);
  }
  let sum = 0;
  const todo = [...(children.get(root) ?? [])];
  while (todo.length > 0) {
    const pid = todo.pop() as number;
    sum += ticks.get(pid) ?? 0;
    todo.push(...(children.get(pid) ?? []));
  }
  return (sum * 1e6) / clockTicks();
}
