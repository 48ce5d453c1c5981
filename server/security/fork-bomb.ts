/**
 * The fork-bomb check's reading of a script's own functions: which of them call one another.
 */

/**
 * Functions that call one another in a cycle (a self-call included), as a list of names, or
 * undefined: the call graph of a script's own functions.
 */
export function recursion(calls: Map<string, Set<string>>): string[] | undefined {
  const state = new Map<string, "open" | "done">();
  const path: string[] = [];
  const visit = (f: string): string[] | undefined => {
    state.set(f, "open");
    path.push(f);
    for (const g of calls.get(f) ?? []) {
      if (!calls.has(g)) continue;
      if (state.get(g) === "open") return path.slice(path.indexOf(g));
      if (state.get(g) === undefined) {
        const c = visit(g);
        if (c) return c;
      }
    }
    path.pop();
    state.set(f, "done");
    return undefined;
  };
  for (const f of calls.keys()) {
    if (state.get(f) === undefined) {
      const c = visit(f);
      if (c) return c;
    }
  }
  return undefined;
}
