/**
 * The fork-bomb check: which of a script's own functions call one another, and how.
 *
 * Recursion alone is ordinary shell (`f(){ [ $1 -gt 0 ] && f $(($1-1)); }; f 3`, a directory
 * walk): each call waits for the one it makes, so at most one copy runs at a time, and runaway
 * recursion ends in bash's own limits, in one process. What makes a fork bomb is a call that does
 * not wait: a function that calls itself, or a partner that calls it back, in the background
 * (`f &`), in a pipeline (`f | f`, each part its own process), as a coprocess or in a process
 * substitution (`<(f)`), so that copies multiply until the machine runs out of processes. That
 * shape is refused: a cycle of calls with at least one such call in it. Calls inside a literal
 * `eval` string count too (`:(){ eval ':|:&'; };:`), read as running in the background when the
 * string holds a `|` or `&`.
 */
import { literal, type Node, sourceText } from "./shell-parser.ts";

/** A script's functions: each definition's text, and whom each calls, with whether any such call does not wait. */
export interface CallGraph {
  definitions: Map<string, string>;
  calls: Map<string, Map<string, boolean>>;
}

/** Whether the command `call` runs without its caller waiting for it, within `body`. */
function concurrent(call: Node, body: Node): boolean {
  for (let n: Node | null = call; n !== null && n.id !== body.id; n = n.parent) {
    if (n.type === "process_substitution") return true;
    const parent = n.parent;
    if (parent?.type === "pipeline") return true;
    if (n.nextSibling?.type === "&") return true;
  }
  return false;
}

/** The call graph of the functions `root` defines. */
export function callGraph(root: Node): CallGraph {
  const definitions = new Map<string, string>();
  const calls = new Map<string, Map<string, boolean>>();
  for (const fn of root.descendantsOfType("function_definition")) {
    const name = fn?.childForFieldName("name")?.text;
    const body = fn?.childForFieldName("body");
    if (name === undefined || fn === null || body === null || body === undefined) continue;
    if (!definitions.has(name)) definitions.set(name, sourceText(fn));
    const called = calls.get(name) ?? new Map<string, boolean>();
    const add = (callee: string, async: boolean) => called.set(callee, (called.get(callee) ?? false) || async);
    for (const cmd of body.descendantsOfType("command")) {
      if (cmd === null) continue;
      const nameNode = cmd.childForFieldName("name");
      const callee = nameNode === null ? undefined : literal(nameNode);
      if (callee === undefined) continue;
      const args = cmd.childrenForFieldName("argument").map((a) => (a === null ? undefined : literal(a)));
      const async = concurrent(cmd, body);
      if (callee === "coproc" && args[0] !== undefined) add(args[0], true);
      else if (callee === "eval" && !args.includes(undefined)) {
        const text = args.join(" ");
        for (const w of text.split(/[\s|&;()<>`$"'{}]+/)) if (w !== "") add(w, async || /[|&]/.test(text));
      } else add(callee, async);
    }
    calls.set(name, called);
  }
  return { definitions, calls };
}

/**
 * The fork-bomb shape in `graph`: the function making a call that does not wait and the cycle
 * that call closes (the function itself, or partners calling back), or undefined.
 */
export function forkBomb(graph: CallGraph): { name: string; cycle: string[] } | undefined {
  const { calls } = graph;
  /** A path of calls from `from` to `to` (both included), or undefined. */
  const pathTo = (from: string, to: string): string[] | undefined => {
    const previous = new Map<string, string>([[from, ""]]);
    const queue = [from];
    while (queue.length > 0) {
      const f = queue.shift() as string;
      if (f === to) {
        const path = [to];
        for (let at = previous.get(to) as string; at !== ""; at = previous.get(at) as string) path.unshift(at);
        return path;
      }
      for (const g of calls.get(f)?.keys() ?? []) {
        if (!calls.has(g) || previous.has(g)) continue;
        previous.set(g, f);
        queue.push(g);
      }
    }
    return undefined;
  };
  for (const [f, callees] of calls) {
    for (const [g, async] of callees) {
      if (!async || !calls.has(g)) continue;
      const back = pathTo(g, f);
      if (back !== undefined) return { name: f, cycle: g === f ? [f] : [f, ...back.slice(0, -1)] };
    }
  }
  return undefined;
}
